#!/usr/bin/env bash
# bench/cpu_loop.sh run for real, small (2 repetitions, 2 steps): every file it documents is
# written, every recorded output starts with its command, and calibrate eval re-planned the
# held-out runs from the fitted profile.
# Usage: tests/bench/cpu_loop_test.sh SOURCE_DIR PIPEPLAN
set -euo pipefail
source_dir=${1:?usage: cpu_loop_test.sh SOURCE_DIR PIPEPLAN}
pipeplan=${2:?usage: cpu_loop_test.sh SOURCE_DIR PIPEPLAN}
work=$(mktemp -d "${TMPDIR:-/tmp}/pipeplan_cpu_loop.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "cpu_loop_test: $*" >&2; exit 1; }

REPETITIONS=2 STEPS=2 bash "$source_dir/bench/cpu_loop.sh" "$pipeplan" "$work/out" >"$work/log" 2>&1 ||
  { cat "$work/log" >&2; fail "the loop failed"; }
for f in profile.json profile.calibrated.json env.txt fit.txt eval.txt; do
  [[ -s $work/out/$f ]] || fail "$f missing or empty"
done
for name in 1f1b-2bp zb-v gpipe interleaved zb-h1; do
  for f in "$name.plan.json" "$name.trace.json" "$name.run.txt" "$name.diff.txt"; do
    [[ -s $work/out/$f ]] || fail "$f missing or empty"
  done
  grep -q "step time (makespan): predicted" "$work/out/$name.diff.txt" || fail "$name.diff.txt has no step time"
done
for f in "$work"/out/*.txt; do
  [[ $f == */env.txt ]] && continue
  head -1 "$f" | grep -q '^# command: ' || fail "$(basename "$f") does not start with its command"
done
grep -q '"gpu": "cpu"' "$work/out/profile.json" || fail "the profile does not name the cpu entry"
for name in 1f1b-2bp zb-v; do
  grep -q "^$name " "$work/out/eval.txt" || fail "eval.txt has no row for $name"
done
grep -q '^commit: ' "$work/out/env.txt" || fail "env.txt has no commit"
echo "cpu_loop_test: ok"
