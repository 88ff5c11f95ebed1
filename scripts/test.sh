#!/usr/bin/env bash
# Sets up a fresh Debian bookworm machine, builds scg and runs the whole test
# suite (unit and integration tests) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 "$@"
