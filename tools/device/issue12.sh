#!/usr/bin/env bash
# Issue 12 ON THE GPU MACHINE (the device tool's H100/H200), from binaries built here and carried:
# tools/device/stage_issue12.sh builds them and stages bin/, lib/ and BUILD_INFO into
# build-gpu/carry (git-ignored); name that folder in the device call's `carry`.
#
# Usage: bash tools/device/issue12.sh [-c CARRY] PHASE...      (CARRY default build-gpu/carry)
#
#   env         GPU and driver, where the CUDA, cuBLAS, cuDNN and NCCL libraries are, what every
#               carried binary loads (ldd), whether cuDNN loads for fused attention        ~10 s
#   tests       pipeplan_cuda_tests, one process per suite (a crash loses one suite), gtest JSON
#   flash       the fused-attention tests alone (FlashAttention.*, CudaBackend.*Flash*, the
#               allocator's stash count), for a quick re-check after a fix
#   block       bench_block (pipeplan's LLaMA-7B block F + p1 + p2, flash, mbs 1,2; again with 8
#               cuBLASLt answers timed per GEMM shape; recompute at mbs 1 beside it) and
#               tools/device/torch_block.py (PyTorch's block, same shapes)
#   profile     issue 12's profile: pipeplan profile --backend cuda --model llama-7b --seq 2048
#               --mbs 1,2,4 --attention flash (whole GPU)
#   profile-sm  the profile the emulated pipelines are planned from: the LAYERS-block LLaMA-7B-like
#               model at one emulated stage's SM share (--sm-partition SHARE), mbs 1,2,4
#   pipelines   4 emulated stages on the GPU: 1F1B and GPipe at m = P and 2P, fused and 2bp, and
#               auto; each planned from the SM-share profile, run (--emulate), and diffed
#               (PIPELINE_M, default "P 2P", and PIPELINE_RUNS, default "1f1b-fused 1f1b-2bp
#               gpipe-fused gpipe-2bp auto", pick others)
#   bpipe       8 emulated stages (one block each, 1F1B fused, its own SM-share profile): the first
#               micro-batch size that fits a per-stage limit only with BPipe, run with BPipe
#               beside the largest smaller size that fits without (see phase_bpipe)
#   stalls      where emulated stages wait with their inputs ready: the 8-stage 1F1B run at mbs 1
#               (needs BPIPE_PROFILE) and the 4-stage 1F1B-2bp runs at m = P and 2P (need the
#               SM-share profile), STALL_STEPS (6) steps each, once per CUDA_DEVICE_MAX_CONNECTIONS value
#               of STALL_CONNECTIONS ("default 32": GPU work queues per context; too few and
#               streams share one, so an op can wait behind another stream's wait); `pipeplan
#               diff` splits each stall into the host's part and the GPU's
#   copies      the 8-stage BPipe run (needs BPIPE_PROFILE) and the 4-stage auto run at m = 2P
#               (needs the SM-share profile), once per PIPEPLAN_DEVICE_COPY mode of COPY_MODES
#               ("memcpy priority"): how device-local copies are issued
#   waits       how receivers wait for a copy (docs/runtime.md): the 4-stage 1F1B-2bp run at
#               m = WAIT_M (2P; needs the SM-share profile) once per PIPEPLAN_COPY_WAIT mode of
#               COPY_WAITS ("blocking stream poll"), side by side on one warm GPU
#   gemm        whether timing cuBLASLt's answers per GEMM shape pays in the pipelines: the SM-share
#               profile again with --gemm-candidates GEMM_TUNED (8), the calibrated profile's
#               contention model copied into it, and the 1F1B-2bp runs at m = P and 2P planned
#               from each profile (needs PIPELINE_PROFILE, the heuristic's GEMMs) and run with
#               the GEMMs it describes: gemm1-* beside gemm8-*
#   summary     tools/device/issue12_summary.py over this call's raw outputs (Markdown tables)
#
# Each device call may run 10 minutes, so pick phases that fit. Three calls (estimates, not
# measurements: the index of each call gives the wall times; split further if they are long):
#   call 1: env tests block profile    call 2: env profile-sm pipelines summary
#   call 3: env bpipe summary (bpipe profiles its own 8-stage SM share)
# Every command stops after its cap (150 s for a test suite or a block benchmark, 120 s for a
# pipeline run, 300 s otherwise) so one hang does not eat the call.
# `pipelines` needs the SM-share profile: from `profile-sm` earlier in the same call,
# else the file PIPELINE_PROFILE names (e.g. one a previous call returned, copied into the tree).
#
# Every command's raw output goes to a file headed by the GPU (nvidia-smi), the UTC date, the
# exact command and the environment it ran with, and ended by its exit status and wall time.
# The device tool returns at most 8 files from $OUT, so the raw files are packed into
# $OUT/issue12-<phases>.tar.gz, next to index.txt (every command, status, seconds), summary.md
# (after `summary`), the profiles written, bench_block.json and torch_block.json.
#
# Environment: OUT (default bench/results/issue12-<UTC time>), DEADLINE_S (540: commands stop and
# the rest are skipped, so packing finishes inside the device tool's 600 s), LAYERS (8 LLaMA-7B
# blocks for the emulated pipelines: all 32 do not fit 4 stages on one 80 GB GPU), STAGES (4),
# SEQ (2048), STEPS (3 per run; the report is the last step and the median of steps 2..N), BPIPE_MBS ("2 4"), BPIPE_STAGES (8),
# BPIPE_LAYERS (8), BPIPE_PROFILE (skips bpipe's own profile), PIPELINE_PROFILE, WAIT_M and
# COPY_WAITS (phase waits), TEST_CAP_S (150
# s per test suite), GEMM_CANDIDATES (1: cuBLASLt's first answer; N > 1 adds --gemm-candidates N
# to every `pipeplan profile` and `pipeplan run`, so plans come from profiles of the same GEMMs),
# PIPEPLAN_DRY_RUN=1 (print the commands, run none: any machine).
# shellcheck disable=SC2317  # the phases (and what they call) run indirectly: "phase_$name"
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
repo=$PWD
start_s=$SECONDS

