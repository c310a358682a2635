# bench/gpu/run.sh's measurements of one GPU as a whole: env, tests, flash, block, profile,
# step, summary (sourced; the variables are run.sh's).
# shellcheck shell=bash
# shellcheck disable=SC2154,SC2317,SC2034  # run.sh's variables; record reads cap_s

what_env() {
  # What the machine is: recorded where it can be, never a reason to stop the run.
  record env.json "$pipeplan" env --json || true
  # shellcheck disable=SC2016  # expanded by the inner bash, from its arguments
  record env.txt bash -c '
    nvidia-smi
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
    echo; uname -m; cat /etc/os-release 2> /dev/null | head -n 2; ldd --version | head -n 1
    echo; nvcc --version 2> /dev/null | tail -n 2
    python3 -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"cudnn\", torch.backends.cudnn.version())" 2> /dev/null
    if [[ -n ${LD_LIBRARY_PATH:-} ]]; then echo; echo "== LD_LIBRARY_PATH"; echo "$LD_LIBRARY_PATH" | tr : "\n"; fi
    if [[ -n $1 ]]; then echo; head -n 12 "$1/BUILD_INFO" 2> /dev/null; fi
    shift
    for f in "$@"; do [[ -e $f ]] || continue; echo; echo "== ldd $f"; ldd "$f"; done
  ' env "$staged" "$pipeplan" "${PIPEPLAN_CUDA_PLUGIN:-$(dirname "$pipeplan")/libpipeplan_cuda.so}" \
    "$tests_binary" "$bench_block" || true
  # MPS (several processes sharing the GPU at once rather than time-sliced): whether its control
  # program is installed and its daemon answers; the line "MPS: ..." says it for summary.py.
  # shellcheck disable=SC2016  # expanded by the inner bash
  record env-mps.txt bash -c '
    control=$(command -v nvidia-cuda-mps-control || true)
    pipe=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}
    echo "nvidia-cuda-mps-control: ${control:-not found}"
    echo "CUDA_MPS_PIPE_DIRECTORY: ${CUDA_MPS_PIPE_DIRECTORY:-not set}"
    if [[ -e $pipe/control ]]; then echo "pipe directory: $pipe (control pipe present)"
    elif [[ -d $pipe ]]; then echo "pipe directory: $pipe (no control pipe)"
    else echo "pipe directory: $pipe (absent)"; fi
    daemon=no
    # The process name, cut to 15 characters as the kernel keeps it (the control daemon and the
    # server alike).
    if pgrep -x nvidia-cuda-mps > /dev/null 2>&1; then daemon=yes; fi
    echo "control daemon running: $daemon"
    mode=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2> /dev/null | head -n 1)
    echo "compute mode: ${mode:-unknown}"
    if [[ -e $pipe/control || $daemon == yes ]]; then
      echo "MPS: running (processes sharing the GPU run at once)"
    elif [[ -n $control ]]; then
      echo "MPS: available, not started (nvidia-cuda-mps-control -d starts it; processes" \
        "sharing the GPU are time-sliced)"
    else
      echo "MPS: not available (no nvidia-cuda-mps-control; processes sharing the GPU are" \
        "time-sliced)"
    fi
  ' || true
}

