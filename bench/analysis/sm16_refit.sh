#!/usr/bin/env bash
# The 8-stage (16-SM) profile's contention refitted with the 8-stage runs at m = 8.
# Three contention models for profiles/h200-llama-7b-blocks8-sm16.measured.json, each fitted on
# the 8-stage run without BPipe (m = 16, mbs 1) and the 1F1B fused and 2bp runs at m = 8; held
# out and re-predicted as they ran (`pipeplan calibrate eval --resimulate`: each run's own plan
# file, last step): the m = 24 runs and
# the four measured BPipe mbs 2 runs:
#   count      the contention by ops at once alone (the model the 16-SM profile had)
#   free       with the sustained term fitted as well (--sustained)
#   carried    with the 4-stage (32-SM) calibrated profile's term fixed (factor 0.70, 30 ms:
#              the same GPU, the same share of its SMs per computing stage)
# Also each held-out run re-predicted by the calibrated profile of commit e912c67 (fitted on the
# run without BPipe alone): before.eval.txt.
#
# Usage: bash bench/analysis/sm16_refit.sh RESULTS [PIPEPLAN]      (no GPU; in a git checkout)
#   RESULTS   the H200 results folder (bench/results/h200); the runs are named under it
#   PIPEPLAN  default build/tools/pipeplan
# Writes RESULTS/2026-11-27-tests-pipelines-waits/analysis/sm16-refit/
# {before,count,free,carried}.{fit,eval}.txt and .profile.json; carried.profile.json became
# profiles/h200-llama-7b-blocks8-sm16.calibrated.json.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
results=${1:?usage: sm16_refit.sh RESULTS [PIPEPLAN]}
pipeplan=${2:-build/tools/pipeplan}
[[ -d $results ]] || { echo "sm16_refit.sh: no results folder '$results'" >&2; exit 2; }
waits=$results/2026-11-27-tests-pipelines-waits
gemm=$results/2026-11-27-tests-block-copies-gemm-bpipe
copies=$results/2026-11-27-tests-profile-sm-copies-pipelines
out=$waits/analysis/sm16-refit
mkdir -p "$out"
eight=$waits/pipelines-8stage-m8-m24
train=("$gemm/bpipe-8stage-profile-sm16/nobpipe-mbs1" "$eight/1f1b-m8-fused" "$eight/1f1b-m8-2bp")
held=("$eight/1f1b-m24-fused" "$eight/1f1b-m24-2bp"
  "$gemm/bpipe-8stage-profile-sm16/bpipe-mbs2"
  "$gemm/tests-block-copies-gemm/copies-memcpy-bpipe-mbs2"
  "$gemm/tests-block-copies-gemm/copies-priority-bpipe-mbs2"
  "$copies/tests-profile-sm-copies/copies-priority-bpipe-mbs2")
git -C "$root" show e912c67:profiles/h200-llama-7b-blocks8-sm16.calibrated.json > "$out/before.profile.json"
"$pipeplan" calibrate eval --resimulate \
  --profile "$out/before.profile.json" "${train[@]}" "${held[@]}" > "$out/before.eval.txt"
echo "== before (the calibrated profile of e912c67)"
cat "$out/before.eval.txt"
# The three fits and their evaluations.
SM16_TRAIN="${train[*]}" SM16_HELD="${held[*]}" SM16_OUT=$out \
  bash "$root/bench/analysis/sm16_sustained.sh" "$results" "$pipeplan"
