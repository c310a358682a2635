#!/usr/bin/env bash
# The 8-stage fidelity analysis of a results folder (no GPU): fits the contention model of the
# 16-SM profile (`pipeplan calibrate fit`) to ONE 8-stage run and re-predicts every
# other 8-stage run from it, BPipe included (held out); diffs every run of every folder (stalls
# split into the host's part and the GPU's).
#
# Usage: bash bench/analysis/fidelity_8stage.sh RESULTS PROFILE FIT-RUN [PIPEPLAN]
#   RESULTS   a bench/results/<gpu>/<date>-<what> folder of run folders (bench/gpu/run.sh output)
#   PROFILE   the 16-SM measured profile the 8-stage runs were planned from
#   FIT-RUN   the run to fit on, relative to RESULTS (e.g. stalls-connections-default-32/stalls-c32-8st-mbs1)
#   PIPEPLAN  default build/tools/pipeplan
# Writes RESULTS/fidelity/: fit-8stage.{fit,eval}.txt, diff-<folder>-<run>.txt; and
# profiles/<PROFILE name>.calibrated.json (the fitted copy).
set -euo pipefail
cd "$(dirname "$0")/../.."
usage="usage: fidelity_8stage.sh RESULTS-DIR PROFILE FIT-RUN [PIPEPLAN]"
results=${1:?$usage}
profile=${2:?$usage}
fit_run=${3:?$usage}
pipeplan=${4:-build/tools/pipeplan}
[[ -x $pipeplan ]] || { echo "fidelity_8stage.sh: no pipeplan at '$pipeplan'" >&2; exit 2; }
[[ -f $profile ]] || { echo "fidelity_8stage.sh: no profile '$profile'" >&2; exit 2; }
[[ -f $results/$fit_run.trace.json ]] ||
  { echo "fidelity_8stage.sh: no run '$results/$fit_run' (.trace.json)" >&2; exit 2; }
out="$results/fidelity"
mkdir -p "$out"
fit=("$pipeplan" calibrate)

# shellcheck source=bench/analysis/keep.sh
source bench/analysis/keep.sh
mapfile -t folders < <(run_folders "$results")

# The 8-stage runs: plans with 8 devices.
shopt -s nullglob
eight=()
for plan in "${folders[@]/%//*.plan.json}"; do
  [[ -f $plan ]] || continue
  devices=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["meta"]["devices"])' \
    "$plan")
  run=${plan%.plan.json}
  [[ $devices == 8 && -f $run.trace.json && -f $run.plan.txt ]] && eight+=("$run")
done
calibrated="profiles/$(basename "${profile%.measured.json}").calibrated.json"
run_and_keep "$out/fit-8stage.fit.txt" "${fit[@]}" fit --profile "$profile" -o "$calibrated" \
  "$results/$fit_run" > /dev/null
run_and_keep "$out/fit-8stage.eval.txt" "${fit[@]}" eval \
  --profile "$calibrated" "${eight[@]}" > /dev/null
echo "== contention fitted on $fit_run ($calibrated)"
tail -n +2 "$out/fit-8stage.fit.txt"
tail -n +2 "$out/fit-8stage.eval.txt"
for run in "${folders[@]/%//*.trace.json}"; do
  [[ -f $run ]] || continue
  run=${run%.trace.json}
  folder=$(basename "$(dirname "$run")")
  run_and_keep "$out/diff-$folder-$(basename "$run").txt" "$pipeplan" diff "$run.plan.json" \
    "$run.trace.json" --top 10 > /dev/null
done
echo "diffs: $out/diff-*.txt"
