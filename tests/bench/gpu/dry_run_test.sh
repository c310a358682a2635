#!/usr/bin/env bash
# bench/gpu/run.sh --dry-run (prints every command, runs none, needs no GPU) over every WHAT, with
# a fake pipeplan that answers `env --json` as an H200 machine would: each WHAT must reach its
# commands, in order, with the SM share pipeplan reports; bad options are refused in one line
# naming the option, exit 2. Usage: dry_run_test.sh REPO
set -euo pipefail
repo=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "dry_run_test: $*" >&2
  exit 1
}
bash -n "$repo/bench/gpu/run.sh"
bash -n "$repo/bench/gpu/stage.sh"

# The fake pipeplan: `env --json` as pipeplan prints it on a one-H200 machine (two GPUs with
# FAKE_GPUS=2); nothing else is run in a dry run.
cat > "$work/pipeplan" << 'EOF'
#!/usr/bin/env bash
[[ $1 == env && $2 == --json ]] || { echo "fake pipeplan: only env --json" >&2; exit 1; }
gpu='{"index": 0, "name": "NVIDIA H200", "gpu_entry": "h200", "sms": 132,
  "memory_bytes": 150754820096, "compute_capability": "9.0", "driver_version": "13.0",
  "runtime_version": "13.0",
  "emulate_sm_share": [{"stages": 2, "sms_per_stage": 64}, {"stages": 4, "sms_per_stage": 32},
                      {"stages": 8, "sms_per_stage": 16}]}'
gpus=$gpu
[[ ${FAKE_GPUS:-1} == 2 ]] && gpus="$gpu, ${gpu/\"index\": 0/\"index\": 1}"
cat << JSON
{"pipeplan": {"version": "0.1.0", "cuda_backend": true, "fused_attention": true, "mpi": false},
 "cuda_module": {"path": "/opt/pipeplan/libpipeplan_cuda.so", "loaded": true, "error": null,
                 "kernel_driver": "580.159.04"},
 "gpus": [$gpus],
 "libraries": [{"name": "cudnn", "path": "/x/libcudnn.so.9", "version": "9.19.0"}],
 "environment": {}}
JSON
EOF
chmod +x "$work/pipeplan"
log="$work/dry.log"
dry() {  # dry ARG...: run.sh --dry-run with the fake pipeplan; fails the test unless it exits 0
  if ! bash "$repo/bench/gpu/run.sh" --dry-run --pipeplan "$work/pipeplan" --out "$work/out" "$@" \
    > "$log" 2>&1; then
    cat "$log"
    fail "the dry run of '$*' failed"
  fi
  [[ ! -e $work/out ]] || fail "a dry run wrote its output folder"
}
expect() {
  if ! grep -q -e "$1" "$log"; then
    cat "$log"
    fail "no '$1' in the dry run"
  fi
}
# in_order PATTERN...: the first line matching each comes after the previous one's.
in_order() {
  local previous=0 line
  for pattern in "$@"; do
    line=$(grep -n -e "$pattern" "$log" | head -n 1 | cut -d: -f1)
    [[ -n $line && $line -gt $previous ]] || { cat "$log"; fail "'$pattern' not after the previous"; }
    previous=$line
  done
}

dry env tests flash block profile profile-sm pipelines bpipe stalls copies waits gemm multi-gpu \
  summary
