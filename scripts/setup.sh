#!/usr/bin/env bash
# Installs the Debian bookworm packages scg needs to build, test and benchmark.
# Idempotent; skips apt when everything is already installed.
#
#   scripts/setup.sh           what the build, the tests and the demo need
#   scripts/setup.sh --bench   that, plus the benchmark's comparison proxies and
#                              h2load (scripts/bench.sh calls this when they are missing)
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libcaf-dev libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libyaml-cpp-dev libcpp-httplib-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  catch2 libasio-dev libssl-dev libjemalloc-dev libnghttp2-dev zlib1g-dev
  curl procps iproute2 python3 python3-yaml openssl
  chromium prometheus
)

# Bench only: nginx and HAProxy to compare scg with, h2load as a second load
# generator. bench.sh runs its own instances from its temp dir; it needs no
# system service.
bench_packages=(nginx-light haproxy nghttp2-client)

case "${1:-}" in
  "") ;;
  --bench) packages+=("${bench_packages[@]}") ;;
  *)
    echo "usage: scripts/setup.sh [--bench]" >&2
    exit 2
    ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
