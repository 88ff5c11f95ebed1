#!/usr/bin/env bash
# Runs the nemesis (tests/integration/nemesis_test.cpp) with a seed and a
# duration: 3-5 scg replicas and 3 fake backends in network namespaces the
# test makes and removes, many client sessions doing every RPC through random
# replicas, and kills, freezes, partitions, restarts, joins, leaves and
# backend kills at seeded random times. Prints the checker's counts (one
# name=value a line, the figures docs/cluster.md's table needs) and exits 0
# when there was no violation. A failed run keeps its history
# (nemesis-SEED.jsonl in SCG_NEMESIS_OUT) and the replicas' logs; check a
# kept history again with SCG_NEMESIS_REPLAY=FILE.
#
#   sudo bash scripts/nemesis.sh SEED SECS      e.g. 17 1800 for the 30-minute run
#
# Environment (optional): SCG_BUILD_DIR (build), SCG_NEMESIS_REPLICAS (4),
# SCG_NEMESIS_CLIENTS (6), SCG_NEMESIS_OUT (the current directory),
# SCG_NEMESIS_KEEP=1 (keep the history of a passed run too), SCG_NEMESIS_FAULTS
# (the fault kinds to draw from, e.g. "partition,split"; all by default).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -ne 2 || ! "$1" =~ ^[0-9]+$ || ! "$2" =~ ^[0-9]+$ ]]; then
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
build="${SCG_BUILD_DIR:-build}"
[[ -x "$build/integration_tests" ]] || { echo "nemesis.sh: $build/integration_tests is not built (scripts/build.sh)" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "nemesis.sh: network namespaces need root" >&2; exit 2; }
out="${SCG_NEMESIS_OUT:-$PWD}"
mkdir -p "$out"
echo "nemesis: seed=$1 secs=$2 replicas=${SCG_NEMESIS_REPLICAS:-4} clients=${SCG_NEMESIS_CLIENTS:-6} commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown) started=$(date -u +%FT%TZ)"
start=$(date +%s)
set +e
SCG_NEMESIS_SEED="$1" SCG_NEMESIS_SECS="$2" SCG_NEMESIS_OUT="$out" "$build/integration_tests" "[nemesis]"
rc=$?
set -e
echo "nemesis: wall_secs=$(( $(date +%s) - start )) exit=$rc"
exit $rc
