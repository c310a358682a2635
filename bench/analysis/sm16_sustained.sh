#!/usr/bin/env bash
# Does the sustained-load term (contention.sustained) help the 8-stage (16-SM) profile too?
# Three contention models for profiles/h200-llama-7b-blocks8-sm16.measured.json, each fitted on
# the one 8-stage run without BPipe at m = 16, then the four measured BPipe mbs 2 runs, held out,
# re-predicted as they ran (`pipeplan calibrate eval --resimulate`: each run's own plan file), last step:
#   count      the contention by ops at once alone (the calibrated profile's model)
#   free       with the sustained term fitted as well (--sustained)
#   carried    with the 4-stage (32-SM) calibrated profile's term fixed (factor 0.70, 30 ms:
#              the same GPU, the same share of SMs per computing stage)
#
# Usage: bash bench/analysis/sm16_sustained.sh RESULTS [PIPEPLAN]      (no GPU)
#   RESULTS   the H200 results folder (bench/results/h200); the runs are named under it
#   PIPEPLAN  default build/tools/pipeplan
# Writes RESULTS/2026-11-27-tests-profile-sm-copies-pipelines/analysis/sm16-sustained/
# {count,free,carried}.{fit,eval}.txt and .profile.json. SM16_TRAIN, SM16_HELD (run prefixes,
# space-separated) and SM16_OUT (a folder) fit on other runs and write elsewhere
# (bench/analysis/sm16_refit.sh does).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
results=${1:?usage: sm16_sustained.sh RESULTS [PIPEPLAN]}
pipeplan=${2:-build/tools/pipeplan}
[[ -d $results ]] || { echo "sm16_sustained.sh: no results folder '$results'" >&2; exit 2; }
gemm=$results/2026-11-27-tests-block-copies-gemm-bpipe
copies=$results/2026-11-27-tests-profile-sm-copies-pipelines
read -r -a train <<< "${SM16_TRAIN:-$gemm/bpipe-8stage-profile-sm16/nobpipe-mbs1}"
read -r -a held <<< "${SM16_HELD:-$gemm/bpipe-8stage-profile-sm16/bpipe-mbs2 \
$gemm/tests-block-copies-gemm/copies-memcpy-bpipe-mbs2 \
$gemm/tests-block-copies-gemm/copies-priority-bpipe-mbs2 \
$copies/tests-profile-sm-copies/copies-priority-bpipe-mbs2}"
out=${SM16_OUT:-$copies/analysis/sm16-sustained}
mkdir -p "$out"
fit=("$pipeplan" calibrate)
for model in count free carried; do
  flags=()
  case $model in
    free) flags=(--sustained) ;;
    carried) flags=(--sustained --min-factor 0.7 --max-factor 0.7 --time-constants-ms 30) ;;
  esac
  "${fit[@]}" fit "${flags[@]}" --profile "$root/profiles/h200-llama-7b-blocks8-sm16.measured.json" \
    -o "$out/$model.profile.json" "${train[@]}" > "$out/$model.fit.txt"
  "${fit[@]}" eval --resimulate --profile "$out/$model.profile.json" "${train[@]}" \
    "${held[@]}" > "$out/$model.eval.txt"
  echo "== $model"
  cat "$out/$model.fit.txt" "$out/$model.eval.txt"
done
