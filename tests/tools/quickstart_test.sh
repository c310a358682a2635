#!/usr/bin/env bash
# The README's first command (tools/quickstart.sh) after its setup: the script's own plan and
# show commands, run against the built pipeplan with their outputs in a temporary folder, must
# plan from the shipped measured profile and show the schedule. Usage: quickstart_test.sh REPO
# PIPEPLAN
set -euo pipefail
repo=$1
pipeplan=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The commands after `set -x`, joined across their line continuations.
commands=$(sed -n '/^set -x$/,$p' "$repo/tools/quickstart.sh" | tail -n +2 |
  sed -e "s#\./build/tools/pipeplan#'$pipeplan'#g" -e "s#plan\.trace\.json#'$work/trace.json'#g" \
    -e "s#plan\.json#'$work/plan.json'#g")
[[ $commands == *"plan --profile profiles/"* ]] || {
  echo "quickstart_test: no 'pipeplan plan --profile profiles/...' in tools/quickstart.sh" >&2
  exit 1
}
(cd "$repo" && eval "$commands") > "$work/out.txt" 2>&1 || {
  cat "$work/out.txt"
  echo "quickstart_test: the quickstart's commands failed" >&2
  exit 1
}
for want in 'llama-7b on 4 x h200: 1f1b, backward 2bp' 'MFU (PaLM model FLOPs)' 'dev 3 │'; do
  grep -qF "$want" "$work/out.txt" || {
    cat "$work/out.txt"
    echo "quickstart_test: no '$want' in the quickstart's output" >&2
    exit 1
  }
done
[[ -s $work/plan.json && -s $work/trace.json ]] || {
  echo "quickstart_test: the plan or its trace was not written" >&2
  exit 1
}
echo "quickstart_test: passed"
