#!/usr/bin/env bash
# bench/gpu/run.sh --dry-run (prints every command, runs none, needs no GPU) over every WHAT, with
# a fake pipeplan that answers `env --json` as an H200 machine would: each WHAT must reach its
# commands, in order, with the SM share pipeplan reports; bad options are refused in one line
# naming the option, exit 2. Then run.sh for real on a fake GPU machine: the nccl stage (the NCCL
# version check, the launcher and the library paths, the killed-rank check and its summary, a
# --nccl-lib-dir without libnccl.so.2), a deadline reached (the summary still written), calibrate
# given only the runs that left a plan and a trace (and run reports that parse as JSON, their
# stderr beside them), bpipe's smaller size without BPipe, step with a --gpu-profile too large for
# the GPU, a GPU pipeplan matches to no gpus.json entry (--gpu), profiles of another GPU refused,
# paths relative to where run.sh starts, and a non-empty --out refused; and
# bench/gpu/rank_killed.sh alone, also stopped from outside.
# Usage: dry_run_test.sh REPO
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
# FAKE_GPUS=2), and `profile --analytic` of a preset it knows (run.sh's check of
# --multi-gpu-model); nothing else is run in a dry run.
cat > "$work/pipeplan" << 'EOF'
#!/usr/bin/env bash
if [[ $1 == profile && $2 == --analytic && $3 == --model ]]; then
  case $4 in
    llama-7b | llama-13b) exit 0 ;;
    *) echo "pipeplan: error: --model: unknown model '$4' (neither a preset, a .json file nor a model folder); known presets: llama-7b, llama-13b" >&2
      exit 1 ;;
  esac
fi
[[ $1 == env && $2 == --json ]] || { echo "fake pipeplan: only env --json" >&2; exit 1; }
gpu='{"index": 0, "name": "NVIDIA H200", "gpu_entry": "h200", "sms": 132,
  "memory_bytes": 150754820096, "compute_capability": "9.0", "driver_version": "13.0",
  "runtime_version": "13.0",
  "emulate_sm_share": [{"stages": 2, "sms_per_stage": 64}, {"stages": 4, "sms_per_stage": 32},
                      {"stages": 8, "sms_per_stage": 16}]}'
