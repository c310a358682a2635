#!/usr/bin/env bash
# clang-format (the repo's .clang-format) and clang-tidy (.clang-tidy) over the C++ sources, and
# tools/dev/check_narrative.sh over every tracked file.
# Needs build/compile_commands.json (tools/setup.sh makes it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
mapfile -t sources < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
echo "lint: clang-format on ${#sources[@]} files"
clang-format --dry-run -Werror "${sources[@]}"
mapfile -t units < <(printf '%s\n' "${sources[@]}" | grep -E '^(planner|profiles|schedules|tools|runtime)/.*\.cpp$')
echo "lint: clang-tidy on ${#units[@]} files"
# Units that passed before and have not changed since (the source, every header it includes, its
# compile command, clang-tidy and .clang-tidy) are skipped: tools/dev/tidy_cached.py.
if ! python3 tools/dev/tidy_cached.py build "$(nproc)" "${units[@]}"; then
  echo "lint: clang-tidy found problems (above)"
  exit 1
fi
bash tools/dev/check_narrative.sh
echo "lint: clean"
