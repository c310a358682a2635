#!/usr/bin/env bash
# tools/device/issue12.sh with PIPEPLAN_DRY_RUN=1 (prints every command, runs none) over all its
# phases: it must parse, exit 0 and reach each phase's command, so that an edit to the script
# cannot break the GPU session's call unnoticed. Usage: issue12_dry_run_test.sh REPO
set -euo pipefail
repo=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bash -n "$repo/tools/device/issue12.sh"
bash -n "$repo/tools/device/stage_issue12.sh"
log="$out/dry.log"
if ! OUT="$out" TMPDIR="$out" PIPEPLAN_DRY_RUN=1 bash "$repo/tools/device/issue12.sh" env tests flash block \
  profile profile-sm pipelines bpipe stalls copies summary > "$log" 2>&1; then
  cat "$log"
  echo "issue12_dry_run_test: the dry run failed" >&2
  exit 1
fi
expect() {
  if ! grep -q -e "$1" "$log"; then
    cat "$log"
    echo "issue12_dry_run_test: no '$1' in the dry run" >&2
    exit 1
  fi
}
expect 'nvidia-smi'
expect 'pipeplan_cuda_tests --gtest_filter='
expect 'bench_block --model llama-7b --seq 2048'
expect 'torch_block.py --seq 2048'
expect 'profile --backend cuda --model llama-7b --seq 2048 --mbs 1\\,2\\,4 --attention flash'
expect '--sm-partition 32'
expect 'run .*1f1b-m4-2bp.plan.json --backend cuda --emulate 4'
expect 'run .*gpipe-m8-fused.plan.json --backend cuda --emulate 4'
expect 'run .*auto-m8.plan.json --backend cuda --emulate 4'
expect 'diff .*1f1b-m8-2bp.plan.json'
expect 'bpipe-mbs2'
# stalls: needs BPIPE_PROFILE for its 8-stage run (said, not failed), runs each 4-stage plan twice
expect 'stalls: no BPIPE_PROFILE'
expect 'run .*stalls-cdefault-1f1b-m8-2bp.plan.json --backend cuda --emulate 4 --steps 6'
expect 'env CUDA_DEVICE_MAX_CONNECTIONS=32 .*run .*stalls-c32-1f1b-m4-2bp.plan.json'
# copies: each 8-stage BPipe and 4-stage auto run once per PIPEPLAN_DEVICE_COPY mode
expect 'copies: no BPIPE_PROFILE'
expect 'env PIPEPLAN_DEVICE_COPY=memcpy .*run .*copies-memcpy-auto-m8.plan.json --backend cuda'
expect 'env PIPEPLAN_DEVICE_COPY=priority .*run .*copies-priority-auto-m8.plan.json --backend cuda'
expect 'issue12_summary.py'
# The GPU clock and power beside every emulated run and the SM-share profile.
expect 'run .*1f1b-m4-2bp.plan.json .*(beside it: nvidia-smi --query-gpu=timestamp.*clocks.sm.* -lms 20 > .*1f1b-m4-2bp.clocks.csv)'
expect 'sm-partition 32 .*(beside it: nvidia-smi .*profile-sm.clocks.csv)'
if grep -e '--gemm-candidates' "$log" | grep -v bench_block | grep -q .; then
  echo "issue12_dry_run_test: --gemm-candidates without GEMM_CANDIDATES" >&2
  exit 1
fi
# GEMM_CANDIDATES=8: every profile and every run times the GEMM answers alike.
if ! OUT="$out" TMPDIR="$out" GEMM_CANDIDATES=8 PIPEPLAN_DRY_RUN=1 bash "$repo/tools/device/issue12.sh" \
  env profile profile-sm pipelines bpipe > "$log" 2>&1; then
  cat "$log"
  echo "issue12_dry_run_test: the dry run with GEMM_CANDIDATES failed" >&2
  exit 1
fi
expect 'profile --backend cuda --model llama-7b --seq 2048 --mbs 1\\,2\\,4 --attention flash --gemm-candidates 8'
expect '--sm-partition 32 --gemm-candidates 8'
expect '--sm-partition 16 --gemm-candidates 8'
expect 'run .*1f1b-m4-2bp.plan.json --backend cuda --emulate 4 --steps 3 --gemm-candidates 8'
expect 'run .*bpipe-mbs2.plan.json --backend cuda --emulate 8 --steps 3 --gemm-candidates 8'
# gemm: the tuned SM-share profile with the calibrated contention, and the 1F1B-2bp runs planned
# from each profile, each with the GEMMs its profile measured.
if ! OUT="$out" TMPDIR="$out" PIPELINE_PROFILE="$repo/profiles/h200-llama-7b-blocks8-sm32.calibrated.json" \
  PIPEPLAN_DRY_RUN=1 bash "$repo/tools/device/issue12.sh" env gemm > "$log" 2>&1; then
  cat "$log"
  echo "issue12_dry_run_test: the dry run of gemm failed" >&2
  exit 1