expect 'pipeplan env --json'
expect 'nvidia-smi'
expect 'pipeplan_cuda_tests --gtest_filter=SUITE.\\\* --gtest_output=json:.*/tests-SUITE.json'
expect "pipeplan_cuda_tests --gtest_filter=FlashAttention"
expect 'bench_block --model llama-7b --seq 2048 --mbs 1\\,2 --attention flash --warmup 5 --repetitions 20 --breakdown'
expect 'bench_block .*--gemm-candidates 8'
expect 'bench_block .*--attention recompute'
expect 'python3 bench/gpu/torch_block.py --seq 2048 --mbs 1\\,2 --sdpa default\\,cudnn\\,flash'
expect 'profile --backend cuda --model llama-7b --seq 2048 --mbs 1\\,2\\,4 --attention flash -o .*/h200-llama-7b.measured.json'
# The SM share is pipeplan's answer for 4 and for 8 stages.
expect 'profile --backend cuda --model .*llama-7b-blocks8.json .*--max-concat 8 --sm-partition 32 -o .*h200-llama-7b-blocks8-sm32.measured.json (beside it: nvidia-smi .*profile-sm.clocks.csv)'
expect '--sm-partition 16 -o .*h200-llama-7b-blocks8-sm16.measured.json'
expect 'plan --profile .*sm32.measured.json --gpu h200 --stages 4 --seq 2048 --schedule 1f1b --backward 2bp --microbatches 4 -o .*1f1b-m4-2bp.plan.json'
expect 'run .*1f1b-m4-2bp.plan.json --backend cuda --emulate 4 --steps 3 --json --trace .*1f1b-m4-2bp.trace.json (beside it: nvidia-smi --query-gpu=timestamp.*clocks.sm.* -lms 20 > .*1f1b-m4-2bp.clocks.csv)'
expect 'run .*gpipe-m8-fused.plan.json --backend cuda --emulate 4'
expect 'run .*auto-m8.plan.json --backend cuda --emulate 4'
expect 'diff .*1f1b-m8-2bp.plan.json .*1f1b-m8-2bp.trace.json --top 15'
expect 'plan .*--stages 8 .*--microbatches 16 --schedule 1f1b --backward fused --mbs 2 --memory LIMIT --reserve 0 *$'
expect 'run .*bpipe-mbs2.plan.json --backend cuda --emulate 8 --steps 3'
expect 'run .*nobpipe-mbs1.plan.json --backend cuda --emulate 8'
expect 'stalls: no --bpipe-profile'
expect 'run .*stalls-cdefault-1f1b-m8-2bp.plan.json --backend cuda --emulate 4 --steps 6'
expect 'env CUDA_DEVICE_MAX_CONNECTIONS=32 .*run .*stalls-c32-1f1b-m4-2bp.plan.json'
expect 'copies: no --bpipe-profile'
expect 'env PIPEPLAN_DEVICE_COPY=memcpy .*run .*copies-memcpy-auto-m8.plan.json --backend cuda'
expect 'env PIPEPLAN_DEVICE_COPY=priority .*run .*copies-priority-auto-m8.plan.json --backend cuda'
for mode in blocking stream poll; do
  expect "env PIPEPLAN_COPY_WAIT=$mode .*run .*waits-$mode-1f1b-m8-2bp.plan.json --backend cuda --emulate 4"
done
expect 'calibrate copy --from .*sm32.measured.json -o .*sm32-gemm8.calibrated.json .*sm32-gemm8.measured.json'
expect 'run .*gemm8-1f1b-m4-2bp.plan.json --backend cuda --emulate 4 --steps 3 --gemm-candidates 8 --json'
# multi-gpu: planned from the whole-GPU profile, run on 4 GPUs without --emulate.
expect 'plan --profile .*h200-llama-7b.measured.json --gpu h200 --stages 4 .*-o .*gpus4-1f1b-m4-2bp.plan.json'
expect 'run .*gpus4-1f1b-m8-fused.plan.json --backend cuda --steps 3 --json --trace'
if grep -q 'gpus4-.*--emulate' "$log"; then fail "multi-gpu runs emulated"; fi
expect 'python3 bench/gpu/summary.py'
in_order 'pipeplan env --json' 'pipeplan_cuda_tests --gtest' 'bench_block --model' 'torch_block.py' \
  'profile --backend cuda --model llama-7b' '--sm-partition 32' '1f1b-m4-fused.plan.json' 'auto-m8.plan.json' \
  'bpipe-mbs2.plan.json' 'stalls-cdefault' 'stalls-c32' 'copies-memcpy' 'copies-priority' \
  'waits-blocking' 'waits-poll' 'gemm1-1f1b-m4' 'gemm8-1f1b-m8' 'gpus4-1f1b-m4' 'summary.py'
if grep -e '--gemm-candidates' "$log" | grep -v -e bench_block -e gemm8 -e 'gemm-candidates 8 -o' | grep -q .; then
  cat "$log"
  fail "--gemm-candidates without --gemm-candidates"
fi

