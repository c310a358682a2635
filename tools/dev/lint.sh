#!/usr/bin/env bash
# clang-format (the repo's .clang-format) and clang-tidy (.clang-tidy) over the C++ sources, and
# tools/dev/check_narrative.sh over every tracked file.
# clang-tidy checks the sources that build/compile_commands.json compiles (tools/setup.sh makes
# it); those this configuration does not build (the CUDA backend without nvcc, MPI or NCCL parts
# without them) are left out, and counted. A unity build/ (tools/setup.sh --cli) lists combined
# files instead of sources, so for one the sources' commands come from build-lint/, configured
# file by file and never built (a few seconds).
# Usage: bash tools/dev/lint.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=tools/dev/tracked_files.sh
. tools/dev/tracked_files.sh
tracked_files lint '*.cpp' '*.h' '*.cu' '*.cuh'
sources=("${files[@]}")
echo "lint: clang-format on ${#sources[@]} files"
clang-format --dry-run -Werror "${sources[@]}"

if [ ! -f build/compile_commands.json ]; then
  echo "lint: no build/compile_commands.json: configure build/ first (bash tools/setup.sh)" >&2
  exit 1
fi
database=build
if grep -qiE '^CMAKE_UNITY_BUILD:[A-Z]*=(ON|TRUE|YES|Y|1)$' build/CMakeCache.txt; then
  database=build-lint
  options=()
  if [ ! -f build-lint/CMakeCache.txt ]; then
    if command -v ninja >/dev/null; then options+=(-G Ninja); fi
    options+=(-DCMAKE_BUILD_TYPE=Release)
    # The CUDA compiler build/ found, wherever it is.
    nvcc=$(sed -n 's#^CMAKE_CUDA_COMPILER:[A-Z]*=\(/.*\)$#\1#p' build/CMakeCache.txt)
    if [ -n "$nvcc" ]; then options+=("-DCMAKE_CUDA_COMPILER=$nvcc"); fi
  fi
  echo "lint: build/ is a unity build; clang-tidy reads build-lint/compile_commands.json" \
    "(configured source by source, not built)"
  cmake -S . -B build-lint "${options[@]}" -DCMAKE_UNITY_BUILD=OFF >/dev/null
fi
mapfile -t units < <(printf '%s\n' "${sources[@]}" |
  grep -E '^(planner|profiles|schedules|tools|runtime)/.*\.cpp$' || true)
echo "lint: clang-tidy on ${#units[@]} sources of planner/, profiles/, schedules/, tools/ and" \
  "runtime/, with their commands in $database/compile_commands.json"
# Units that passed before and have not changed since (the source, every header it includes, its
# compile command, clang-tidy and .clang-tidy) are skipped: tools/dev/tidy_cached.py.
if ! python3 tools/dev/tidy_cached.py "$database" "$(nproc)" "${units[@]}"; then
  echo "lint: clang-tidy found problems (above)"
  exit 1
fi
bash tools/dev/check_narrative.sh
echo "lint: clean"
