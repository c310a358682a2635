#!/usr/bin/env bash
# Does the sustained-load term (contention.sustained) help the 8-stage (16-SM) profile too?
# Run HERE from the repository root (no GPU): bash
# bench/results/issue12-h200-2026-11-27b/analysis/sm16_sustained.sh [PIPEPLAN]
# Three contention models for profiles/h200-llama-7b-blocks8-sm16.measured.json, each fitted on
# the one 8-stage run without BPipe (fourth session, call 2, nobpipe-mbs1), then the four
# measured BPipe mbs 2 runs (fourth session calls 1 and 2, fifth session call 1), held out,
# re-predicted (tools/fit_contention.py eval, last step):
#   count      the contention by ops at once alone (the calibrated profile's model)
#   free       with the sustained term fitted as well (--sustained)
#   carried    with the 4-stage (32-SM) calibrated profile's term fixed (factor 0.70, 30 ms:
#              the same GPU, the same share of SMs per computing stage)
# Writes analysis/sm16-sustained/{count,free,carried}.{fit,eval}.txt beside this script.
# SM16_TRAIN, SM16_HELD (run prefixes, space-separated) and SM16_OUT (a folder) fit on other
# runs and write elsewhere (the sixth session's analysis/sm16_refit.sh does).
set -euo pipefail
pipeplan=${1:-build/tools/pipeplan}
here=bench/results/issue12-h200-2026-11-27b
four=bench/results/issue12-h200-2026-11-27
out=${SM16_OUT:-$here/analysis/sm16-sustained}
mkdir -p "$out"
fit=(python3 tools/fit_contention.py)
read -r -a train <<< "${SM16_TRAIN:-$four/call2-env-bpipe-summary/nobpipe-mbs1}"
read -r -a held <<< "${SM16_HELD:-$four/call2-env-bpipe-summary/bpipe-mbs2 \
$four/call1-env-tests-block-copies-gemm-summary/copies-memcpy-bpipe-mbs2 \
$four/call1-env-tests-block-copies-gemm-summary/copies-priority-bpipe-mbs2 \
$here/call1-env-tests-profile-sm-copies-summary/copies-priority-bpipe-mbs2}"
for model in count free carried; do
  flags=()
  case $model in
    free) flags=(--sustained) ;;
    carried) flags=(--sustained --min-factor 0.7 --max-factor 0.7 --time-constants-ms 30) ;;
  esac
  "${fit[@]}" fit "${flags[@]}" --profile profiles/h200-llama-7b-blocks8-sm16.measured.json \
    -o "$out/$model.profile.json" "${train[@]}" > "$out/$model.fit.txt"
  "${fit[@]}" eval --pipeplan "$pipeplan" --profile "$out/$model.profile.json" "${train[@]}" \
    "${held[@]}" > "$out/$model.eval.txt"
  echo "== $model"
  cat "$out/$model.fit.txt" "$out/$model.eval.txt"
done