# FAKE_NAME and FAKE_ENTRY: another device (FAKE_ENTRY=none: one gpus.json does not know).
gpu=${gpu/\"NVIDIA H200\"/\"${FAKE_NAME:-NVIDIA H200}\"}
gpu=${gpu/\"gpu_entry\": \"h200\"/\"gpu_entry\": \"${FAKE_ENTRY:-h200}\"}
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
    line=$(grep -n -e "$pattern" "$log" | head -n 1 | cut -d: -f1 || true)
    [[ -n $line && $line -gt $previous ]] || { cat "$log"; fail "'$pattern' not after the previous"; }
    previous=$line
  done
}

dry env tests flash block profile profile-sm pipelines bpipe stalls copies waits gemm multi-gpu \
  summary
expect 'pipeplan env --json'
expect 'nvidia-smi'
# MPS: the control program, the pipe directory, the daemon, in one word for the summary.
expect "bash -c .*nvidia-cuda-mps-control.*CUDA_MPS_PIPE_DIRECTORY.*pgrep -x nvidia-cuda-mps.*MPS: "
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
# its own for another count), --step-steps steps (6), then BPipe's verdict from the same profile;
# then the stages' profile as measured, calibrated on other schedules' runs.
dry profile step profile-sm predict
expect 'plan --profile .*h200-llama-7b.measured.json --gpu h200 --stages 1 --seq 2048 --mbs 1 --schedule 1f1b --backward fused --microbatches 4 -o .*step-m4-fused.plan.json'
expect 'plan --profile .*h200-llama-7b.measured.json --gpu h200 --stages 1 --seq 2048 --mbs 1 --schedule zb-h1 --backward 2bp --microbatches 4 -o .*step-m4-2bp.plan.json'
expect 'run .*step-m4-2bp.plan.json --backend cuda --steps 6 --json --trace'
if grep -q 'step-.*--emulate' "$log"; then fail "step runs emulated"; fi
expect 'bpipe --profile .*h200-llama-7b.measured.json --gpu h200 --stages 4 --global-batch 32 --seq 2048 --mbs-list 1\\,2\\,4 *$'
expect 'bpipe --profile .*h200-llama-7b.measured.json --gpu h200 --stages 4 --global-batch 32 --seq 2048 --mbs-list 1\\,2\\,4 --json'
expect 'plan --profile .*sm32.measured.json .*--schedule zb-v --backward 2bp --microbatches 8 -o .*predict-zbv-m8.plan.json'
# The calibration set holds no predicted schedule (1F1B, ZB-V): GPipe, interleaved, ZB-H1.
expect 'calibrate fit --profile .*sm32.measured.json --sustained -o .*/h200-llama-7b-blocks8-sm32.predict.calibrated.json .*fit-gpipe-m4-fused .*fit-interleaved-m4-2bp .*fit-zb-h1-m4-2bp *$'
if grep -e 'calibrate fit' -e 'plan .*fit-' "$log" | grep -q -e 'fit-1f1b' -e 'fit-zb-v' -e '--schedule 1f1b' -e '--schedule zb-v'; then
  cat "$log"
  fail "a predicted schedule is in the calibration set"
fi
# One eval per run (a run without a trace loses its own row), each from the calibrated profile (the
# profile as measured is its "before" column).
expect 'calibrate eval --profile .*sm32.predict.calibrated.json .*/predict-1f1b-m8-2bp *$'
expect 'calibrate eval --profile .*sm32.predict.calibrated.json .*/predict-zbv-m8 *$'
[[ $(grep -c 'calibrate eval' "$log") == 2 ]] || { cat "$log"; fail "not one calibrate eval per run"; }
in_order 'step-m4-fused.plan.json' 'step-m4-2bp.plan.json' 'bpipe --profile' '--sm-partition 32' \
  'predict-1f1b-m8-2bp.plan' 'predict-zbv-m8.plan' 'fit-zb-h1-m4-2bp.plan' 'calibrate fit' \
  'calibrate eval .*predict-1f1b-m8-2bp' 'calibrate eval .*predict-zbv-m8'
# A calibrated stages' profile names the calibrated one of predict sanely.
dry --sm-profile "$repo/profiles/h200-llama-7b-blocks8-sm32.calibrated.json" predict
expect 'calibrate fit --profile .*sm32.calibrated.json --sustained -o .*/out/h200-llama-7b-blocks8-sm32.predict.calibrated.json '
dry --step-steps 8 step
expect 'run .*step-m4-fused.plan.json --backend cuda --steps 8 --json'

# nccl: the NCCL pipeplan loads first; five plans at m = 2P, each run --nccl-steps (5) steps over
# device-local copies, over NCCL between the emulated stages and under torchrun, each way's trace
# diffed; the losses compared; the NCCL tests; a rank killed.
fakes="$work/fakes"
mkdir -p "$fakes"
printf '#!/bin/sh\nexit 0\n' > "$fakes/torchrun"
chmod +x "$fakes/torchrun"
PATH="$fakes:$PATH" dry profile-sm nccl
expect 'plan --profile .*sm32.measured.json .*--schedule 1f1b --backward fused --microbatches 8 --bpipe on --memory 0 -o .*nccl-1f1b-m8-fused-bpipe.plan.json'
in_order 'pipeplan env --json' 'stage goes on only where nccl-env.json reports NCCL 2.30 or later' \
  'nccl-gpipe-m8-fused.plan.json' 'run .*nccl-gpipe-m8-fused.plan.json --backend cuda --emulate 4 --steps 5 --json' \
  'run .*nccl-gpipe-m8-fused.plan.json --backend cuda --emulate 4 --transport nccl --steps 5' \
  '^env LD_LIBRARY_PATH=[^ ]* torchrun --nproc-per-node 4 --no-python env LD_LIBRARY_PATH=[^ ]* .*pipeplan run .*nccl-gpipe-m8-fused.plan.json --backend cuda --steps 5 --json --trace .*nccl-gpipe-m8-fused.torchrun.trace.json' \
  'diff .*nccl-gpipe-m8-fused.plan.json .*nccl-gpipe-m8-fused.local.trace.json --json --all' \
  'diff .*nccl-gpipe-m8-fused.plan.json .*nccl-gpipe-m8-fused.nccl.trace.json --json --all' \
  'diff .*nccl-gpipe-m8-fused.plan.json .*nccl-gpipe-m8-fused.torchrun.trace.json --json --all' \
  'nccl-interleaved-m8-2bp.plan' 'nccl-zb-v-m8-2bp.plan' \
  'summary.py --losses .*nccl-gpipe-m8-fused.local.json .*nccl-gpipe-m8-fused.nccl.json .*nccl-gpipe-m8-fused.torchrun.json' \
  "--gtest_filter=NcclTransport" \
  'bash .*bench/gpu/rank_killed.sh .*/out 4 2 20000 10 120 .*pipeplan run .*/nccl-1f1b-m8-2bp.plan.json --backend cuda --steps 1 --json --timeout-ms 20000' \
  'summary.py --rank-killed .*/nccl-rank-killed.txt'
[[ $(grep -c -e '--emulate 4 .*--steps 5' "$log") == 10 ]] || { cat "$log"; fail "not 5 x 2 emulated runs of 5 steps"; }
# --nccl-plans picks the acceptance plan alone; without torchrun, python3 -m torch.distributed.run
# (a python3 here that says it has it).
real_python=$(command -v python3)
# fake_python STATUS: a python3 in $fakes answering `import torch.distributed.run` with STATUS,
# the real one otherwise.
fake_python() {
  # shellcheck disable=SC2016  # expanded by the fake python3
  printf '#!/usr/bin/env bash\n[[ ${1:-} == -c && ${2:-} == "import torch.distributed.run" ]] && exit %s\nexec %q "$@"\n' \
    "$1" "$real_python" > "$fakes/python3"
  chmod +x "$fakes/python3"
}
fake_python 0
rm -f "$fakes/torchrun"
if ! command -v torchrun > /dev/null; then
  PATH="$fakes:$PATH" dry --nccl-plans 1f1b-2bp --nccl-steps 7 profile-sm nccl
  expect '^env LD_LIBRARY_PATH=[^ ]* python3 -m torch.distributed.run --nproc-per-node 4 --no-python env LD_LIBRARY_PATH=[^ ]* .*pipeplan run .*nccl-1f1b-m8-2bp.plan.json --backend cuda --steps 7'
  planned=$(grep -o '[a-z0-9-]*\.plan\.json' "$log" | sort -u | tr '\n' ' ')
  [[ $planned == "nccl-1f1b-m8-2bp.plan.json " ]] || { cat "$log"; fail "--nccl-plans 1f1b-2bp ran $planned"; }
fi
rm -f "$fakes/python3"

# The NCCL to load: --nccl-lib-dir over PIPEPLAN_NCCL_LIB_DIR, said first in a dry run. (A folder
# without libnccl.so.2 stops the nccl WHAT alone: on the fake machine below.)
mkdir -p "$work/nccl-a" "$work/nccl-b"
PIPEPLAN_NCCL_LIB_DIR="$work/nccl-b" dry --nccl-lib-dir "$work/nccl-a" env
expect "^# NCCL: $work/nccl-a (--nccl-lib-dir) first on LD_LIBRARY_PATH"
PIPEPLAN_NCCL_LIB_DIR="$work/nccl-b" dry env
expect "^# NCCL: $work/nccl-b (PIPEPLAN_NCCL_LIB_DIR) first on LD_LIBRARY_PATH"

# pairs: dualpipe-v, zb-v and dualpipe at m = 2P from the stages' profile, each run and diffed.
dry profile-sm pairs
expect 'plan --profile .*sm32.measured.json .*--schedule dualpipe-v --backward 2bp --microbatches 8 -o .*pairs-dualpipev-m8-2bp.plan.json'
expect 'run .*pairs-dualpipev-m8-2bp.plan.json --backend cuda --emulate 4'
in_order '--sm-partition 32' 'pairs-dualpipev-m8-2bp.plan' 'diff .*pairs-dualpipev-m8-2bp' \
  'pairs-zbv-m8-2bp.plan' '--schedule dualpipe --backward 2bp --microbatches 8' 'diff .*pairs-dualpipe-m8-2bp' \
  'calibrate fit --overlap --profile .*sm32.measured.json -o .*sm32.measured.pairs.json .*pairs-dualpipev-m8-2bp .*pairs-dualpipe-m8-2bp' \
  'torch_dualpipe_v_test.py'
# torch with the library path run.sh was started with, pipeplan with the one it set.
expect "^env PIPEPLAN_TORCH_PYTHON=$repo/bench/gpu/torch_python.sh PIPEPLAN_TORCH_LD_LIBRARY_PATH=[^ ]* python3 .*torch_dualpipe_v_test.py .*pipeplan $repo *\$"
dry --step-layers 16 step
expect 'profile --backend cuda --model .*llama-7b-blocks16.json --seq 2048 --mbs 1\\,2\\,4 --attention flash -o .*h200-llama-7b-blocks16.measured.json'
expect 'bpipe --profile .*h200-llama-7b-blocks16.measured.json --gpu h200 --stages 4'
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

# A GPU pipeplan matches to no gpus.json entry ("none"): the output folder takes the device's
# name; without --gpu a dry run says a real run stops; with --gpu KEY every profile, plan, run
# and bench_block gets it.
rtx='NVIDIA RTX PRO 6000 Blackwell Server Edition'
rtx_key=nvidia-rtx-pro-6000-blackwell-server-edition
unknown() {  # unknown ARG...: a dry run on that GPU, to $log, default output folder
  if ! FAKE_NAME=$rtx FAKE_ENTRY=none bash "$repo/bench/gpu/run.sh" --dry-run \
    --pipeplan "$work/pipeplan" --runs 1f1b-2bp --m 4 "$@" > "$log" 2>&1; then
    cat "$log"
    fail "the dry run of '$*' on an unknown GPU failed"
  fi
}
unknown block profile-sm pipelines
expect "^# dry run: a real run stops here: pipeplan matches '$rtx' to no gpus.json entry: pass --gpu KEY"
expect "output folder $repo/bench/results/$rtx_key/"
unknown --gpu h100-pcie block profile-sm pipelines
expect "output folder $repo/bench/results/$rtx_key/"
expect 'bench_block --gpu h100-pcie --model llama-7b'
expect 'torch_block.py --gpu h100-pcie --seq 2048'
expect "profile --backend cuda --gpu h100-pcie --model .*--sm-partition 32 -o .*/$rtx_key-llama-7b-blocks8-sm32.measured.json"
expect 'plan --profile .*sm32.measured.json --gpu h100-pcie --stages 4 '
expect 'run .*1f1b-m4-2bp.plan.json --backend cuda --gpu h100-pcie --emulate 4 '
if grep -q -e 'real run stops' -e '--gpu none' -e 'results/none' "$log"; then
  cat "$log"
  fail "--gpu h100-pcie on an unknown GPU: still 'none' or stopped"
fi
[[ ! -e $repo/bench/results/$rtx_key ]] || fail "a dry run wrote bench/results/$rtx_key"
# The shipped H200 profiles on an H200 named by --gpu (an alias too) are taken.
unknown --gpu H200 --sm-profile "$repo/profiles/h200-llama-7b-blocks8-sm32.calibrated.json" pipelines
expect 'plan --profile .*h200-llama-7b-blocks8-sm32.calibrated.json --gpu H200 --stages 4 '

# The nccl stage for real on a fake GPU machine: a fake pipeplan answers `env --json` with NCCL
# $FAKE_NCCL, plans (refusing a plan whose options match $FAKE_REFUSE), runs in one process (a
# JSON report, a trace) or as rank RANK of a torchrun-style launch (PIPEPLAN_TEST_FAULT=die:K:
# rank K kills itself; the others end as pipeplan's do, naming it, except rank $FAKE_RANK_OK,
# which exits 0), diffs, and calibrates (refusing a run without its plan or trace, as pipeplan
# does); each run says its LD_LIBRARY_PATH on stderr. A fake torchrun says its own and runs the
# command once.
machine="$work/machine"
mkdir -p "$machine"
cat > "$machine/pipeplan" << 'FAKE_PIPEPLAN'
#!/usr/bin/env bash
case ${1:-} in
  env)
    cat << JSON
{"pipeplan": {"version": "0.1.0", "cuda_backend": true, "nccl": true, "mpi": false},
 "cuda_module": {"path": "/fake/libpipeplan_cuda.so", "loaded": true, "error": null,
                 "kernel_driver": "580.159.04"},
 "gpus": [{"index": 0, "name": "NVIDIA H200", "gpu_entry": "${FAKE_ENTRY:-h200}", "sms": 132,
           "memory_bytes": 150754820096, "driver_version": "13.0", "runtime_version": "13.0",
           "emulate_sm_share": [{"stages": 4, "sms_per_stage": 32}]}],
 "libraries": [{"name": "libnccl", "path": "${LD_LIBRARY_PATH%%:*}/libnccl.so.2",
                "version": "${FAKE_NCCL:-2.31.2}", "error": null}],
 "environment": {}}