carry=build-gpu/carry
if [[ ${1:-} == -c ]]; then
  carry=$2
  shift 2
fi
phases=("$@")
if ((${#phases[@]} == 0)); then
  sed -n '2,/^# shellcheck/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
fi
for phase in "${phases[@]}"; do
  case $phase in
    env | tests | flash | block | profile | profile-sm | pipelines | bpipe | stalls | copies | waits | gemm | summary) ;;
    *) echo "issue12.sh: unknown phase '$phase'" >&2; exit 2 ;;
  esac
done
# The pipelines' picks, checked before anything runs.
for run in ${PIPELINE_RUNS:-}; do
  case $run in
    1f1b-fused | 1f1b-2bp | gpipe-fused | gpipe-2bp | auto) ;;
    *) echo "issue12.sh: PIPELINE_RUNS: unknown run '$run' (1f1b-fused 1f1b-2bp gpipe-fused" \
      "gpipe-2bp auto)" >&2; exit 2 ;;
  esac
done
for variable in PIPELINE_M WAIT_M; do
  for m in ${!variable:-}; do
    [[ $m =~ ^[1-9][0-9]*$ ]] || {
      echo "issue12.sh: $variable: '$m' is not a micro-batch count (a positive integer)" >&2
      exit 2
    }
  done
done
for wait in ${COPY_WAITS:-}; do
  case $wait in
    blocking | poll | stream) ;;
    *) echo "issue12.sh: COPY_WAITS: unknown wait '$wait' (blocking poll stream)" >&2; exit 2 ;;
  esac
done

dry=${PIPEPLAN_DRY_RUN:-0}
deadline_s=${DEADLINE_S:-540}
layers=${LAYERS:-8}
stages=${STAGES:-4}
seq=${SEQ:-2048}
steps=${STEPS:-3}
bpipe_mbs=${BPIPE_MBS:-"2 4"}
gemm=()  # the GEMM algorithm choice, the same for every profile and run
if [[ ${GEMM_CANDIDATES:-1} != 1 ]]; then gemm=(--gemm-candidates "$GEMM_CANDIDATES"); fi
out=${OUT:-bench/results/issue12-$(date -u +%Y%m%dT%H%M%SZ)}
if [[ $dry != 1 ]]; then  # a dry run writes nothing in the tree
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
fi
tag=$(IFS=-; echo "${phases[*]}")
raw=$(mktemp -d "${TMPDIR:-/tmp}/issue12-$tag.XXXXXX")
index="$raw/index.txt"
failures=0
if [[ -d $carry ]]; then
  carry=$(cd "$carry" && pwd)
elif [[ $dry == 1 ]]; then
  carry="$repo/$carry"
else
  echo "issue12.sh: no carried folder '$carry' (tools/device/stage_issue12.sh makes it)" >&2
  exit 2