# step and predict: one whole-GPU stage from the profile (32 blocks on a 140 GiB GPU, a profile of
# its own for another count), then the stages' profile as measured, calibrated on other runs.
dry profile step profile-sm predict
expect 'plan --profile .*h200-llama-7b.measured.json --gpu h200 --stages 1 --seq 2048 --mbs 1 --schedule 1f1b --backward fused --microbatches 4 -o .*step-m4-fused.plan.json'
expect 'run .*step-m4-2bp.plan.json --backend cuda --steps 3 --json --trace'
if grep -q 'step-.*--emulate' "$log"; then fail "step runs emulated"; fi
expect 'plan --profile .*sm32.measured.json .*--schedule zb-v --backward 2bp --microbatches 8 -o .*predict-zbv-m8.plan.json'
expect 'calibrate fit --profile .*sm32.measured.json --sustained -o .*sm32.predict.calibrated.json .*fit-1f1b-m4-fused .*fit-1f1b-m4-2bp .*fit-gpipe-m4-2bp'
expect 'calibrate eval --profile .*sm32.predict.calibrated.json .*predict-1f1b-m8-2bp .*predict-zbv-m8'
in_order 'step-m4-fused.plan.json' 'step-m4-2bp.plan.json' '--sm-partition 32' 'predict-1f1b-m8-2bp.plan' \
  'predict-zbv-m8.plan' 'fit-gpipe-m4-2bp.plan' 'calibrate fit' 'calibrate eval'

# nccl: five plans at m = 2P, each run over device-local copies, over NCCL between the emulated
# stages and under torchrun; the losses compared; the NCCL tests; a rank killed.
dry profile-sm nccl
expect 'plan --profile .*sm32.measured.json .*--schedule 1f1b --backward 2bp --microbatches 8 --bpipe on -o .*nccl-1f1b-m8-2bp-bpipe.plan.json'
in_order 'nccl-gpipe-m8-fused.plan.json' 'run .*nccl-gpipe-m8-fused.plan.json --backend cuda --emulate 4 --steps 3 --json' \
  'run .*nccl-gpipe-m8-fused.plan.json --backend cuda --emulate 4 --transport nccl' \
  'diff .*nccl-gpipe-m8-fused.plan.json .*nccl-gpipe-m8-fused.nccl.trace.json' \
  'torchrun --nproc-per-node 4 --no-python .*pipeplan run .*nccl-gpipe-m8-fused.plan.json --backend cuda' \
  'nccl-interleaved-m8-2bp.plan' 'nccl-zb-v-m8-2bp.plan' \
  'summary.py --losses .*nccl-gpipe-m8-fused.local.json .*nccl-gpipe-m8-fused.nccl.json .*nccl-gpipe-m8-fused.torchrun.json' \
  "--gtest_filter=NcclTransport" 'PIPEPLAN_TEST_FAULT=die:2 torchrun --nproc-per-node 4'

# pairs: dualpipe-v, zb-v and dualpipe at m = 2P from the stages' profile, each run and diffed.
dry profile-sm pairs
expect 'plan --profile .*sm32.measured.json .*--schedule dualpipe-v --backward 2bp --microbatches 8 -o .*pairs-dualpipev-m8-2bp.plan.json'
expect 'run .*pairs-dualpipev-m8-2bp.plan.json --backend cuda --emulate 4'
in_order '--sm-partition 32' 'pairs-dualpipev-m8-2bp.plan' 'diff .*pairs-dualpipev-m8-2bp' \
  'pairs-zbv-m8-2bp.plan' '--schedule dualpipe --backward 2bp --microbatches 8' 'diff .*pairs-dualpipe-m8-2bp' \
  'calibrate fit --overlap --profile .*sm32.measured.json -o .*sm32.measured.pairs.json .*pairs-dualpipev-m8-2bp .*pairs-dualpipe-m8-2bp'
dry --step-layers 16 step
expect 'profile --backend cuda --model .*llama-7b-blocks16.json --seq 2048 --mbs 1 --attention flash -o .*h200-llama-7b-blocks16.measured.json'
expect 'plan --profile .*h200-llama-7b-blocks16.measured.json --gpu h200 --stages 1'

# --gemm-candidates 8: every profile and every run times the GEMM answers alike.
dry --gemm-candidates 8 profile profile-sm pipelines bpipe
expect 'profile --backend cuda --model llama-7b --seq 2048 --mbs 1\\,2\\,4 --attention flash --gemm-candidates 8'
expect '--sm-partition 32 --gemm-candidates 8'
expect '--sm-partition 16 --gemm-candidates 8'
expect 'run .*1f1b-m4-2bp.plan.json --backend cuda --emulate 4 --steps 3 --gemm-candidates 8'
expect 'run .*bpipe-mbs2.plan.json --backend cuda --emulate 8 --steps 3 --gemm-candidates 8'

# --m and --runs pick the runs; --stages 8 plans 8 stages from a given profile.
dry --sm-profile "$repo/profiles/h200-llama-7b-blocks8-sm32.calibrated.json" --m 6,12 \
  --runs 1f1b-2bp,auto pipelines