JSON
    ;;
  plan)
    if [[ -n ${FAKE_REFUSE:-} && " $* " =~ $FAKE_REFUSE ]]; then
      echo "pipeplan: error: stage 0's peak is above its limit" >&2
      exit 1
    fi
    mbs=1 bpipe=off memory='' json='' output=''
    while (($#)); do
      case $1 in
        --mbs) mbs=$2 ;;
        --bpipe) bpipe=$2 ;;
        --memory) memory=$2 ;;
        --json) json=1 ;;
        -o) output=$2 ;;
      esac
      shift
    done
    # The planned peaks of 8 stages: 5 GiB per stage and sample, 4.5 with BPipe; with --memory,
    # a micro-batch size over 1 fits only with BPipe.
    if [[ -n $json ]]; then
      peak=$((mbs * 5120 * 1048576))
      if [[ $bpipe == on ]]; then peak=$((mbs * 4608 * 1048576)); fi
      echo "{\"peak_memory_bytes\": [$peak, $peak, $peak, $peak, $peak, $peak, $peak, $peak]}"
      exit 0
    fi
    if [[ -n $memory && $bpipe != on && $mbs -gt 1 ]]; then
      echo "pipeplan: error: --memory: device 0 needs more, above its limit $memory" >&2
      exit 1
    fi
    if [[ -n $output && -e $output && ! -f $output ]]; then  # as pipeplan refuses it
      echo "pipeplan: error: $output: cannot write (pipeplan writes regular files only)" >&2
      exit 1
    fi
    if [[ -n $output ]]; then echo '{"meta": {"devices": 4}}' > "$output"; fi
    ;;
  calibrate)
    what=$2 output=''
    shift 2
    runs=()
    while (($#)); do
      case $1 in
        --profile | -o) [[ $1 == -o ]] && output=$2; shift 2 ;;
        --*) shift ;;
        *) runs+=("$1"); shift ;;
      esac
    done
    for run in "${runs[@]}"; do
      [[ -s $run.plan.json && -s $run.trace.json ]] ||
        { echo "pipeplan: error: $run: no plan or trace" >&2; exit 1; }
      # eval reads the run's report as pipeplan does: JSON once its '#' lines are dropped.
      if [[ $what == eval && -e $run.run.json ]] && ! python3 -c '
