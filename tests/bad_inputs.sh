#!/usr/bin/env bash
# Replays known bad inputs against a pipeplan binary and checks
# each one ends cleanly: exactly one line of output (stdout and stderr together), a non-zero
# exit, no file written, within the time limit, and never "internal error".
# Usage: bash tests/bad_inputs.sh PIPEPLAN [SECONDS]   (ctest runs it as BadInputs.Replay)
set -uo pipefail

pipeplan=$(realpath "${1:?usage: bad_inputs.sh PIPEPLAN [SECONDS]}")
limit=${2:-5}
fixtures=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/schedules/fixtures/torch
work=$(mktemp -d "${TMPDIR:-/tmp}/pipeplan_bad_inputs.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Inputs, made by this pipeplan and then broken.
inputs=$work/inputs
mkdir -p "$inputs/cfg"
(
  cd "$inputs" || exit 1
  "$pipeplan" plan --model tiny --stages 2 -m 2 -o plan.json >/dev/null &&
    "$pipeplan" profile --analytic --model tiny --gpu h100 -o profile.json >/dev/null
) || { echo "bad_inputs: could not make the inputs"; exit 1; }
cd "$inputs" || exit 1
sed 's/"layers": 4,/"layers": 1000000000,/' profile.json >profile_1e9_layers.json
sed 's/"gpu": "h100-sxm",$/"gpu": "h999",/' profile.json >profile_unknown_gpu.json
sed -E '0,/"forward_us": [0-9.e+-]+/s//"forward_us": 1e300/' profile.json >profile_absurd_time.json
sed -E '0,/"stash_bytes": [0-9]+/s//"stash_bytes": 9000000000000000000/' profile.json \
  >profile_absurd_stash.json
sed -E '0,/"forward_us": [0-9.e+-]+/s//"forward_us": 1e999/' profile.json >profile_1e999.json
head -c 200 profile.json >profile_malformed.json
sed -E '0,/"duration_us": [0-9.e+-]+/s//"duration_us": 1e999/' plan.json >plan_1e999.json
cat >cfg/config.json <<'EOF'
{"model_type": "llama", "num_hidden_layers": 1000000000, "hidden_size": 64,
 "num_attention_heads": 4, "intermediate_size": 172, "vocab_size": 256,
 "max_position_embeddings": 32}
EOF
cp "$fixtures/deadlock.csv" deadlock.csv
for f in profile_1e9_layers profile_unknown_gpu profile_absurd_time profile_absurd_stash \
  profile_1e999 plan_1e999; do
  cmp -s "$f.json" profile.json && { echo "bad_inputs: $f.json is not broken"; exit 1; }
done

failures=0
cases=0
# check NAME ARGS...: runs pipeplan ARGS in a copy of the inputs; {out} is a file that must not
# appear.
check() {
  local name=$1
  shift
  cases=$((cases + 1))
  local dir=$work/case$cases
  cp -r "$inputs" "$dir"
  local args=()
  for a in "$@"; do args+=("${a//\{out\}/$dir/out.file}"); done
  local before after start end status output lines
  before=$(cd "$dir" && find . | sort)
  start=$(date +%s.%N)
  output=$(cd "$dir" && timeout "$limit" "$pipeplan" "${args[@]}" 2>&1)
  status=$?
  end=$(date +%s.%N)
  after=$(cd "$dir" && find . | sort)
  lines=$(printf '%s\n' "$output" | wc -l)
  local why=""
  if [ "$status" -eq 124 ]; then
    why="no answer within ${limit} s"
  elif [ "$status" -eq 0 ]; then
    why="exit 0"
  elif [ -z "$output" ] || [ "$lines" -ne 1 ]; then
    why="$lines lines of output"
  elif [[ $output == *"internal error"* ]]; then
    why="internal error"
  elif [ "$before" != "$after" ]; then
    why="wrote $(comm -13 <(echo "$before") <(echo "$after") | tr '\n' ' ')"
  fi
  local seconds
  seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')
  if [ -n "$why" ]; then
    failures=$((failures + 1))
    printf 'FAIL %-44s %s (%.2f s): %s\n' "$name" "$why" "$seconds" "${output:0:300}"
  else
    printf 'ok   %-44s %.2f s  %s\n' "$name" "$seconds" "${output:0:140}"
  fi
  rm -rf "$dir"
}

# Hangs with no message.
check "plan -m 1e9" plan --model tiny --stages 2 -m 1000000000 -o '{out}'
check "plan: profile with 1e9 layers" plan --profile profile_1e9_layers.json --stages 2 -m 2 -o '{out}'
check "compare: profile with 1e9 layers" compare --profile profile_1e9_layers.json --stages 2 -m 2
check "bpipe: profile with 1e9 layers" bpipe --profile profile_1e9_layers.json --stages 2 --global-batch 8
check "plan: HF config with 1e9 layers" plan --model cfg/config.json --stages 2 -m 2 -o '{out}'
check "compare: HF config with 1e9 layers" compare --model cfg/config.json --stages 2 -m 2
check "bpipe: HF config with 1e9 layers" bpipe --model cfg/config.json --stages 2 --global-batch 8
check "bpipe --global-batch 2147483647" bpipe --model tiny --stages 2 --global-batch 2147483647
check "show --width 2147483647" show plan.json --width 2147483647 --trace '{out}'
check "profile --max-concat 100000000" profile --analytic --model tiny --max-concat 100000000 -o '{out}'
check "run --steps 2147483647" run plan.json --steps 2147483647 --trace '{out}'
# Nonsense accepted with exit 0.
check "plan --seq 0" plan --model tiny --stages 2 -m 2 --seq 0 -o '{out}'
check "plan --memory 1e30GiB" plan --model tiny --stages 2 -m 2 --memory 1e30GiB -o '{out}'
check "plan --memory ''" plan --model tiny --stages 2 -m 2 --memory '' -o '{out}'
check "plan --uniform 1e308:..." plan --uniform 1e308:1:1:0 --stages 2 -m 2 -o '{out}'
check "plan --tensor-parallel 3 with 4 heads" plan --model tiny --stages 2 -m 2 --tensor-parallel 3 -o '{out}'
check "plan -o ''" plan --model tiny --stages 2 -m 2 -o ''
check "plan: profile naming an unknown GPU" plan --profile profile_unknown_gpu.json --stages 2 -m 2 -o '{out}'
check "plan: profile with absurd times" plan --profile profile_absurd_time.json --stages 2 -m 2 -o '{out}'
check "plan: profile with absurd stash sizes" plan --profile profile_absurd_stash.json --stages 2 -m 2 -o '{out}'
check "show --width -5" show plan.json --width -5 --trace '{out}'
check "run --max-host-gib nan" run plan.json --max-host-gib nan --trace '{out}'
check "diff --top -1" diff plan.json plan.json --top -1
check "bpipe --mbs-list ''" bpipe --model tiny --stages 2 --global-batch 8 --mbs-list ''
check "compare: 0 stages" compare --model tiny --stages 0 -m 2
check "compare: 0 micro-batches" compare --model tiny --stages 2 -m 0
check "compare: unknown model" compare --model llama-99b --stages 2 -m 2
check "compare: NaN costs" compare --uniform nan:1:1:0 --stages 2 -m 2
check "compare --memory 12XB" compare --model tiny --stages 2 -m 2 --memory 12XB
check "compare: malformed profile" compare --profile profile_malformed.json --stages 2 -m 2
# Internal errors: numbers beyond a double.
check "plan: profile with 1e999" plan --profile profile_1e999.json --stages 2 -m 2 -o '{out}'
check "show: plan with 1e999" show plan_1e999.json --trace '{out}'
check "validate: plan with 1e999" validate plan_1e999.json
check "run: plan with 1e999" run plan_1e999.json --trace '{out}'
check "export: plan with 1e999" export plan_1e999.json -o '{out}'
check "diff: plan with 1e999" diff plan.json plan_1e999.json
# CLI11's two-line messages.
check "unknown subcommand" frobnicate
check "unknown option" plan --model tiny --stages 2 -m 2 --frobnicate -o '{out}'
check "unknown option before a missing one" plan --frobnicate
# PyTorch interop.
check "import: deadlocking CSV" import deadlock.csv --uniform 1:1:1:0 -o '{out}'

echo "bad_inputs: $((cases - failures)) of $cases cases end in one line, a non-zero exit and no file within ${limit} s"
[ "$failures" -eq 0 ]
