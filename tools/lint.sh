#!/usr/bin/env bash
# clang-format (the repo's .clang-format) and clang-tidy (.clang-tidy) over the C++ sources.
# Needs build/compile_commands.json (tools/setup.sh makes it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mapfile -t sources < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
echo "lint: clang-format on ${#sources[@]} files"
clang-format --dry-run -Werror "${sources[@]}"
mapfile -t units < <(printf '%s\n' "${sources[@]}" | grep -E '^(planner|profiles|schedules|tools|runtime)/.*\.cpp$')
echo "lint: clang-tidy on ${#units[@]} files"
log=build/clang-tidy.log
status=0
printf '%s\n' "${units[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy -p build --quiet --extra-arg=-Wno-unknown-warning-option \
  --warnings-as-errors='*' >"$log" 2>&1 || status=$?
grep -v -E 'warnings? generated|^Suppressed|^Use -header-filter|treated as errors' "$log" || true
if [ "$status" -ne 0 ]; then echo "lint: clang-tidy found problems (above)"; exit 1; fi
echo "lint: clean"
