#!/usr/bin/env bash
# Run HERE (no GPU): the 8-stage part of issue 12's fidelity analysis, for a session that ran the
# `stalls` phase (tools/device/issue12.sh) and BPipe with 32 work queues. Fits the contention
# model of the 16-SM profile (tools/calibrate/fit_contention.py) to ONE 8-stage run at mbs 1 with 32 work
# queues and re-predicts the other 8-stage runs from it, BPipe at mbs 2 included (held out); diffs
# every run of every call (stalls split into the host's part and the GPU's).
#
# Usage: bash tools/device/issue12_fidelity_8stage.sh RESULTS-DIR PROFILE FIT-RUN [PIPEPLAN]
#   RESULTS-DIR  a bench/results/issue12-<gpu>-<date> folder with call*/ subfolders
#   PROFILE      the 16-SM measured profile the 8-stage runs were planned from
#   FIT-RUN      the run to fit on, relative to RESULTS-DIR (e.g. call2-x/stalls-c32-8st-mbs1)
#   PIPEPLAN     default build/tools/pipeplan
# Writes RESULTS-DIR/fidelity/: fit-8stage.{fit,eval}.txt, diff-<call>-<run>.txt; and
# profiles/<PROFILE name>.calibrated.json (the fitted copy).
set -euo pipefail
cd "$(dirname "$0")/../.."
usage="usage: issue12_fidelity_8stage.sh RESULTS-DIR PROFILE FIT-RUN [PIPEPLAN]"
results=${1:?$usage}
profile=${2:?$usage}
fit_run=${3:?$usage}
pipeplan=${4:-build/tools/pipeplan}
[[ -x $pipeplan ]] || { echo "issue12_fidelity_8stage.sh: no pipeplan at '$pipeplan'" >&2; exit 2; }
[[ -f $profile ]] || { echo "issue12_fidelity_8stage.sh: no profile '$profile'" >&2; exit 2; }
[[ -f $results/$fit_run.trace.json ]] ||
  { echo "issue12_fidelity_8stage.sh: no run '$results/$fit_run' (.trace.json)" >&2; exit 2; }
out="$results/fidelity"
mkdir -p "$out"
fit=(python3 tools/calibrate/fit_contention.py)

# shellcheck source=tools/device/keep.sh
source tools/device/keep.sh

# The 8-stage runs: plans with 8 devices.
shopt -s nullglob
eight=()
for plan in "$results"/call*/*.plan.json; do
  devices=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["meta"]["devices"])' \
    "$plan")
  run=${plan%.plan.json}
  [[ $devices == 8 && -f $run.trace.json && -f $run.plan.txt ]] && eight+=("$run")
done
calibrated="profiles/$(basename "${profile%.measured.json}").calibrated.json"
run_and_keep "$out/fit-8stage.fit.txt" "${fit[@]}" fit --profile "$profile" -o "$calibrated" \
  "$results/$fit_run" > /dev/null
run_and_keep "$out/fit-8stage.eval.txt" "${fit[@]}" eval --pipeplan "$pipeplan" \
  --profile "$calibrated" "${eight[@]}" > /dev/null
echo "== contention fitted on $fit_run ($calibrated)"
tail -n +2 "$out/fit-8stage.fit.txt"
tail -n +2 "$out/fit-8stage.eval.txt"
for run in "$results"/call*/*.trace.json; do
  run=${run%.trace.json}
  call=$(basename "$(dirname "$run")")
  run_and_keep "$out/diff-${call%%-*}-$(basename "$run").txt" "$pipeplan" diff "$run.plan.json" \
    "$run.trace.json" --top 10 > /dev/null
done
echo "diffs: $out/diff-*.txt"
