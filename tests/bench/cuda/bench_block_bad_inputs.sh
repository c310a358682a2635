#!/usr/bin/env bash
# bench_block's bad options end in one line naming the option and exit 1, on any machine (they are
# checked before the GPU is looked for). Usage: bash bench_block_bad_inputs.sh BENCH_BLOCK
set -uo pipefail
bench=${1:?usage: bench_block_bad_inputs.sh BENCH_BLOCK}
failures=0
# expect TEXT ARGS...: bench_block ARGS prints one line containing TEXT and exits 1.
expect() {
  local text=$1
  shift
  local output status
  output=$("$bench" "$@" 2>&1)
  status=$?
  if [[ $status -ne 1 || $(printf '%s\n' "$output" | wc -l) -ne 1 || $output != *"$text"* ]]; then
    echo "FAIL: bench_block $* -> exit $status, output: $output"
    failures=$((failures + 1))
  fi
}
expect "--gemm-candidates: must be at least 1" --gemm-candidates 0
expect "--gemm-candidates: timing the answers needs an untimed step" --gemm-candidates 4 --warmup 0
expect "--mbs: 'x' is not a positive integer" --mbs x
expect "--warmup must be at least 0" --repetitions 0
[[ $failures -eq 0 ]] && echo "bench_block bad inputs: all refused in one line" || exit 1