import json, sys
json.loads("".join(line for line in open(sys.argv[1]) if not line.startswith("#")))' \
        "$run.run.json" 2> /dev/null; then
        echo "pipeplan: error: $run.run.json: not a JSON report" >&2
        exit 1
      fi
      [[ $what == eval ]] && echo "$(basename "$run")  212.000  200.000  +6.0%  203.000  +4.4%  -  -"
    done
    if [[ -n $output ]]; then echo '{}' > "$output"; fi
    ;;
  run)
    echo "fake pipeplan run: LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >&2
    trace=''
    while (($#)); do
      if [[ $1 == --trace ]]; then trace=$2; fi
      shift
    done
    if [[ -n ${RANK:-} ]]; then
      killed=${PIPEPLAN_TEST_FAULT#die:}
      if [[ $RANK == "$killed" ]]; then sleep 0.2; kill -9 $$; fi
      sleep 0.6
      if [[ $RANK == "${FAKE_RANK_OK:-}" ]]; then exit 0; fi
      lost="rank $killed closed its connection (it exited or was killed)"
      if [[ $RANK == 0 ]]; then
        echo "pipeplan: error: rank 0: $lost" >&2
      else
        echo "pipeplan: error: rank $RANK: rank 0 ended the job: $lost" >&2
      fi
      exit 1
    fi
    if [[ -n $trace ]]; then echo '{"traceEvents": []}' > "$trace"; fi
    cat << JSON
{"hardware": {"emulated": true}, "predicted": {"makespan_us": 400000},
 "measured": {"makespan_us": 410000, "steady": {"makespan_us": 404000, "steps": 4, "first_step": 2}},
 "error_pct": {"makespan": 2.5, "steady_makespan": 1.0}, "peak_memory": [],
 "steps": [{"step": 1, "loss": 10.5}, {"step": 2, "loss": 10.25}]}
JSON
    ;;
  diff)
    echo '{"ops": [{"node": 1, "label": "send 0F0→1", "device": 0, "stream": "send>1",'
    echo '  "predicted_us": 100.0, "measured_us": 125.0}]}'
    ;;
  *) exit 1 ;;
esac
FAKE_PIPEPLAN
mkdir -p "$machine/launcher"
cat > "$machine/launcher/torchrun" << 'FAKE_TORCHRUN'
#!/usr/bin/env bash
echo "fake torchrun: LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >&2
while [[ $1 == --* ]]; do
  case $1 in --no-python) shift ;; *) shift 2 ;; esac
done
exec "$@"
FAKE_TORCHRUN
chmod +x "$machine/pipeplan" "$machine/launcher/torchrun"
echo '{}' > "$machine/profile.json"
# on_machine NAME [VAR=VALUE...] -- OPTION... WHAT...: run.sh for real, its folder $machine/NAME.
on_machine() {
  local name=$1
  shift
  local -a vars=()
  while [[ $1 != -- ]]; do vars+=("$1"); shift; done
  shift
  status=0
  env "${vars[@]}" bash "$repo/bench/gpu/run.sh" --pipeplan "$machine/pipeplan" \
    --tests-binary /bin/true --sm-profile "$machine/profile.json" --out "$machine/$name" "$@" \
    > "$machine/$name.log" 2>&1 || status=$?
}
# An NCCL before 2.30: the stage stops in one line, nothing planned.
on_machine old FAKE_NCCL=2.28.3 -- nccl
[[ $status == 1 ]] || { cat "$machine/old.log"; fail "an old NCCL: run.sh exited $status, not 1"; }
grep -q '^nccl: stopped: NCCL 2.28.3 from .*/libnccl.so.2 is loaded; several ranks on one GPU need NCCL 2.30 or later' \
  "$machine/old/index.txt" || { cat "$machine/old/index.txt"; fail "an old NCCL: no line saying so"; }
if ls "$machine/old/"*.plan.* > /dev/null 2>&1; then fail "an old NCCL: the stage went on"; fi
# 2.31 from the folder --nccl-lib-dir names (the fake loads it from the first folder on
# LD_LIBRARY_PATH): every way runs, the losses agree, the killed rank passes; the summary has every
# table; the folder is in the headers and the manifest.
mkdir -p "$machine/nccl"
: > "$machine/nccl/libnccl.so.2"
on_machine good "PATH=$machine/launcher:$PATH" LD_LIBRARY_PATH=/original/lib -- \
  --nccl-lib-dir "$machine/nccl" --nccl-plans 1f1b-2bp,zb-v-2bp nccl summary
[[ $status == 0 ]] || { cat "$machine/good.log" "$machine/good/index.txt"; fail "the nccl stage on the fake machine exited $status"; }
good="$machine/good"
grep -q "^nccl: NCCL 2.31.2 from $machine/nccl/libnccl.so.2 (chosen by --nccl-lib-dir, first on LD_LIBRARY_PATH)" \
  "$good/index.txt" || { cat "$good/index.txt"; fail "the NCCL loaded is not recorded"; }
grep -q "^# environment: .* LD_LIBRARY_PATH=$machine/nccl" "$good/nccl-1f1b-m8-2bp.nccl.json" ||
  fail "the chosen NCCL folder is not in the headers"
