#!/usr/bin/env bash
# Run ON THE GPU MACHINE after tools/device/build.sh: issue 7's GPU tests and measurement matrix
# on 4 emulated stages of one H100/H200, raw outputs (each with GPU name, UTC date, command) in
# $OUT (default bench/results/issue7). PIPEPLAN_DRY_RUN=1 prints the commands without running
# them (any machine). Usage: tools/device/run_issue7.sh [build-dir]
#
# Knobs (environment): STAGES (4), LAYERS (8 LLaMA-7B-sized blocks: h 4096, 32 heads, ffn
# 11008; the full 32 do not fit 4 emulated stages on 80 GB), SEQ (2048), TOTAL_SMS (132: H100 and
# H200 SXM), STEPS (3 per run; the report is the last one), BPIPE_MBS ("2 4 8": micro-batch
# sizes tried for the BPipe run), STAGE_MEMORY (HBM / STAGES: what one emulated stage may use).
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-device}
out=${OUT:-bench/results/issue7}
dry=${PIPEPLAN_DRY_RUN:-0}
stages=${STAGES:-4}
layers=${LAYERS:-8}
seq=${SEQ:-2048}
total_sms=${TOTAL_SMS:-132}
steps=${STEPS:-3}
bpipe_mbs=${BPIPE_MBS:-"2 4 8"}
bin="$build/tools/pipeplan"
share=$(( total_sms / stages / 8 * 8 ))  # runtime/emulate.h: emulated_sm_share
mkdir -p "$out"

gpu_name() {
  if [[ $dry == 1 ]]; then echo "(dry run)"; return; fi
  nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -n 1 || echo unknown
}
gpu=$(gpu_name)
case "$gpu" in
  *H200*) gpu_key=h200; hbm_gib=141 ;;
  *H100*PCIe*) gpu_key=h100-pcie; hbm_gib=80 ;;
  *) gpu_key=h100-sxm; hbm_gib=80 ;;
esac
stage_memory=${STAGE_MEMORY:-$(( hbm_gib / stages ))GiB}
failures=0

# record NAME CMD...: runs CMD, writes "$out/NAME.txt" = header + stdout/stderr + exit status.
record() {
  local name=$1; shift
  local file="$out/$name.txt"
  {
    echo "# gpu: $gpu"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# command: $*"
  } > "$file"
  if [[ $dry == 1 ]]; then echo "$*"; return 0; fi
  local status=0
  "$@" >> "$file" 2>&1 || status=$?
  echo "# exit status: $status" >> "$file"
  echo "[$status] $name"
  if [[ $status != 0 ]]; then failures=$((failures + 1)); fi
  return "$status"
}

# The model: LLaMA-7B blocks, LAYERS of them (Hugging Face config form, profiles/model.cpp).
model="$out/llama-like-${layers}.json"
cat > "$model" << JSON
{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": $layers,
 "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
 "max_position_embeddings": $seq}
JSON

record env bash -c "nvidia-smi; nvcc --version | tail -n 2; echo SM share per stage: $share"
record gpu-tests "$build/tests/runtime/cuda/pipeplan_cuda_tests"

# Profile inside one stage's green context, so plan and run see the same SM share.
profile="$out/profile-sm${share}.json"
record profile "$bin" profile --backend cuda --model "$model" --seq "$seq" --mbs 1,2,4,8 \
  --attention flash --max-concat 8 --sm-partition "$share" -o "$profile"

common=(--profile "$profile" --gpu "$gpu_key" --stages "$stages" --seq "$seq")
run_plan() {  # run_plan NAME PLAN-ARGS...: plan, run emulated, diff
  local name=$1; shift
  local plan="$out/$name.plan.json"
  record "$name.plan" "$bin" plan "${common[@]}" "$@" -o "$plan" || return 0
  record "$name.run" "$bin" run "$plan" --backend cuda --emulate "$stages" --steps "$steps" \
    --json --trace "$out/$name.trace.json"
  record "$name.run-text" "$bin" run "$plan" --backend cuda --emulate "$stages" --steps "$steps"
  record "$name.diff" "$bin" diff "$plan" "$out/$name.trace.json" --top 15
}

# The matrix: 1F1B-1 (m = P) and 1F1B-2 (m = 2P), fused vs 2bp; GPipe likewise; auto.
for m in "$stages" $((2 * stages)); do
  for schedule in 1f1b gpipe; do
    for backward in fused 2bp; do
      run_plan "$schedule-m$m-$backward" --schedule "$schedule" --backward "$backward" \
        --microbatches "$m"
    done
  done
  run_plan "auto-m$m" --schedule auto --microbatches "$m"
done

# BPipe: the first micro-batch size whose 1F1B plan exceeds one stage's memory without BPipe
# but fits with it, planned and run both ways at the largest size that fits without.
fits_without=1
for mbs in $bpipe_mbs; do
  limit=(--memory "$stage_memory" --microbatches $((2 * stages)) --schedule 1f1b --backward 2bp)
  if [[ $dry == 1 ]]; then
    run_plan "bpipe-mbs$mbs" "${limit[@]}" --mbs "$mbs" --bpipe on
    break
  fi
  if "$bin" plan "${common[@]}" "${limit[@]}" --mbs "$mbs" -o /dev/null > /dev/null 2>&1; then
    fits_without=$mbs
    continue
  fi
  if "$bin" plan "${common[@]}" "${limit[@]}" --mbs "$mbs" --bpipe on -o /dev/null \
    > /dev/null 2>&1; then
    record "bpipe-mbs$mbs-refused-without" "$bin" plan "${common[@]}" "${limit[@]}" --mbs "$mbs"
    run_plan "bpipe-mbs$mbs" "${limit[@]}" --mbs "$mbs" --bpipe on
    run_plan "nobpipe-mbs$fits_without" "${limit[@]}" --mbs "$fits_without"
    break
  fi
done

echo "issue 7 matrix: $failures failed command(s); raw outputs in $out"
exit $(( failures > 0 ? 1 : 0 ))