fi
expect '--sm-partition 32 --gemm-candidates 8 -o .*sm32-gemm8.measured.json'
expect 'fit_contention.py copy --from .*h200-llama-7b-blocks8-sm32.calibrated.json -o .*sm32-gemm8.calibrated.json .*sm32-gemm8.measured.json'
expect 'plan --profile .*h200-llama-7b-blocks8-sm32.calibrated.json .*-o .*gemm1-1f1b-m4-2bp.plan.json'
expect 'run .*gemm1-1f1b-m8-2bp.plan.json --backend cuda --emulate 4 --steps 3 --json'
expect 'plan --profile .*sm32-gemm8.calibrated.json .*-o .*gemm8-1f1b-m8-2bp.plan.json'
expect 'run .*gemm8-1f1b-m4-2bp.plan.json --backend cuda --emulate 4 --steps 3 --gemm-candidates 8 --json'
# pipelines: PIPELINE_M and PIPELINE_RUNS pick the runs; a bad pick is refused before anything
# runs, in one line naming it, exit 2.
for bad in "PIPELINE_RUNS=1f1b-2bp gpipe-3bp|PIPELINE_RUNS: unknown run 'gpipe-3bp'" \
  "PIPELINE_M=6 twelve|PIPELINE_M: 'twelve' is not a micro-batch count" \
  "WAIT_M=0|WAIT_M: '0' is not a micro-batch count" \
  "COPY_WAITS=stream spin|COPY_WAITS: unknown wait 'spin'"; do
  status=0
  env "${bad%%|*}" OUT="$out" TMPDIR="$out" PIPEPLAN_DRY_RUN=1 \
    bash "$repo/tools/device/issue12.sh" env pipelines > "$log" 2>&1 || status=$?
  if [[ $status != 2 || $(wc -l < "$log") != 1 ]] || ! grep -q -e "${bad#*|}" "$log"; then
    cat "$log"
    echo "issue12_dry_run_test: ${bad%%|*} should fail in one line with status 2 (got $status)" >&2
    exit 1
  fi
done
if ! OUT="$out" TMPDIR="$out" PIPELINE_PROFILE="$repo/profiles/h200-llama-7b-blocks8-sm32.calibrated.json" \
  PIPELINE_M="6 12" PIPELINE_RUNS="1f1b-2bp auto" PIPEPLAN_DRY_RUN=1 \
  bash "$repo/tools/device/issue12.sh" pipelines > "$log" 2>&1; then
  cat "$log"
  echo "issue12_dry_run_test: the dry run of pipelines with PIPELINE_M failed" >&2
  exit 1
fi
expect 'plan .*--schedule 1f1b --backward 2bp --microbatches 12 -o .*1f1b-m12-2bp.plan.json'
expect 'run .*auto-m6.plan.json --backend cuda --emulate 4'
planned=$(grep -o '[a-z0-9-]*\.plan\.json' "$log" | sort -u | tr '\n' ' ')
if [[ $planned != "1f1b-m12-2bp.plan.json 1f1b-m6-2bp.plan.json auto-m12.plan.json auto-m6.plan.json " ]]; then
  echo "planned: $planned"
  cat "$log"
  echo "issue12_dry_run_test: PIPELINE_M/PIPELINE_RUNS ran more than they named" >&2
  exit 1
fi
# The next session's 8-stage call (tools/device/README.md): STAGES=8 plans 8 stages from the
# 16-SM profile and emulates 8.
if ! OUT="$out" TMPDIR="$out" STAGES=8 \
  PIPELINE_PROFILE="$repo/profiles/h200-llama-7b-blocks8-sm16.calibrated.json" \
  PIPELINE_M="8 24" PIPELINE_RUNS="1f1b-fused 1f1b-2bp" PIPEPLAN_DRY_RUN=1 \
  bash "$repo/tools/device/issue12.sh" env pipelines summary > "$log" 2>&1; then
  cat "$log"
  echo "issue12_dry_run_test: the dry run of the 8-stage pipelines failed" >&2
  exit 1
fi
expect 'plan --profile .*sm16.calibrated.json .*--stages 8 .*--backward 2bp --microbatches 24 -o'
expect 'run .*1f1b-m24-2bp.plan.json --backend cuda --emulate 8 --steps 3'
expect 'run .*1f1b-m8-fused.plan.json --backend cuda --emulate 8'
# waits: one plan run once per PIPEPLAN_COPY_WAIT mode, at WAIT_M.
if ! OUT="$out" TMPDIR="$out" PIPELINE_PROFILE="$repo/profiles/h200-llama-7b-blocks8-sm32.calibrated.json" \
  WAIT_M=12 PIPEPLAN_DRY_RUN=1 bash "$repo/tools/device/issue12.sh" waits summary > "$log" 2>&1; then
  cat "$log"
  echo "issue12_dry_run_test: the dry run of waits failed" >&2
  exit 1
fi
for mode in blocking stream poll; do
  expect "env PIPEPLAN_COPY_WAIT=$mode .*run .*waits-$mode-1f1b-m12-2bp.plan.json --backend cuda --emulate 4"
done
echo "issue12_dry_run_test: every phase reached"