python3 - "$good/manifest.json" "$machine/nccl" << 'PY' || fail "manifest.json: not the NCCL chosen and loaded"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["nccl_chosen"] == {"folder": sys.argv[2], "from": "--nccl-lib-dir"}, m["nccl_chosen"]
assert m["nccl"] == "2.31.2" and m["nccl_path"] == sys.argv[2] + "/libnccl.so.2", m
PY
for file in nccl-1f1b-m8-2bp.torchrun.json nccl-zb-v-m8-2bp.torchrun.diff.json nccl-1f1b-m8-2bp.local.diff.json \
  nccl-rank-killed.rank3.txt; do
  [[ -s $good/$file ]] || fail "no $file"
done
grep -q '"killed_rank": 2, "world": 4' "$good/nccl-rank-killed.txt" || { cat "$good/nccl-rank-killed.txt"; fail "no killed-rank facts"; }
grep -q '^rank 2: exit 137,' "$good/nccl-rank-killed.txt" || { cat "$good/nccl-rank-killed.txt"; fail "rank 2 not killed"; }
grep -q '^Every rank passed.' "$good/nccl-rank-killed-check.txt" || { cat "$good/nccl-rank-killed-check.txt"; fail "the killed rank check failed"; }
for title in '## Machine' '## NCCL on one GPU: losses' '## NCCL on one GPU: step time of each way' \
  '## NCCL on one GPU: transfers per link' '## NCCL: a rank killed at its first node' \
  '| nccl-zb-v-m8-2bp | 0→1 | 1 | 0.10 | 0.12 | 0.12 | 0.12 |' 'All three ways agree;'; do
  grep -q -F -e "$title" "$good/summary.md" || { cat "$good/summary.md"; fail "summary.md: no '$title'"; }
done
# torchrun starts with the library path run.sh was started with, each rank's pipeplan with the
# one run.sh set (the chosen NCCL first); what they say on stderr is beside the JSON output
# (NAME.err), which is named in it and holds nothing else.
grep -q '^fake torchrun: LD_LIBRARY_PATH=/original/lib$' "$good/nccl-1f1b-m8-2bp.torchrun.err" ||
  { cat "$good/nccl-1f1b-m8-2bp.torchrun.err"; fail "torchrun started with run.sh's library path"; }
grep -q "^fake pipeplan run: LD_LIBRARY_PATH=$machine/nccl:/original/lib$" \
  "$good/nccl-1f1b-m8-2bp.torchrun.err" ||
  { cat "$good/nccl-1f1b-m8-2bp.torchrun.err"; fail "a torchrun rank without run.sh's library path"; }
grep -q '^# stderr: nccl-1f1b-m8-2bp.torchrun.err$' "$good/nccl-1f1b-m8-2bp.torchrun.json" ||
  fail "nccl-1f1b-m8-2bp.torchrun.json: its stderr file is not named"
if grep -q '^fake ' "$good/nccl-1f1b-m8-2bp.torchrun.json"; then
  fail "nccl-1f1b-m8-2bp.torchrun.json: stderr mixed into the JSON output"
fi
# The switches a command sets are in its header: the NCCL tests', the killed rank's.
grep -q '^# environment: .* PIPEPLAN_REQUIRE_NCCL=1' "$good/tests-nccl.txt" ||
  fail "tests-nccl.txt: no PIPEPLAN_REQUIRE_NCCL=1 in its header"
grep -q '^# environment: .* PIPEPLAN_TEST_FAULT=die:2' "$good/nccl-rank-killed.txt" ||
  fail "nccl-rank-killed.txt: no PIPEPLAN_TEST_FAULT=die:2 in its header"
