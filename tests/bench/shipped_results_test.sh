#!/usr/bin/env bash
# The plans and traces committed under bench/results/ stay readable by this pipeplan: every plan
# validates, and every plan with its measured trace beside it (NAME.plan.json, NAME.trace.json)
# diffs. The figures docs/results.md quotes are re-derived from these files, so a reader change
# that refuses them breaks the commands that reproduce the figures.
# Usage: shipped_results_test.sh REPO PIPEPLAN
set -euo pipefail
repo=$1
pipeplan=$2
cd "$repo"
plans=0 diffs=0 failed=0
while IFS= read -r -d '' plan; do
  plans=$((plans + 1))
  if ! out=$("$pipeplan" validate "$plan" 2>&1 > /dev/null); then
    echo "shipped_results_test: validate $plan: $out" >&2
    failed=$((failed + 1))
    continue
  fi
  trace=${plan%.plan.json}.trace.json
  [[ -f $trace ]] || continue
  diffs=$((diffs + 1))
  if ! out=$("$pipeplan" diff "$plan" "$trace" --json 2>&1 > /dev/null); then
    echo "shipped_results_test: diff $plan $trace: $out" >&2
    failed=$((failed + 1))
  fi
done < <(find bench/results -name '*.plan.json' -print0 | sort -z)
echo "shipped_results_test: $plans plans validated, $diffs diffed against their traces, $failed failed"
((plans > 0)) || { echo "shipped_results_test: no plan under bench/results" >&2; exit 1; }
((failed == 0))
