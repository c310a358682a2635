#!/usr/bin/env bash
# The layering rules of docs/design/architecture.md, checked on the sources (not tests or benchmarks):
#  1. an #include points to the file's own layer or one below it; runtime/cpu and runtime/cuda
#     and runtime/mpi are siblings (none includes another) and tools/ includes nothing of
#     runtime/cuda (a plugin loaded on demand);
#  2. the core (everything but tools/) raises errors that name fields, never CLI flags.
# Usage: bash tools/dev/check_layers.sh   (prints every violation, exits 1 if any)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# Layer of a path: its rank, or nothing for files outside the layered tree.
rank() {
  case "$1" in
    planner/base/*) echo 0 ;;
    profiles/*) echo 1 ;;
    schedules/families/*) echo 3 ;;
    schedules/*) echo 2 ;;
    planner/graph/*) echo 4 ;;
    planner/plan/*) echo 5 ;;
    planner/calibrate/*) echo 5 ;;
    planner/search/*) echo 6 ;;
    runtime/cpu/*) echo 8 ;;
    runtime/cuda/*) echo 8 ;;
    runtime/mpi/*) echo 8 ;;
    runtime/*) echo 7 ;;
    tools/*) echo 9 ;;
  esac
}
sibling() {  # the backend folder, for the sibling rule
  case "$1" in runtime/cpu/*) echo cpu ;; runtime/cuda/*) echo cuda ;; runtime/mpi/*) echo mpi ;; esac
}

# shellcheck source=tools/dev/tracked_files.sh
. tools/dev/tracked_files.sh
tracked_files layers '*.h' '*.cpp' '*.cu' '*.cuh'

violations=0
for file in "${files[@]}"; do
  case "$file" in planner/* | profiles/* | schedules/* | runtime/* | tools/*) ;; *) continue ;; esac
  [ -f "$file" ] || continue  # deleted, not yet committed
  from=$(rank "$file")
  [ -n "$from" ] || continue
  while IFS= read -r target; do
    to=$(rank "$target")
    [ -n "$to" ] || continue
    bad=""
    if [ "$to" -gt "$from" ]; then bad="points up"; fi
    a=$(sibling "$file"); b=$(sibling "$target")
    if [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ]; then bad="crosses backends"; fi
    if [ "$(rank "$file")" = 9 ] && [ "$b" = cuda ]; then bad="links the CUDA plugin into the CLI"; fi
    if [ -n "$bad" ]; then
      echo "layers: $file includes $target: $bad"
      violations=$((violations + 1))
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file")
done

# Errors of the core that name a flag: Error("--…"), FieldError(…, "--…"). git grep exits 1 when
# nothing matches, above 1 when it cannot search.
status=0
hits=$(git grep -n -E 'Error\("--|Error\([^,]*, *"--' -- planner profiles schedules runtime) ||
  status=$?
if [ "$status" -gt 1 ]; then
  echo "layers: git grep failed (exit $status) searching the core's errors" >&2
  exit 1
fi
if [ -n "$hits" ]; then
  while IFS= read -r hit; do
    echo "layers: core error names a CLI flag: $hit"
    violations=$((violations + 1))
  done <<<"$hits"
fi

if [ "$violations" -gt 0 ]; then
  echo "layers: $violations violation(s) (docs/design/architecture.md)"
  exit 1
fi
echo "layers: clean"