expect 'plan .*--schedule 1f1b --backward 2bp --microbatches 12 -o .*1f1b-m12-2bp.plan.json'
expect 'run .*auto-m6.plan.json --backend cuda --emulate 4'
planned=$(grep -o '[a-z0-9-]*\.plan\.json' "$log" | sort -u | tr '\n' ' ')
[[ $planned == "1f1b-m12-2bp.plan.json 1f1b-m6-2bp.plan.json auto-m12.plan.json auto-m6.plan.json " ]] ||
  { cat "$log"; fail "--m/--runs ran more than they named: $planned"; }
dry --stages 8 --sm-profile "$repo/profiles/h200-llama-7b-blocks8-sm16.calibrated.json" --m 8,24 \
  --runs 1f1b-fused,1f1b-2bp env pipelines summary
expect 'plan --profile .*sm16.calibrated.json .*--stages 8 .*--backward 2bp --microbatches 24 -o'
expect 'run .*1f1b-m24-2bp.plan.json --backend cuda --emulate 8 --steps 3'
# The stalls and copies 8-stage runs with --bpipe-profile; the waits at --wait-m.
dry --sm-profile "$repo/profiles/h200-llama-7b-blocks8-sm32.calibrated.json" \
  --bpipe-profile "$repo/profiles/h200-llama-7b-blocks8-sm16.calibrated.json" --wait-m 12 \
  --copy-waits stream,blocking --connections 32 --copy-modes priority stalls copies waits
expect 'env CUDA_DEVICE_MAX_CONNECTIONS=32 .*run .*stalls-c32-8st-mbs1.plan.json --backend cuda --emulate 8 --steps 6'
expect 'env PIPEPLAN_DEVICE_COPY=priority .*run .*copies-priority-bpipe-mbs2.plan.json --backend cuda --emulate 8'
expect 'plan --profile .*sm16.calibrated.json .*--mbs 2 --bpipe on --memory 9.107GiB --reserve 0 -o .*copies-priority-bpipe-mbs2.plan.json'
in_order 'PIPEPLAN_COPY_WAIT=stream .*waits-stream-1f1b-m12-2bp' 'PIPEPLAN_COPY_WAIT=blocking .*waits-blocking-1f1b-m12-2bp'
if grep -q 'CUDA_DEVICE_MAX_CONNECTIONS=default\|waits-poll\|copies-memcpy' "$log"; then
  cat "$log"
  fail "--connections/--copy-waits/--copy-modes ran more than they named"
fi
# Without pipeplan's answer (no binary), the SM share is a placeholder, or --sm-share.
if ! bash "$repo/bench/gpu/run.sh" --dry-run --pipeplan "$work/none" --sm-share 24 profile-sm \
  > "$log" 2>&1; then
  cat "$log"
  fail "the dry run without pipeplan failed"
fi
expect '--sm-partition 24'

# Bad options: refused before anything runs, in one line naming the option, exit 2.
for bad in "--runs 1f1b-2bp,gpipe-3bp|--runs: unknown run 'gpipe-3bp'" \
  "--m 6,twelve|--m: 'twelve' is not a positive integer" \
  "--wait-m 0|--wait-m: '0' is not a positive integer" \
  "--copy-waits stream,spin|--copy-waits: unknown wait 'spin'" \
  "--connections 8,many|--connections: 'many' is neither" \
  "--stages|--stages: needs a value" \
  "--frobnicate 1|unknown option '--frobnicate'" \
  "--steps -1|--steps: '-1' is not a positive integer"; do
  status=0
  read -r -a arguments <<< "${bad%%|*}"
  bash "$repo/bench/gpu/run.sh" --dry-run --pipeplan "$work/pipeplan" pipelines "${arguments[@]}" \
    > "$log" 2>&1 || status=$?
  if [[ $status != 2 || $(wc -l < "$log") != 1 ]] || ! grep -q -e "${bad#*|}" "$log"; then
    cat "$log"
    fail "'${bad%%|*}' should fail in one line with status 2 (got $status)"
  fi
done
status=0
bash "$repo/bench/gpu/run.sh" --dry-run --pipeplan "$work/pipeplan" pipelines fidelity > "$log" 2>&1 || status=$?
if [[ $status != 2 || $(wc -l < "$log") != 1 ]] || ! grep -q "unknown WHAT 'fidelity'" "$log"; then
  cat "$log"
  fail "an unknown WHAT should fail in one line with status 2"
fi
echo "dry_run_test: every WHAT reached"