fi
bin="$carry/bin"
pipeplan="$bin/pipeplan"

# --- the machine --------------------------------------------------------------------------------

gpu="(dry run)"
if [[ $dry != 1 ]]; then
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    2> /dev/null | head -n 1)
  gpu=${gpu:-"no GPU (nvidia-smi found none)"}
fi
case "$gpu" in
  *H200*) gpu_key=h200; hbm_gib=141 ;;
  *H100*PCIe*) gpu_key=h100-pcie; hbm_gib=80 ;;
  *) gpu_key=h100-sxm; hbm_gib=80 ;;
esac
total_sms=${TOTAL_SMS:-132}  # H100 SXM and H200; the env phase prints what the GPU reports
share=$((total_sms / stages / 8 * 8))  # runtime/emulate.h: emulated_sm_share

# The libraries the binaries load, found where the image keeps them: the CUDA toolkit, then
# python3's site-packages (PyTorch's nvidia-* wheels: cuDNN and NCCL live only there). The
# binaries run with LD_LIBRARY_PATH at those folders; python3 keeps the environment it had.
original_ld_library_path=${LD_LIBRARY_PATH:-}
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2> /dev/null || true)
roots=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib)
if [[ -n $site && -d $site/nvidia ]]; then roots+=("$site/nvidia"); fi
# Where torch sits in a user site or another venv: the nvidia namespace package itself.
nvidia=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2> /dev/null || true)
if [[ -n $nvidia && -d $nvidia && $nvidia != "$site/nvidia" ]]; then roots+=("$nvidia"); fi
lib_dirs=()
declare -A found_lib=()
# libnvrtc: cuDNN compiles some fused-attention engines at run time (not linked; found if there).
for lib in libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libnccl.so.2 libcudnn.so.9 \
  libnvrtc.so.13; do
  for root in "${roots[@]}"; do
    [[ -d $root ]] || continue
    path=$(find -L "$root" -name "$lib" 2> /dev/null | head -n 1)
    if [[ -n $path ]]; then
      found_lib[$lib]=$path
      dir=$(dirname "$path")
      [[ " ${lib_dirs[*]} " == *" $dir "* ]] || lib_dirs+=("$dir")
      break
    fi
  done
done
ld_path=$(IFS=:; echo "${lib_dirs[*]}")
# The staged libstdc++ (GCC 12) only where the image's is older than the binaries need.
if [[ $dry != 1 && -x $pipeplan ]] && ldd "$pipeplan" 2>&1 | grep -q "GLIBCXX.*not found"; then
  ld_path="$carry/lib${ld_path:+:$ld_path}"
fi
export LD_LIBRARY_PATH="$ld_path${original_ld_library_path:+:$original_ld_library_path}"
export PIPEPLAN_DATA_DIR="$repo/profiles"          # gpus.json
export PIPEPLAN_CUDA_PLUGIN="$bin/libpipeplan_cuda.so"
export PIPEPLAN_TEST_BINARY="$pipeplan"            # tests that run the CLI (tests/cli_support.h)
export PIPEPLAN_TEST_CUDA_MODULE="$bin/libpipeplan_cuda.so"
if [[ -n ${found_lib[libcudnn.so.9]:-} ]]; then
  export PIPEPLAN_CUDNN_LIBRARY="${found_lib[libcudnn.so.9]}"
fi
export CUDNN_FRONTEND_CUDART_LIB_NAME=libcudart.so.13
environment="LD_LIBRARY_PATH=$LD_LIBRARY_PATH PIPEPLAN_DATA_DIR=$PIPEPLAN_DATA_DIR"
environment+=" PIPEPLAN_CUDA_PLUGIN=$PIPEPLAN_CUDA_PLUGIN"
environment+=" PIPEPLAN_CUDNN_LIBRARY=${PIPEPLAN_CUDNN_LIBRARY:-} PIPEPLAN_TEST_BINARY=$pipeplan"
# The runtime's switches where the call sets them (the run report also names what it used).
for switch in PIPEPLAN_COPY_WAIT PIPEPLAN_DEVICE_COPY CUDA_DEVICE_MAX_CONNECTIONS; do
  if [[ -n ${!switch:-} ]]; then environment+=" $switch=${!switch}"; fi
done

# --- recording ----------------------------------------------------------------------------------

