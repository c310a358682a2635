#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up, build (warnings are errors), check formatting,
# clang-tidy and the narrative check, build the quickstart's unity build of the CLI, run every
# test; then the unit tests again under ASan + UBSan and a short run of every fuzz target
# (docs/development/fuzzing.md). Each stage's wall time is printed as it ends and again as a
# summary, so a slow CI run shows where its time went.
# Usage: bash tools/test.sh   (-h or --help: what it does)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ $# -gt 0 ]; then
  case "$1" in
    -h | --help)
      cat <<'USAGE'
Usage: bash tools/test.sh
Everything CI runs, each stage timed: setup (tools/setup.sh, every target, tests on, warnings
are errors), lint (tools/dev/lint.sh), unity (tools/dev/check_unity_build.sh), ctest (every test
of build/; none found is a failure), sanitize (tools/dev/sanitize.sh) and fuzz
(tools/dev/fuzz_smoke.sh). Takes no arguments (docs/development/testing.md).
USAGE
      exit 0
      ;;
  esac
  echo "test.sh: unknown argument '$1' (it takes none; -h or --help says what it does)" >&2
  exit 2
fi
timings=()
stage() {
  local name=$1 start
  shift
  start=$(date +%s)
  "$@"
  timings+=("$(printf '%-9s %5d s' "$name" $(($(date +%s) - start)))")
  echo "test.sh: ${timings[-1]}"
}
# Tests and -Werror on whatever an earlier tools/setup.sh -D... left in build/'s cache.
stage setup bash tools/setup.sh -DPIPEPLAN_TESTS=ON -DPIPEPLAN_WERROR=ON
stage lint bash tools/dev/lint.sh
stage unity bash tools/dev/check_unity_build.sh
stage ctest ctest --test-dir build --output-on-failure --no-tests=error -j "$(nproc)" --timeout 600
stage sanitize bash tools/dev/sanitize.sh
stage fuzz bash tools/dev/fuzz_smoke.sh
echo "test.sh: all stages passed; wall time per stage:"
printf '  %s\n' "${timings[@]}"
