#!/usr/bin/env bash
# tools/dev/check_layers.sh passes the project's own tracked files, and fails on a copy of them
# with planted violations of each rule, naming each: an include that points up (planner/base
# including tools/), one that crosses backends (runtime/cpu including runtime/cuda), the CLI
# including runtime/cuda, and a core error that names a CLI flag.
# Usage: bash tests/tools/dev/check_layers_test.sh SOURCE_DIR
set -euo pipefail
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# The tracked files as they are in the working tree (deleted ones left out), in a git checkout of
# their own.
copy="$work/repo"
mkdir -p "$copy"
(cd "$source_dir" && git ls-files -z | while IFS= read -r -d '' file; do
  if [ -f "$file" ]; then printf '%s\0' "$file"; fi
done | xargs -0 cp --parents -t "$copy")
git -C "$copy" init -q
git -C "$copy" add -A

expect() {  # expect STATUS WANTED-LINE...
  local want_status=$1 status=0 output line
  shift
  output=$(bash "$copy/tools/dev/check_layers.sh" 2>&1) || status=$?
  if [ "$status" -ne "$want_status" ]; then
    echo "FAIL: check_layers exited $status, expected $want_status: $output"
    failures=$((failures + 1))
  fi
  for line in "$@"; do
    if ! grep -qxF -- "$line" <<<"$output"; then
      echo "FAIL: check_layers did not print the line '$line': $output"
      failures=$((failures + 1))
    fi
  done
}

expect 0 "layers: clean"

plant() {  # plant FILE LINE: appends LINE to a tracked file of the copy
  if [ ! -f "$copy/$1" ]; then
    echo "FAIL: $1 is not in the project any more: plant in another file"
    exit 1
  fi
  printf '%s\n' "$2" >>"$copy/$1"
}
plant planner/base/error.cpp '#include "tools/cli.h"'
plant runtime/cpu/adamw.cpp '#include "runtime/cuda/allocator.h"'
plant tools/cmd_bpipe.cpp '#include "runtime/cuda/allocator.h"'
plant profiles/analytic.cpp 'void planted() { throw Error("--planted-flag: refused"); }'
line=$(wc -l <"$copy/profiles/analytic.cpp")
expect 1 \
  "layers: planner/base/error.cpp includes tools/cli.h: points up" \
  "layers: runtime/cpu/adamw.cpp includes runtime/cuda/allocator.h: crosses backends" \
  "layers: tools/cmd_bpipe.cpp includes runtime/cuda/allocator.h: links the CUDA plugin into the CLI" \
  "layers: core error names a CLI flag: profiles/analytic.cpp:$line:void planted() { throw Error(\"--planted-flag: refused\"); }" \
  "layers: 4 violation(s) (docs/design/architecture.md)"

if [ "$failures" -gt 0 ]; then
  echo "check_layers_test: $failures failure(s)"
  exit 1
fi
echo "check_layers_test: 2 passed, 0 failed"