# GPU clocks and power while the emulated runs and the SM-share profile run (record with
# clocks_to=NAME): nvidia-smi every CLOCK_SAMPLE_MS (20) ms into NAME.clocks.csv, so that a
# slowdown the contention model cannot explain can be told from the SM clock falling under
# sustained load (docs/runtime.md, "Fidelity"). The first query set the driver answers (older
# drivers name the throttle reasons, or lack the instantaneous power); none where it answers none.
clock_fields='' clock_probed=0
base_fields=timestamp,utilization.gpu,clocks.sm
clock_command=()
# probe_clocks: the field set and the sampler's command, found at the first command sampled
# (calls that sample nothing query nvidia-smi for nothing).
probe_clocks() {
  ((clock_probed)) && return 0
  clock_probed=1
  if [[ $dry == 1 ]]; then
    clock_fields=$base_fields,clocks.mem,power.draw.instant,temperature.gpu
    clock_fields+=,clocks_event_reasons.active
  else
    local fields
    for fields in \
      $base_fields,clocks.mem,power.draw.instant,temperature.gpu,clocks_event_reasons.active \
      $base_fields,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
      $base_fields,power.draw; do
      if nvidia-smi --query-gpu="$fields" --format=csv,noheader > /dev/null 2>&1; then
        clock_fields=$fields
        break
      fi
    done
    if [[ -z $clock_fields ]]; then
      echo "issue12.sh: nvidia-smi answers none of the clock field sets: no clock samples" >&2
    fi
  fi
  clock_command=(nvidia-smi --query-gpu="$clock_fields" "--format=csv,nounits"
    -lms "${CLOCK_SAMPLE_MS:-20}")
}

# record FILE CMD...: runs CMD for at most cap_s seconds (a phase may set its own: bash scoping
# is dynamic) and never past the deadline, output (stdout and stderr) in $raw/FILE between a
# header and its exit status; one line per command in the index.
cap_s=300
record() {
  local name=$1
  shift
  local file="$raw/$name"
  local left=$((deadline_s - (SECONDS - start_s) - 20))
  if ((left > cap_s)); then left=$cap_s; fi
  {
    echo "# gpu: $gpu"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# command: $(printf '%q ' "$@")"
    echo "# environment: $environment"
  } > "$file"
  if [[ -n ${clocks_to:-} ]]; then probe_clocks; fi
  if [[ $dry == 1 ]]; then
    printf '%q ' "$@"
    if [[ -n ${clocks_to:-} ]]; then
      printf '(beside it: %s> %q)' "$(printf '%q ' "${clock_command[@]}")" \
        "$raw/$clocks_to.clocks.csv"
    fi
    echo
    return 0
  fi
  if ((left < 10)); then
    echo "# skipped: the call's deadline ($deadline_s s) is near" >> "$file"
    printf '%-44s skipped (deadline)\n' "$name" >> "$index"
    echo "[skipped] $name"
    failures=$((failures + 1))
    return 124
  fi
  local began=$SECONDS status=0 sampler=''
  if [[ -n ${clocks_to:-} && -n $clock_fields ]]; then
    "${clock_command[@]}" > "$raw/$clocks_to.clocks.csv" 2>&1 &
    sampler=$!
  fi
  timeout --kill-after=5 "$left" "$@" >> "$file" 2>&1 || status=$?
  if [[ -n $sampler ]]; then
    kill "$sampler" 2> /dev/null || true
    wait "$sampler" 2> /dev/null || true
  fi
  local took=$((SECONDS - began))
  echo "# exit status: $status$( ((status == 124)) && echo ' (timed out)'), wall $took s" >> "$file"
  printf '%-44s exit %-3s %4s s\n' "$name" "$status" "$took" >> "$index"
  echo "[$status] $name (${took} s)"
  if ((status != 0)); then failures=$((failures + 1)); fi
  return "$status"
}

# The LLaMA-7B-like model the emulated pipelines train: LAYERS blocks of LLaMA-7B (h 4096, 32
# heads, ffn 11008, vocab 32000), Hugging Face config form (profiles/model.cpp).
write_model() {  # write_model FILE LAYERS
  cat > "$1" << JSON
{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": $2,
 "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
 "max_position_embeddings": $seq}
JSON
}
model="$raw/llama-7b-blocks$layers.json"
write_model "$model" "$layers"
profile_sm=${PIPELINE_PROFILE:-}

# --- phases -------------------------------------------------------------------------------------

