#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up, build (warnings are errors), check formatting,
# clang-tidy and the narrative check, build the quickstart's unity build of the CLI, run every
# test; then the unit tests again under ASan + UBSan and a short run of every fuzz target
# (docs/development/fuzzing.md). Each stage's wall time is printed as it ends and again as a
# summary, so a slow CI run shows where its time went. Usage: bash tools/test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
timings=()
stage() {
  local name=$1 start
  shift
  start=$(date +%s)
  "$@"
  timings+=("$(printf '%-9s %5d s' "$name" $(($(date +%s) - start)))")
  echo "test.sh: ${timings[-1]}"
}
stage setup bash tools/setup.sh
stage lint bash tools/dev/lint.sh
stage unity bash tools/dev/check_unity_build.sh
stage ctest ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 600
stage sanitize bash tools/dev/sanitize.sh
stage fuzz bash tools/dev/fuzz_smoke.sh
echo "test.sh: all stages passed; wall time per stage:"
printf '  %s\n' "${timings[@]}"