if grep -l '^# environment: .*PIPEPLAN_\(TEST_FAULT\|REQUIRE_NCCL\)' "$good"/* |
  grep -v -e '/tests-nccl.txt$' -e '/nccl-rank-killed.txt$'; then
  fail "a switch recorded on a command that did not set it"
fi
grep -q '^PIPEPLAN_TEST_FAULT=die:2, 4 ranks .* a limit of 120 s per rank' "$good/nccl-rank-killed.txt" ||
  { cat "$good/nccl-rank-killed.txt"; fail "the ranks' limit is not 120 s without a deadline"; }
# Near --deadline-s, each rank's limit is 10 s less than the harness has.
on_machine capped "PATH=$machine/launcher:$PATH" -- --nccl-lib-dir "$machine/nccl" \
  --nccl-plans 1f1b-2bp --deadline-s 100 nccl
limit=$(sed -n 's/.* a limit of \([0-9]*\) s per rank$/\1/p' "$machine/capped/nccl-rank-killed.txt")
if [[ -z $limit ]] || ((limit < 50 || limit > 70)); then
  cat "$machine/capped/nccl-rank-killed.txt"
  fail "--deadline-s 100: a rank limit of '$limit' s"
fi
grep -q '^Every rank passed.' "$machine/capped/nccl-rank-killed-check.txt" ||
  fail "--deadline-s 100: the killed rank check failed"

# A --nccl-lib-dir without libnccl.so.2: a line says so, the nccl WHAT stops on it, the others run
# (the summary too) and the manifest names it.
on_machine nolib "PATH=$machine/launcher:$PATH" -- --nccl-lib-dir "$work/nccl-a" \
  --nccl-plans 1f1b-2bp env nccl summary
[[ $status == 1 ]] || { cat "$machine/nolib.log"; fail "no libnccl.so.2: run.sh exited $status, not 1"; }
for line in "run.sh: --nccl-lib-dir: no libnccl.so.2 in '$work/nccl-a': not used" \
  "nccl: stopped: --nccl-lib-dir: no libnccl.so.2 in '$work/nccl-a'"; do
  grep -q -F -e "$line" "$machine/nolib/index.txt" ||
    { cat "$machine/nolib/index.txt"; fail "no libnccl.so.2: no '$line' in index.txt"; }
done
if ls "$machine/nolib/"nccl-* > /dev/null 2>&1; then fail "no libnccl.so.2: the nccl WHAT went on"; fi
for file in env.json summary.md; do
  grep -q '^# exit status: 0' "$machine/nolib/$file" || fail "no libnccl.so.2: $file was not written"
done
python3 - "$machine/nolib/manifest.json" "$work/nccl-a" << 'PY' || fail "manifest.json: no nccl_missing"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["nccl_missing"] == f"--nccl-lib-dir: no libnccl.so.2 in '{sys.argv[2]}'", m["nccl_missing"]
assert m["nccl_chosen"] is None, m["nccl_chosen"]
PY

# Past --deadline-s every command is skipped but the summary, which is written whatever is left;
# nccl says its NCCL was not measured.
on_machine late -- --deadline-s 25 --nccl-plans 1f1b-2bp env nccl summary
grep -q '^# skipped: the deadline' "$machine/late/env.json" || fail "--deadline-s 25: env.json ran"
grep -q '^nccl: stopped: the NCCL version was not measured (nccl-env.json skipped' \
  "$machine/late/index.txt" || { cat "$machine/late/index.txt"; fail "--deadline-s 25: nccl does not say it was not measured"; }
grep -q '^# exit status: 0' "$machine/late/summary.md" ||
  { cat "$machine/late/summary.md"; fail "--deadline-s 25: no summary"; }

# calibrate fit and eval get the runs that left a plan and a trace: a plan refused loses its run,
# not the fit; each eval is its run's own.
on_machine refused FAKE_REFUSE='interleaved|dualpipe-v' -- predict pairs summary
for file in predict-calibrate-fit.txt predict-calibrate-eval-1f1b-m8-2bp.txt \
  predict-calibrate-eval-zbv-m8.txt pairs-calibrate-fit.txt; do
  grep -q '^# exit status: 0' "$machine/refused/$file" ||
    { cat "$machine/refused/$file"; fail "a refused plan: $file failed"; }
done
grep -q '^# command: .*calibrate fit .*{out}/fit-gpipe-m4-fused {out}/fit-zb-h1-m4-2bp$' \
  "$machine/refused/predict-calibrate-fit.txt" || fail "a refused plan: not the other fit runs"
grep -q '^# command: .*calibrate fit --overlap .* {out}/pairs-dualpipe-m8-2bp$' \
  "$machine/refused/pairs-calibrate-fit.txt" || fail "a refused plan: not the other pair run"
grep -q '^| predict-zbv-m8 | 2-5 | 404.0 | 400.0 | +1.0 % | 203.0 |' "$machine/refused/summary.md" ||
  { cat "$machine/refused/summary.md"; fail "a refused plan: the eval rows are not in the summary"; }
# A run's stderr (the fake says its library path there) is in NAME.run.err, not its report.
grep -q '^fake pipeplan run: ' "$machine/refused/predict-zbv-m8.run.err" ||
  fail "predict-zbv-m8.run.err: not the run's stderr"

# bpipe: the size that fits only with BPipe runs with it, and the largest smaller one that fits
# without it at the same limit runs without (asked of pipeplan with a scratch plan file, removed).
on_machine bpipe -- --bpipe-profile "$machine/profile.json" bpipe
[[ $status == 1 ]] || { cat "$machine/bpipe.log"; fail "bpipe: run.sh exited $status, not 1 (the plan refused by design)"; }
for file in bpipe-mbs2.run.json nobpipe-mbs1.run.json; do
  grep -q '^# exit status: 0' "$machine/bpipe/$file" ||
    { cat "$machine/bpipe/index.txt"; fail "bpipe: $file did not run"; }
done
grep -q '^# command: .*plan .*--mbs 1 --memory [0-9.]*GiB --reserve 0 -o {out}/nobpipe-mbs1.plan.json$' \
  "$machine/bpipe/nobpipe-mbs1.plan.txt" || fail "bpipe: nobpipe-mbs1 not at the BPipe run's limit"
[[ ! -e $machine/bpipe/.scratch ]] || fail "bpipe: the scratch folder was left behind"

# step from a --gpu-profile whose model does not fit this GPU: each refused plan is noted with the
# profile's model and what to do, and a step with nothing measured is a failure.
echo '{"gpu": "h200", "model": {"name": "llama-7b", "layers": 32}}' > "$machine/gpu-profile.json"
on_machine bigstep FAKE_REFUSE='--stages 1 ' -- --gpu-profile "$machine/gpu-profile.json" step
[[ $status == 1 ]] || fail "a --gpu-profile too large: run.sh exited $status, not 1"
for line in "step-m4-fused: not run: the model of --gpu-profile $machine/gpu-profile.json (llama-7b, 32 blocks) does not fit this GPU" \
  "step-m4-2bp: not run: the model of --gpu-profile" "leave --gpu-profile out and step profiles 32 LLaMA-7B blocks here" \
  "step: nothing measured"; do
  grep -q -F -e "$line" "$machine/bigstep/index.txt" ||
    { cat "$machine/bigstep/index.txt"; fail "a --gpu-profile too large: no '$line'"; }
done

# A GPU pipeplan matches to no gpus.json entry: without --gpu, a WHAT that profiles, plans or runs
# stops in one line before anything runs; env and the summary need none.
on_machine unknown FAKE_ENTRY=none -- pipelines
if [[ $status != 2 || $(wc -l < "$machine/unknown.log") != 1 || -e $machine/unknown ]] ||
  ! grep -q "to no gpus.json entry: pass --gpu KEY" "$machine/unknown.log"; then
  cat "$machine/unknown.log"
  fail "an unknown GPU without --gpu: not stopped in one line (status $status)"
fi
on_machine unknown-env FAKE_ENTRY=none -- env summary
[[ $status == 0 ]] || { cat "$machine/unknown-env.log"; fail "an unknown GPU: env summary exited $status"; }

# Paths relative to where run.sh is started, checked there: a profile beside it runs, a missing
# one is refused in one line naming the option.
status=0
(cd "$machine" && bash "$repo/bench/gpu/run.sh" --pipeplan ./pipeplan --sm-profile profile.json \
  --out relative --runs 1f1b-2bp --m 4 pipelines > relative.log 2>&1) || status=$?
[[ $status == 0 ]] || { cat "$machine/relative.log"; fail "a relative --sm-profile: run.sh exited $status"; }
grep -q "^# command: .*plan --profile $machine/profile.json " "$machine/relative/1f1b-m4-2bp.plan.txt" ||
  fail "a relative --sm-profile: not made absolute from where run.sh started"
status=0
(cd "$machine" && bash "$repo/bench/gpu/run.sh" --pipeplan ./pipeplan --sm-profile nothere.json \
  --out elsewhere pipelines > "$log" 2>&1) || status=$?
if [[ $status != 2 || $(wc -l < "$log") != 1 || -e $machine/elsewhere ]] ||
  ! grep -q -e "--sm-profile: no file '$machine/nothere.json'" "$log"; then
  cat "$log"
  fail "a missing relative --sm-profile should fail in one line with status 2 (got $status)"
fi
# A surviving rank that exits 0: the check fails, and so does run.sh.
on_machine survivor "PATH=$machine/launcher:$PATH" FAKE_RANK_OK=3 -- --nccl-plans 1f1b-2bp nccl
[[ $status == 1 ]] || fail "a surviving rank exiting 0: run.sh exited $status, not 1"
grep -q '^| 3 | 0 | .* | \*\*fail\*\*: exit 0, 0 error lines |' "$machine/survivor/nccl-rank-killed-check.txt" ||
  { cat "$machine/survivor/nccl-rank-killed-check.txt"; fail "a surviving rank exiting 0 passed"; }
# Neither torchrun nor python3 -m torch.distributed.run: the runs of one process per stage are
# not run, which is a failure (a python3 here that has no torch).
if ! command -v torchrun > /dev/null; then
  fake_python 1
  on_machine bare "PATH=$fakes:$PATH" -- --nccl-plans 1f1b-2bp nccl summary
  rm -f "$fakes/python3"
  [[ $status == 1 ]] || fail "no torchrun: run.sh exited $status, not 1"
  grep -q '^# not run: no torchrun and no python3 -m torch.distributed.run here' \
    "$machine/bare/nccl-1f1b-m8-2bp.torchrun.json" || fail "no torchrun: not recorded as not run"
  grep -q '| nccl-1f1b-m8-2bp | 10.500000 10.250000 | same | \*\*not run\*\* (no torchrun' \
    "$machine/bare/summary.md" || { cat "$machine/bare/summary.md"; fail "no torchrun: the summary does not say so"; }
  grep -q '^# exit status: 1' "$machine/bare/nccl-losses.txt" || fail "no torchrun: the losses agreed"
fi
# The env WHAT says whether MPS runs, and the summary repeats it.
on_machine env -- env summary
grep -q '^MPS: ' "$machine/env/env-mps.txt" || { cat "$machine/env/env-mps.txt"; fail "env-mps.txt: no MPS line"; }
grep -q '^- MPS: ' "$machine/env/summary.md" || { cat "$machine/env/summary.md"; fail "summary.md: no MPS line"; }

# An --out that holds anything is refused in one line, before anything runs (the summary reads
# every file in it), dry run or not.
mkdir -p "$work/full"
echo old > "$work/full/old.json"
for dry_run in '' --dry-run; do
  status=0
  bash "$repo/bench/gpu/run.sh" $dry_run --pipeplan "$work/pipeplan" --out "$work/full" env summary \
    > "$log" 2>&1 || status=$?
  if [[ $status != 2 || $(wc -l < "$log") != 1 || $(ls "$work/full") != old.json ]] ||
    ! grep -q -e "--out: '$work/full' is not empty" "$log"; then
    cat "$log"
    fail "a non-empty --out should fail in one line with status 2 (got $status)"
  fi
done

# The killed-rank harness stopped from outside (run.sh's timeout around it): no rank outlives it.
mkdir -p "$work/orphans"
status=0
# shellcheck disable=SC2016  # expanded by the ranks' bash
timeout -k 1 2 bash "$repo/bench/gpu/rank_killed.sh" "$work/orphans" 3 1 2000 1 60 bash -c \
  'echo $$ > "$0/pid.$RANK"; exec sleep 60' "$work/orphans" > /dev/null 2>&1 || status=$?
[[ $status == 124 ]] || fail "rank_killed.sh under a timeout of 2 s exited $status"
sleep 0.5
for pidfile in "$work/orphans"/pid.*; do
  pid=$(< "$pidfile")
  if kill -0 "$pid" 2> /dev/null; then
    kill "$pid"
    fail "rank_killed.sh: rank ${pidfile##*.} outlived the harness"
  fi
done
pidfiles=("$work/orphans"/pid.*)
[[ ${#pidfiles[@]} == 3 ]] || fail "rank_killed.sh: not 3 ranks started"

# The killed-rank harness alone, with a rank that dies at once and ranks that end at once: each
# rank's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT as torchrun
# sets them, and its own output.
mkdir -p "$work/harness"
bash "$repo/bench/gpu/rank_killed.sh" "$work/harness" 3 1 2000 1 20 bash -c \
  'echo "R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE A=$MASTER_ADDR P=$MASTER_PORT F=$PIPEPLAN_TEST_FAULT"; exit $((RANK + 3))' \
  > "$work/harness/out.txt"
grep -q '^R=2 W=3 L=2 LW=3 A=127.0.0.1 P=[0-9][0-9]* F=die:1$' "$work/harness/nccl-rank-killed.rank2.txt" ||
  { cat "$work/harness/nccl-rank-killed.rank2.txt"; fail "rank_killed.sh: not torchrun's variables"; }
grep -q '^rank 1: exit 4, ended [0-9]* ms after the start' "$work/harness/out.txt" || { cat "$work/harness/out.txt"; fail "rank_killed.sh: no rank line"; }
tail -n 1 "$work/harness/out.txt" | python3 -c '
import json, sys
facts = json.loads(sys.stdin.read())
assert facts["killed_rank"] == 1 and facts["timeout_ms"] == 2000 and facts["slack_ms"] == 1000, facts
assert [r["status"] for r in facts["ranks"]] == [3, 4, 5], facts
' || fail "rank_killed.sh: its JSON line is not the ranks'"

# Bad options: refused before anything runs, in one line naming the option, exit 2.
for bad in "--runs 1f1b-2bp,gpipe-3bp|--runs: unknown run 'gpipe-3bp'" \
  "--m 6,twelve|--m: 'twelve' is not a positive integer" \
  "--wait-m 0|--wait-m: '0' is not a positive integer" \
  "--copy-waits stream,spin|--copy-waits: unknown wait 'spin'" \
  "--connections 8,many|--connections: 'many' is neither" \
  "--stages|--stages: needs a value" \
  "--frobnicate 1|unknown option '--frobnicate'" \
  "--steps -1|--steps: '-1' is not a positive integer" \
  "--step-steps 0|--step-steps: '0' is not a positive integer" \
  "--nccl-steps five|--nccl-steps: 'five' is not a positive integer" \
  "--nccl-plans 1f1b-2bp,gpipe-3bp|--nccl-plans: unknown plan 'gpipe-3bp'" \
  "--gpu h300|--gpu: 'h300' is not a gpus.json entry (h100-sxm h100-pcie h200 a100-80g)" \
  "--runs ,|--runs: ',' has an empty element" \
  "--m 4,,8|--m: '4,,8' has an empty element" \
  "--m 4,|--m: '4,' has an empty element" \
  "--bpipe-mbs ,|--bpipe-mbs: ',' has an empty element" \
  "--nccl-plans ,|--nccl-plans: ',' has an empty element" \
  "--connections ,32|--connections: ',32' has an empty element" \
  "--copy-modes ,|--copy-modes: ',' has an empty element" \
  "--copy-waits stream,,poll|--copy-waits: 'stream,,poll' has an empty element" \
  "--deadline-s 0900|--deadline-s: '0900' is not a number of seconds" \
  "--deadline-s 1e3|--deadline-s: '1e3' is not a number of seconds" \
  "--copies-limit abc|--copies-limit: 'abc' is not a size above 0" \
  "--copies-limit 0GiB|--copies-limit: '0GiB' is not a size above 0" \
  "--copies-limit 9GiBs|--copies-limit: '9GiBs' is not a size above 0" \
  "--copies-limit 12|--copies-limit: '12' is not a size above 0" \
  "--multi-gpu-model nosuch|--multi-gpu-model: unknown model 'nosuch' (neither a preset, a .json file nor a model folder); known presets: llama-7b" \
  "--step-layers 16 --gpu-profile x.json|--step-layers: not with --gpu-profile"; do
  status=0
  read -r -a arguments <<< "${bad%%|*}"
  bash "$repo/bench/gpu/run.sh" --dry-run --pipeplan "$work/pipeplan" pipelines "${arguments[@]}" \
    > "$log" 2>&1 || status=$?
  if [[ $status != 2 || $(wc -l < "$log") != 1 ]] || ! grep -q -e "${bad#*|}" "$log"; then
    cat "$log"
    fail "'${bad%%|*}' should fail in one line with status 2 (got $status)"
  fi
done
# An empty list is refused as the others are.
for option in --m --runs --bpipe-mbs --nccl-plans --connections --copy-modes --copy-waits; do
  status=0
  bash "$repo/bench/gpu/run.sh" --dry-run --pipeplan "$work/pipeplan" pipelines "$option" '' \
    > "$log" 2>&1 || status=$?
  if [[ $status != 2 || $(wc -l < "$log") != 1 ]] || ! grep -q -e "$option: an empty list" "$log"; then
    cat "$log"
    fail "an empty $option should fail in one line with status 2 (got $status)"
  fi
done
# The sizes and models pipeplan reads are taken; a model it does not read is refused as pipeplan
# words it (the real one, where it is built).
dry --copies-limit 12.5G --multi-gpu-model llama-13b --gpu-profile "$repo/profiles/h200-llama-7b.measured.json" \
  --deadline-s 900 copies multi-gpu
expect 'plan --profile .*h200-llama-7b.measured.json --gpu h200 --stages 4 .*-o .*gpus4-1f1b-m4-2bp.plan.json'
if [[ -x $repo/build/tools/pipeplan ]]; then
  for bad in "nosuch|--multi-gpu-model: unknown model 'nosuch' (neither a preset, a .json file nor a model folder); known presets: llama-7b, " \
    "$work/none.json|--multi-gpu-model: $work/none.json: no such file"; do
    status=0
    bash "$repo/bench/gpu/run.sh" --dry-run --pipeplan "$repo/build/tools/pipeplan" \
      --multi-gpu-model "${bad%%|*}" multi-gpu > "$log" 2>&1 || status=$?
    if [[ $status != 2 || $(wc -l < "$log") != 1 ]] || ! grep -q -F -e "${bad#*|}" "$log"; then
      cat "$log"
      fail "--multi-gpu-model ${bad%%|*} with build/tools/pipeplan should fail in one line with status 2 (got $status)"
    fi
  done
fi
# A profile of another GPU (the shipped H200 ones on an H100) is refused in one line that says
# what to run instead, dry run or not.
for bad in "--sm-profile profiles/h200-llama-7b-blocks8-sm32.calibrated.json|--sm-profile: profiles/h200-llama-7b-blocks8-sm32.calibrated.json was measured on h200, this GPU is h100-sxm: measure one here first: WHAT profile-sm" \
  "--gpu-profile profiles/h200-llama-7b.measured.json|--gpu-profile: profiles/h200-llama-7b.measured.json was measured on h200, this GPU is h100-sxm: measure one here first: WHAT profile" \
  "--bpipe-profile profiles/h200-llama-7b-blocks8-sm16.calibrated.json|--bpipe-profile: .* was measured on h200, this GPU is h100-sxm: leave it out"; do
  for dry_run in --dry-run ''; do
    status=0
    read -r -a arguments <<< "${bad%%|*}"
    (cd "$repo" && FAKE_NAME='NVIDIA H100 80GB HBM3' FAKE_ENTRY=h100-sxm bash bench/gpu/run.sh \
      $dry_run --pipeplan "$work/pipeplan" --out "$work/h100" "${arguments[@]}" pipelines) \
      > "$log" 2>&1 || status=$?
    if [[ $status != 2 || $(wc -l < "$log") != 1 || -e $work/h100 ]] || ! grep -q -e "${bad#*|}" "$log"; then
      cat "$log"
      fail "'${bad%%|*}' on an H100 ${dry_run:-(real run)} should fail in one line with status 2 (got $status)"
    fi
  done
done
status=0
bash "$repo/bench/gpu/run.sh" --dry-run --pipeplan "$work/pipeplan" pipelines fidelity > "$log" 2>&1 || status=$?
if [[ $status != 2 || $(wc -l < "$log") != 1 ]] || ! grep -q "unknown WHAT 'fidelity'" "$log"; then
  cat "$log"
  fail "an unknown WHAT should fail in one line with status 2"
fi
echo "dry_run_test: every WHAT reached"
