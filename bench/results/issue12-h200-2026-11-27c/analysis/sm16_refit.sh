#!/usr/bin/env bash
# The 8-stage (16-SM) profile's contention refitted with this session's 8-stage runs at m = 8.
# Run HERE from the repository root (no GPU): bash
# bench/results/issue12-h200-2026-11-27c/analysis/sm16_refit.sh [PIPEPLAN]
# Three contention models for profiles/h200-llama-7b-blocks8-sm16.measured.json, each fitted on
# the fourth session's 8-stage run without BPipe (m = 16, mbs 1) and this session's 1F1B fused
# and 2bp runs at m = 8 (call 3); held out and re-predicted (tools/fit_contention.py eval, last
# step): this session's m = 24 runs and the four measured BPipe mbs 2 runs (fourth session calls
# 1 and 2, fifth session call 1):
#   count      the contention by ops at once alone (the model the 16-SM profile had)
#   free       with the sustained term fitted as well (--sustained)
#   carried    with the 4-stage (32-SM) calibrated profile's term fixed (factor 0.70, 30 ms:
#              the same GPU, the same share of its SMs per computing stage)
# Also each held-out run re-predicted by the calibrated profile committed before this session
# (fitted on the run without BPipe alone): before.eval.txt.
# Writes analysis/sm16-refit/{count,free,carried}.{fit,eval}.txt and .profile.json beside this
# script; carried.profile.json became profiles/h200-llama-7b-blocks8-sm16.calibrated.json.
set -euo pipefail
pipeplan=${1:-build/tools/pipeplan}
here=bench/results/issue12-h200-2026-11-27c
four=bench/results/issue12-h200-2026-11-27
five=bench/results/issue12-h200-2026-11-27b
out=$here/analysis/sm16-refit
mkdir -p "$out"
call3=$here/call3-env-pipelines-summary
train=("$four/call2-env-bpipe-summary/nobpipe-mbs1" "$call3/1f1b-m8-fused" "$call3/1f1b-m8-2bp")
held=("$call3/1f1b-m24-fused" "$call3/1f1b-m24-2bp"
  "$four/call2-env-bpipe-summary/bpipe-mbs2"
  "$four/call1-env-tests-block-copies-gemm-summary/copies-memcpy-bpipe-mbs2"
  "$four/call1-env-tests-block-copies-gemm-summary/copies-priority-bpipe-mbs2"
  "$five/call1-env-tests-profile-sm-copies-summary/copies-priority-bpipe-mbs2")
# The committed profile before this session: git show e912c67:profiles/...sm16.calibrated.json
git show e912c67:profiles/h200-llama-7b-blocks8-sm16.calibrated.json > "$out/before.profile.json"
python3 tools/fit_contention.py eval --pipeplan "$pipeplan" --profile "$out/before.profile.json" \
  "${train[@]}" "${held[@]}" > "$out/before.eval.txt"
echo "== before (the calibrated profile of e912c67)"
cat "$out/before.eval.txt"
# The three fits and their evaluations: the fifth session's script on these runs.
SM16_TRAIN="${train[*]}" SM16_HELD="${held[*]}" SM16_OUT=$out \
  bash "$five/analysis/sm16_sustained.sh" "$pipeplan"