what_tests() {
  local cap_s=$test_cap_s suites name suite
  if ((dry)); then
    suites="SUITE"
  else
    # Suites, parameterised ones as Prefix/Suite; the listing at most 60 s, and never past the
    # deadline (a binary hung in the driver).
    local listing='' status=0 limit
    limit=$(probe_limit 60)
    listing=$(probe 60 "$tests_binary" --gtest_list_tests 2> /dev/null) || status=$?
    suites=$(grep -E '^[A-Za-z_][A-Za-z0-9_/]*\.$' <<< "$listing" | tr -d '.' | tr '\n' ' ') ||
      suites=''
    if [[ -z $suites ]] && ((limit > 0 && (status == 124 || status == 137))); then
      not_run tests-list.txt \
        "$(portable "$tests_binary") --gtest_list_tests gave no answer within $limit s"
      return 0
    fi
    if [[ -z $suites ]]; then  # the binary does not start (a library missing): record why
      record tests-list.txt "$tests_binary" --gtest_list_tests || true
      return 0
    fi
  fi
  for suite in $suites; do
    name=${suite//\//_}
    record "tests-$name.txt" "$tests_binary" --gtest_filter="$suite.*" \
      --gtest_output="json:$out/tests-$name.json" || true
  done
}

what_flash() {
  local cap_s=$test_cap_s
  record tests-flash.txt "$tests_binary" \
    --gtest_filter='FlashAttention*:CudaBackend.*Flash*:CudaAllocator.BlockStash*' \
    --gtest_output="json:$out/tests-flash.json" || true
}

what_block() {
  local cap_s=150
  record bench_block.json "$bench_block" "${gpu_flag[@]}" --model llama-7b --seq "$seq" \
    --mbs 1,2 --attention flash --warmup 5 --repetitions 20 --breakdown || true
  record bench_block-tuned.json "$bench_block" "${gpu_flag[@]}" --model llama-7b --seq "$seq" \
    --mbs 1,2 --attention flash --warmup 5 --repetitions 20 --gemm-candidates "$gemm_tuned" || true
  record bench_block-recompute.json "$bench_block" "${gpu_flag[@]}" --model llama-7b --seq "$seq" \
    --mbs 1 --attention recompute --warmup 3 --repetitions 10 || true
  # PyTorch with the environment it had (a staged copy's library path is for the binaries), its
  # MFU against the same gpus.json peak as bench_block's (--gpu).
  record torch_block.json env LD_LIBRARY_PATH="$original_ld_library_path" \
    python3 bench/gpu/torch_block.py "${gpu_flag[@]}" --seq "$seq" --mbs 1,2 \
    --sdpa default,cudnn,flash || true
}

whole_gpu_profile=''
what_profile() {
  whole_gpu_profile="$out/$gpu_key-llama-7b.measured.json"
  record profile.txt "$pipeplan" profile --backend cuda "${gpu_flag[@]}" --model llama-7b \
    --seq "$seq" --mbs 1,2,4 --attention flash "${gemm[@]}" -o "$whole_gpu_profile" || true
}

# One stage on the whole GPU: LLaMA-7B (--step-layers blocks of it; default all 32 where the GPU
# has over 100 GiB, else 16) at mbs 1, m = 4, fused (1F1B) and 2bp (ZB-H1) backward, planned from a whole-GPU
# profile with nothing fitted to a run (--gpu-profile; else, for 32 blocks, profile's from this
# invocation; else measured here, at mbs 1, 2 and 4), and run for --step-steps steps: the step
# the run reports (task graph and optimizer; summary.py takes the median of steps 2..N) against
# the planned one, and each device's peak memory against the plan's. Then `pipeplan bpipe` from
# the same profile: BPipe's verdict for that model on --stages GPUs at a global batch of 8 per
# stage, micro-batch sizes 1, 2 and 4 (the optimizer in every step where the profile measured
# it, as `pipeplan profile --backend cuda` does).
# A --gpu-profile is planned with the model it measured, whatever the GPU's memory (run.sh
# refuses --step-layers beside it): where that model does not fit, the step notes say so, name
# the profile's model and what to do; a step with neither backward fitting is a failure.
what_step() {
  local blocks=${step_layers:-32}
  if [[ -z $step_layers ]] && ((!dry && memory_bytes > 0 && memory_bytes < 100 * 1073741824)); then
    blocks=16
  fi
  local profile=$gpu_profile
  if [[ -z $profile && $blocks == 32 ]]; then profile=$whole_gpu_profile; fi
  if [[ -z $profile ]]; then
    local step_model="$out/llama-7b-blocks$blocks.json"
    write_model "$step_model" "$blocks"
    profile="$out/$gpu_key-llama-7b-blocks$blocks.measured.json"
    cap_s=300 record profile-step.txt "$pipeplan" profile --backend cuda "${gpu_flag[@]}" \
      --model "$step_model" --seq "$seq" --mbs 1,2,4 --attention flash "${gemm[@]}" \
      -o "$profile" || return 0
  fi
  local cap_s=300 backward run_steps=$step_steps refused=0
  local -a emulate=() common=(--profile "$profile" --gpu "$plan_gpu" --stages 1 --seq "$seq"
    --mbs 1)
  for backward in fused 2bp; do
    # On one stage 1F1B-2bp defers every p2 to the step's end, holding four micro-batches' p2
    # inputs (LLaMA-7B on an H200: 153.82 GiB planned); ZB-H1 runs each micro-batch's p2 after
    # its p1 (123.18 GiB), the 2bp order that fits one GPU. Where even that does not fit, the plan
    # is refused for memory, which is an answer (noted), not a failed command.
    local schedule=1f1b
    if [[ $backward == 2bp ]]; then schedule=zb-h1; fi
    local -a step=(--schedule "$schedule" --backward "$backward" --microbatches 4)
    local refusal=''
    if ((!dry)) && [[ -s $profile ]]; then
      refusal=$(probe 60 "$pipeplan" plan "${common[@]}" "${step[@]}" 2>&1 > /dev/null) &&
        refusal=''
    fi
    if [[ $refusal == *"above its limit"* ]]; then
      refused=$((refused + 1))
      if [[ -n $gpu_profile ]]; then
        note "step-m4-$backward: not run: the model of --gpu-profile $(portable "$profile")" \
          "($(profile_model "$profile")) does not fit this GPU at mbs 1, m = 4" \
          "(${refusal#pipeplan: error: }); leave --gpu-profile out and step profiles" \
          "$blocks LLaMA-7B blocks here (--step-layers N for another count)" >&2
      else
        note "step-m4-$backward: does not fit on this GPU (${refusal#pipeplan: error: })"
      fi
      continue
    fi
    run_plan "step-m4-$backward" "${step[@]}"
  done
  if ((refused == 2)); then
    note "step: nothing measured: neither backward fits this GPU (see the lines above)" >&2
    failures=$((failures + 1))
  fi
  local pipeline=$((stages > 1 ? stages : 2))  # BPipe pairs two stages
  local -a estimate=("$pipeplan" bpipe --profile "$profile" --gpu "$plan_gpu" --stages "$pipeline"
    --global-batch $((8 * pipeline)) --seq "$seq" --mbs-list "1,2,4")
  cap_s=120 record bpipe-estimate.txt "${estimate[@]}" || true
  cap_s=120 record bpipe-estimate.json "${estimate[@]}" --json || true
}

# profile_model PROFILE: "NAME, N blocks" of the model a profile measured (what it says of it).
profile_model() {
  python3 - "$1" << 'PY' 2> /dev/null || echo "its model"
import json, sys
with open(sys.argv[1], encoding="utf-8") as f:
    model = json.load(f).get("model") or {}
print(f"{model.get('name', 'its model')}, {model.get('layers', '?')} blocks")
PY
}

# The summary is written whatever the deadline left (it reads the output folder, on the CPU, in
# about a second): no deadline for it, 60 s at most.
what_summary() {
  local deadline_s=0 cap_s=60
  record summary.md python3 bench/gpu/summary.py "$out" || true
}
