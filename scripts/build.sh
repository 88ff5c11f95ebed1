#!/usr/bin/env bash
# Configures and builds scg into build/ (two jobs: the machine has two cores),
# then, for a whole build (no SCG_TARGETS), the previous release's scg into
# build/previous/ for the mixed-version tests (scripts/build-previous.sh: once, cached).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" > /dev/null
cmake --build build -j2 ${SCG_TARGETS:+--target $SCG_TARGETS}
if [[ -z ${SCG_TARGETS:-} ]]; then
  scripts/build-previous.sh
fi
