#!/usr/bin/env bash
# Installs the Debian bookworm packages scg needs to build, test and benchmark.
# Idempotent; skips apt when everything is already installed.
#
#   scripts/setup.sh           what the build, the tests and the demo need,
#                              the real-Spark tier's too (tests/realspark/: Java 17,
#                              two pinned PySpark virtual environments under
#                              build/realspark/, each carrying its Spark server, and
#                              the Go client's modules, the JVM client program
#                              compiled against Spark 4.3's jars); cached after
#                              the first run
#   scripts/setup.sh --bench   that, plus the benchmark's comparison proxies and
#                              h2load (scripts/bench.sh calls this when they are missing)
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libcaf-dev libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libyaml-cpp-dev libcpp-httplib-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  catch2 libasio-dev libssl-dev libjemalloc-dev libnghttp2-dev zlib1g-dev
  curl nghttp2-client procps iproute2 python3 python3-yaml openssl
  chromium prometheus
  openjdk-17-jre-headless openjdk-17-jdk-headless python3-venv
  golang-go golang-github-masterminds-sprig-dev
)

# Bench only: nginx and HAProxy to compare scg with (h2load, the second load
# generator, comes with nghttp2-client above, which the raw HTTP/2 tests use).
# bench.sh runs its own instances from its temp dir; it needs no system service.
bench_packages=(nginx-light haproxy)

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

# --- the real-Spark tier (tests/realspark/): one virtual environment per Spark
# version, from the pinned requirements; a stamp file skips pip next time.
cd "$(dirname "$0")/.."
lab=build/realspark
mkdir -p "$lab"
for v in 4.3 4.0; do
  venv="$lab/py${v/./}"
  req="tests/realspark/requirements-$v.txt"
  stamp="$venv/.scg-requirements"
  if [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then continue; fi
  echo "setup: PySpark $v into $venv (pinned: $req)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
  cp "$req" "$stamp"
done
# The spark-connect-go client program, built here so the tests only run it.
if ! command -v go > /dev/null; then
  echo "setup: the Go toolchain is missing (the real-Spark tier builds tests/realspark/goclient with it)" >&2
  exit 1
fi
if [ ! -x "$lab/goclient" ] || [ -n "$(find tests/realspark/goclient -newer "$lab/goclient" -type f)" ]; then
  echo "setup: building the spark-connect-go test client"
  (cd tests/realspark/goclient && go build -o "../../../$lab/goclient" .)
fi
# The JVM client program (Spark's spark-connect-client-jvm from the Spark 4.3
# distribution's jars/connect-repl): compiled here, its classpath written beside
# it. The client jar comes first; the distribution's other jars (the server's
# own spark-connect jar aside) carry what it loads at run time.
jvm="$lab/jvmclient"
jars=$(ls -d "$PWD/$lab"/py43/lib/python3*/site-packages/pyspark/jars | head -1)
client_jar=$(ls "$jars"/connect-repl/spark-connect-client-jvm_*.jar | head -1)
if [ ! -f "$jvm/classes/JvmClient.class" ] || [ tests/realspark/jvmclient/JvmClient.java -nt "$jvm/classes/JvmClient.class" ] \
    || ! grep -qF "$client_jar" "$jvm/classpath" 2>/dev/null; then
  echo "setup: compiling the Spark Connect JVM test client"
  cp="$client_jar"
  for f in "$jars"/*.jar; do
    case "$(basename "$f")" in spark-connect_*) ;; *) cp="$cp:$f" ;; esac
  done
  mkdir -p "$jvm/classes"
  javac -d "$jvm/classes" -cp "$cp" tests/realspark/jvmclient/JvmClient.java
  echo "$cp" > "$jvm/classpath"
fi
