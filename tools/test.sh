#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up, build (warnings are errors), check formatting
# and clang-tidy, run every test; then the unit tests again under ASan + UBSan and a short run of
# every fuzz target (docs/fuzzing.md). Usage: bash tools/test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh
bash tools/lint.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 600
bash tools/sanitize.sh
bash tools/fuzz_smoke.sh