phase_env() {
  # shellcheck disable=SC2016  # expanded by the inner bash, from its arguments
  record env.txt bash -c '
    nvidia-smi
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
    echo; uname -a; cat /etc/os-release 2> /dev/null | head -n 2; ldd --version | head -n 1
    echo; nvcc --version 2> /dev/null | tail -n 2
    python3 -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"cudnn\", torch.backends.cudnn.version(), torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).multi_processor_count, \"SMs\")"
    echo; echo "== libraries found (LD_LIBRARY_PATH for the binaries)"; echo "$LD_LIBRARY_PATH" | tr : "\n"
    echo; cat "$1/BUILD_INFO" 2> /dev/null | head -n 12
    for f in "$1"/bin/*; do echo; echo "== ldd $f"; ldd "$f"; done
    echo; echo "SM share per emulated stage: $2 of $3 (STAGES=$4; TOTAL_SMS must match the SMs above)"
  ' env "$carry" "$share" "$total_sms" "$stages"
}

phase_tests() {
  local cap_s=${TEST_CAP_S:-150} suites
  if [[ $dry == 1 ]]; then
    suites="ALL"
  else
    # Suites, parameterised ones as Prefix/Suite.
    suites=$("$bin/pipeplan_cuda_tests" --gtest_list_tests 2> /dev/null |
      grep -E '^[A-Za-z_][A-Za-z0-9_/]*\.$' | tr -d '.' | tr '\n' ' ')
    if [[ -z $suites ]]; then  # the binary does not start (a library missing): record why
      record tests-list.txt "$bin/pipeplan_cuda_tests" --gtest_list_tests
      return
    fi
  fi
  local name
  for suite in $suites; do
    name=${suite//\//_}
    record "tests-$name.txt" "$bin/pipeplan_cuda_tests" --gtest_filter="$suite.*" \
      --gtest_output="json:$raw/tests-$name.json"
  done
}

phase_flash() {
  local cap_s=150
  record tests-flash.txt "$bin/pipeplan_cuda_tests" \
    --gtest_filter='FlashAttention*:CudaBackend.*Flash*:CudaAllocator.BlockStash*' \
    --gtest_output="json:$raw/tests-flash.json"
}

phase_block() {
  local cap_s=150
  record bench_block.json "$bin/bench_block" --model llama-7b --seq "$seq" --mbs 1,2 \
    --attention flash --warmup 5 --repetitions 20 --breakdown
  record bench_block-tuned.json "$bin/bench_block" --model llama-7b --seq "$seq" --mbs 1,2 \
    --attention flash --warmup 5 --repetitions 20 --gemm-candidates 8
  record bench_block-recompute.json "$bin/bench_block" --model llama-7b --seq "$seq" --mbs 1 \
    --attention recompute --warmup 3 --repetitions 10
  record torch_block.json env LD_LIBRARY_PATH="$original_ld_library_path" \
    python3 tools/device/torch_block.py --seq "$seq" --mbs 1,2 --sdpa default,cudnn,flash
}

phase_profile() {
  record profile.txt "$pipeplan" profile --backend cuda --model llama-7b --seq "$seq" \
    --mbs 1,2,4 --attention flash "${gemm[@]}" -o "$raw/$gpu_key-llama-7b.measured.json"
}

phase_profile_sm() {
  profile_sm="$raw/$gpu_key-llama-7b-blocks$layers-sm$share.measured.json"
  clocks_to=profile-sm record profile-sm.txt "$pipeplan" profile --backend cuda --model "$model" \
    --seq "$seq" --mbs 1,2,4 --attention flash --max-concat 8 --sm-partition "$share" "${gemm[@]}" \
    -o "$profile_sm"
}

common=()
run_env=()  # a prefix for `pipeplan run` (phase_stalls: env CUDA_DEVICE_MAX_CONNECTIONS=N)
set_common() {
  common=(--profile "$profile_sm" --gpu "$gpu_key" --stages "$stages" --seq "$seq")
}

# run_plan NAME PLAN-ARGS...: plan, run emulated (JSON report and trace), diff.
run_plan() {
  local name=$1
  shift
  local plan="$raw/$name.plan.json"
  record "$name.plan.txt" "$pipeplan" plan "${common[@]}" "$@" -o "$plan" || return 0
  clocks_to=$name record "$name.run.json" "${run_env[@]}" "$pipeplan" run "$plan" --backend cuda \
    --emulate "${emulate_stages:-$stages}" --steps "$steps" "${gemm[@]}" --json \
    --trace "$raw/$name.trace.json" || return 0
  record "$name.diff.txt" "$pipeplan" diff "$plan" "$raw/$name.trace.json" --top 15
}

need_profile() {
  if [[ -z $profile_sm || ( $dry != 1 && ! -s $profile_sm ) ]]; then
    echo "issue12.sh: $1 needs the SM-share profile: run profile-sm first in this call, or set" \
      "PIPELINE_PROFILE" | tee -a "$index" >&2
    failures=$((failures + 1))
    return 1
  fi
  set_common
}

phase_pipelines() {
  need_profile pipelines || return 0
  local cap_s=120 m run
  # PIPELINE_M and PIPELINE_RUNS pick runs (e.g. ones no fit has seen, predicted before they run).
  local -a ms runs
  read -r -a ms <<< "${PIPELINE_M:-$stages $((2 * stages))}"
  read -r -a runs <<< "${PIPELINE_RUNS:-1f1b-fused 1f1b-2bp gpipe-fused gpipe-2bp auto}"
  for m in "${ms[@]}"; do
    for run in "${runs[@]}"; do
      if [[ $run == auto ]]; then  # the names were checked at the start
        run_plan "auto-m$m" --schedule auto --backward 2bp --microbatches "$m"
      else
        run_plan "${run%-*}-m$m-${run#*-}" --schedule "${run%-*}" --backward "${run#*-}" \
          --microbatches "$m"
      fi
    done
  done
}

# The BPipe run. At 4 emulated stages BPipe cannot lower a 1F1B pair's peak in pipeplan's memory
# model: the acceptor, holding the LM head, is nearly as full as the evictor, and the evicted
# stash still in flight while the next forward allocates costs a whole stash (docs/bpipe.md; an
# analytic LLaMA-7B-blocks profile shows no gain at 4 stages for any mbs, fused or 2bp). At
# BPIPE_STAGES (8) stages of one block each (BPIPE_LAYERS 8), 1F1B fused, m = 2P, it can (the
# analytic profile: mbs 2 peaks at 9.61 GiB without, 8.65 GiB with). So: profile that SM share
# (BPIPE_PROFILE skips it), and for each mbs of BPIPE_MBS take each stage's planned peak without
# and with BPipe; the first mbs whose BPipe peak is at least 3 % lower and whose stages' peaks
# together fit 85 % of the GPU's HBM gets a memory limit per stage halfway between the two
# (--reserve 0), which the plan without BPipe exceeds and the one with it meets. Run that, and
# the largest smaller mbs that fits without BPipe under the same limit.
peaks() {  # peaks PLAN-ARGS...: "<max over devices> <sum over devices>" of the planned peaks, bytes
  "$pipeplan" plan "$@" --json 2> /dev/null | python3 -c '
import json, sys
p = json.load(sys.stdin)["peak_memory_bytes"]
print(max(p), sum(p))'
}

phase_bpipe() {
  local bpipe_stages=${BPIPE_STAGES:-8} bpipe_layers=${BPIPE_LAYERS:-8} cap_s=120
  local bpipe_share=$((total_sms / bpipe_stages / 8 * 8))
  local bpipe_model="$raw/llama-7b-blocks$bpipe_layers.json"
  write_model "$bpipe_model" "$bpipe_layers"
  local bpipe_profile=${BPIPE_PROFILE:-$raw/$gpu_key-llama-7b-blocks$bpipe_layers-sm$bpipe_share.measured.json}
  if [[ -z ${BPIPE_PROFILE:-} ]]; then
    cap_s=300 record profile-bpipe.txt "$pipeplan" profile --backend cuda --model "$bpipe_model" \
      --seq "$seq" --mbs 1,2,4 --attention flash --max-concat 8 --sm-partition "$bpipe_share" \
      "${gemm[@]}" -o "$bpipe_profile" || return 0
  fi
  # run_plan reads these (bash scoping is dynamic).
  local emulate_stages=$bpipe_stages
  local -a common=(--profile "$bpipe_profile" --gpu "$gpu_key" --stages "$bpipe_stages"
    --seq "$seq" --microbatches $((2 * bpipe_stages)) --schedule 1f1b --backward fused)
  if [[ $dry == 1 ]]; then
    run_plan "bpipe-mbs2" --mbs 2 --bpipe on --memory 9.1GiB --reserve 0
    run_plan "nobpipe-mbs1" --mbs 1 --memory 9.1GiB --reserve 0
    return 0
  fi
  local usable=$((hbm_gib * 1024 * 1024 * 1024 / 100 * 85))
  local mbs smaller off on off_max on_max on_sum limit
  for mbs in $bpipe_mbs; do
    off=$(peaks "${common[@]}" --mbs "$mbs") || off=""
    on=$(peaks "${common[@]}" --mbs "$mbs" --bpipe on) || on=""
    echo "bpipe: mbs $mbs, planned peak per stage (max, sum) without BPipe: ${off:-none}," \
      "with: ${on:-none}" | tee -a "$index"
    if [[ -z $off || -z $on ]]; then continue; fi
    read -r off_max _ <<< "$off"
    read -r on_max on_sum <<< "$on"
    if ((on_max * 100 > off_max * 97 || on_sum > usable)); then continue; fi
    limit=$(python3 -c "print(f'{($off_max + $on_max) / 2 / 2**30:.3f}GiB')")
    echo "bpipe: mbs $mbs, limit $limit per stage: fits only with BPipe" | tee -a "$index"
    record "bpipe-mbs$mbs-without.plan.txt" "$pipeplan" plan "${common[@]}" --mbs "$mbs" \
      --memory "$limit" --reserve 0
    run_plan "bpipe-mbs$mbs" --mbs "$mbs" --bpipe on --memory "$limit" --reserve 0
    # The largest smaller size that fits without BPipe (the profile has mbs 1, 2, 4).
    for ((smaller = mbs - 1; smaller >= 1; --smaller)); do
      if "$pipeplan" plan "${common[@]}" --mbs "$smaller" --memory "$limit" --reserve 0 \
        -o /dev/null > /dev/null 2>&1; then
        run_plan "nobpipe-mbs$smaller" --mbs "$smaller" --memory "$limit" --reserve 0
        break
      fi
    done
    return 0
  done
  echo "bpipe: no mbs in '$bpipe_mbs' fits only with BPipe at $bpipe_stages stages" \
    | tee -a "$index"
}

# The stalls measured at 8 stages (docs/runtime.md, "Fidelity"): each run once per value of
# CUDA_DEVICE_MAX_CONNECTIONS, with host times in the trace (pipeplan diff: "host queued late").
phase_stalls() {
  local cap_s=150 conn m steps=${STALL_STEPS:-6}
  local bpipe_stages=${BPIPE_STAGES:-8}
  for conn in ${STALL_CONNECTIONS:-default 32}; do
    local -a run_env=()
    [[ $conn == default ]] || run_env=(env "CUDA_DEVICE_MAX_CONNECTIONS=$conn")
    if [[ -n ${BPIPE_PROFILE:-} ]]; then
      local emulate_stages=$bpipe_stages
      local -a common=(--profile "$BPIPE_PROFILE" --gpu "$gpu_key" --stages "$bpipe_stages"
        --seq "$seq" --microbatches $((2 * bpipe_stages)) --schedule 1f1b --backward fused)
      run_plan "stalls-c$conn-8st-mbs1" --mbs 1
      unset emulate_stages
    else
      echo "issue12.sh: stalls: no BPIPE_PROFILE, no 8-stage run" | tee -a "$index" >&2
    fi
    if need_profile stalls; then
      for m in "$stages" $((2 * stages)); do
        run_plan "stalls-c$conn-1f1b-m$m-2bp" --schedule 1f1b --backward 2bp --microbatches "$m"
      done
    fi
  done
}

# How device-local copies are issued (docs/runtime.md, "Fidelity"): the 8-stage BPipe run (its
# evictions) and the 4-stage auto run at m = 8 (interleaved: twice the hops), once per
# PIPEPLAN_DEVICE_COPY mode in COPY_MODES ("memcpy priority"). The BPipe limit is COPIES_LIMIT
# (9.107GiB: what the bpipe phase chose at mbs 2 from the 16-SM profiles so far).
phase_copies() {
  local cap_s=120 mode
  local bpipe_stages=${BPIPE_STAGES:-8}
  for mode in ${COPY_MODES:-memcpy priority}; do
    local -a run_env=(env "PIPEPLAN_DEVICE_COPY=$mode")
    if [[ -n ${BPIPE_PROFILE:-} ]]; then
      local emulate_stages=$bpipe_stages
      local -a common=(--profile "$BPIPE_PROFILE" --gpu "$gpu_key" --stages "$bpipe_stages"
        --seq "$seq" --microbatches $((2 * bpipe_stages)) --schedule 1f1b --backward fused)
      run_plan "copies-$mode-bpipe-mbs2" --mbs 2 --bpipe on --memory "${COPIES_LIMIT:-9.107GiB}" \
        --reserve 0
      unset emulate_stages
    else
      echo "issue12.sh: copies: no BPIPE_PROFILE, no 8-stage run" | tee -a "$index" >&2
    fi
    if need_profile copies; then
      run_plan "copies-$mode-auto-m$((2 * stages))" --schedule auto --backward 2bp \
        --microbatches $((2 * stages))
    fi
  done
}

# How the receiving side waits for a device-local copy (runtime/cuda/device_local_transport.h):
# a thread asleep on a blocking-sync event (the default), polling it, or none (the readers' streams
# wait for the copy on the GPU). One plan, run once per mode of COPY_WAITS, so the stalls and their
# host parts (pipeplan diff) compare on one warm GPU.
phase_waits() {
  need_profile waits || return 0
  local cap_s=120 mode m=${WAIT_M:-$((2 * stages))}
  for mode in ${COPY_WAITS:-blocking stream poll}; do
    local -a run_env=(env "PIPEPLAN_COPY_WAIT=$mode")
    run_plan "waits-$mode-1f1b-m$m-2bp" --schedule 1f1b --backward 2bp --microbatches "$m"
  done
}

# Timed GEMM answers in the pipelines (matmul.h, set_gemm_candidates): bench_block shows what they
# do to one block on the whole GPU; this shows what they do to the emulated stages (32 SMs each,
# where the heuristic's first answer may be another) and whether the plan still predicts them. The
# contention model fitted to the heuristic's GEMMs is copied into the new profile (the stages
# share HBM and L2 alike whichever tiles run), so the two predictions differ only in the ops' times.
phase_gemm() {
  if [[ -z ${PIPELINE_PROFILE:-} ]]; then
    echo "issue12.sh: gemm: needs PIPELINE_PROFILE (the calibrated SM-share profile)" \
      | tee -a "$index" >&2
    failures=$((failures + 1))
    return 0
  fi
  local tuned=${GEMM_TUNED:-8} m
  local measured="$raw/$gpu_key-llama-7b-blocks$layers-sm$share-gemm$tuned.measured.json"
  local calibrated="$raw/$gpu_key-llama-7b-blocks$layers-sm$share-gemm$tuned.calibrated.json"
  cap_s=300 record "gemm$tuned-profile-sm.txt" "$pipeplan" profile --backend cuda \
    --model "$model" --seq "$seq" --mbs 1,2,4 --attention flash --max-concat 8 \
    --sm-partition "$share" --gemm-candidates "$tuned" -o "$measured" || return 0
  record "gemm$tuned-contention.txt" python3 tools/calibrate/fit_contention.py copy \
    --from "$PIPELINE_PROFILE" -o "$calibrated" "$measured" || return 0
  local cap_s=120
  for m in "$stages" $((2 * stages)); do
    local -a gemm=() common=(--profile "$PIPELINE_PROFILE" --gpu "$gpu_key" --stages "$stages"
      --seq "$seq")
    run_plan "gemm1-1f1b-m$m-2bp" --schedule 1f1b --backward 2bp --microbatches "$m"
    gemm=(--gemm-candidates "$tuned")
    common=(--profile "$calibrated" --gpu "$gpu_key" --stages "$stages" --seq "$seq")
    run_plan "gemm$tuned-1f1b-m$m-2bp" --schedule 1f1b --backward 2bp --microbatches "$m"
  done
}

phase_summary() {
  record summary.md python3 tools/device/issue12_summary.py "$raw"
}

# --- run ----------------------------------------------------------------------------------------

echo "# issue12.sh ${phases[*]} on $gpu, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit" \
  "$(git rev-parse --short HEAD 2> /dev/null || echo '?'), carry $carry" > "$index"
for phase in "${phases[@]}"; do
  "phase_${phase//-/_}"
done

pack() {
  [[ $dry == 1 ]] && { echo "(dry run: raw files in $raw)"; return; }
  tar -C "$(dirname "$raw")" -czf "$out/issue12-$tag.tar.gz" "$(basename "$raw")"
  cp "$index" "$out/index.txt"
  local file
  for file in "$raw"/summary.md "$raw"/*.measured.json "$raw"/bench_block.json \
    "$raw"/torch_block.json; do
    [[ -f $file ]] && cp "$file" "$out/"
  done
  echo "issue12.sh: $failures failed or skipped command(s); $out:"
  ls -l "$out"
}
pack
exit $((failures > 0 ? 1 : 0))
