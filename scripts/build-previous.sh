#!/usr/bin/env bash
# Builds the scg binary of the previous release (tests/upgrade/previous-version)
# from this repository's own history into build/previous/, for the mixed-version
# test (tests/integration/upgrade_test.cpp). Once: build/previous/stamp holds
# the commit built, and a second run with the same commit does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r tag commit < <(grep -v '^#' tests/upgrade/previous-version)
out=build/previous
if rev=$(git rev-parse -q --verify "refs/tags/$tag^{commit}" 2> /dev/null); then
  :
elif rev=$(git rev-parse -q --verify "$commit^{commit}" 2> /dev/null); then
  :
else
  echo "build-previous: neither tag $tag nor commit $commit (tests/upgrade/previous-version) is in this" \
    "clone's history; fetch it (git fetch --tags, or a clone that is not shallow)" >&2
  exit 1
fi
if [[ -x $out/build/scg && "$(cat "$out/stamp" 2> /dev/null)" == "$rev" ]]; then
  exit 0
fi
echo "build-previous: building scg $tag ($rev) into $out/"
rm -rf "$out"
mkdir -p "$out/src"
git archive "$rev" | tar -x -C "$out/src"
cmake -S "$out/src" -B "$out/build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" > /dev/null
cmake --build "$out/build" -j2 --target scg
echo "$rev" > "$out/stamp"
