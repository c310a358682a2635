#!/usr/bin/env bash
# The whole loop on the CPU reference backend, as the GPU suite's predict stage runs it on a GPU:
# profile the backend on this machine (pipeplan profile --backend cpu), plan from the profile,
# run every plan (one thread per plan device) and compare it with its prediction (pipeplan diff);
# then fit the profile's contention model (pipeplan calibrate fit) to the runs of GPipe,
# interleaved and ZB-H1 alone, and predict the held-out 1F1B-2bp and ZB-V runs again from the
# fitted profile (calibrate eval: "before" from the profile as measured, "after" the fitted one).
# The stage threads share this machine's cores: with more stages than cores, contention is what
# the fit has to find.
#
# Usage: bench/cpu_loop.sh PIPEPLAN OUTDIR
#   MODEL (tiny), STAGES (2), M (4 x STAGES), STEPS (6), REPETITIONS (20): the profile's and plans'
# OUTDIR gets profile.json, profile.calibrated.json, NAME.{plan,trace}.json, NAME.run.txt,
# NAME.diff.txt, fit.txt, eval.txt and env.txt (machine, date, commit, the commands).
set -euo pipefail
pipeplan=$(realpath "${1:?usage: bench/cpu_loop.sh PIPEPLAN OUTDIR}")
out=${2:?usage: bench/cpu_loop.sh PIPEPLAN OUTDIR}
model=${MODEL:-tiny}
stages=${STAGES:-2}
m=${M:-$((4 * stages))}
steps=${STEPS:-6}
repetitions=${REPETITIONS:-20}
mkdir -p "$out"
out=$(realpath "$out")
here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")

# record FILE CMD...: runs CMD, its output into OUTDIR/FILE under a "# command:" line (which
# calibrate eval re-plans from), and the command into env.txt.
record() {
  local file=$1
  shift
  echo "${*/#$pipeplan/pipeplan}" >>"$out/env.txt"
  echo "# command: $(printf '%q ' "$@")" >"$out/$file"
  "$@" >>"$out/$file" 2>&1 || {
    echo "bench/cpu_loop.sh: failed, see $out/$file; its last lines:" >&2
    tail -n 5 "$out/$file" >&2
    exit 1
  }
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') x $(nproc) cores"
  echo "pipeplan: $("$pipeplan" --version 2>/dev/null | head -1)"
  echo "MODEL=$model STAGES=$stages M=$m STEPS=$steps REPETITIONS=$repetitions"
  echo "commands:"
} >"$out/env.txt"

record profile.txt "$pipeplan" profile --backend cpu --model "$model" --repetitions "$repetitions" \
  -o "$out/profile.json"

# NAME PLAN-OPTIONS...: plan from the profile, run it with a trace, diff the two.
loop() {
  local name=$1
  shift
  record "$name.plan.txt" "$pipeplan" plan --profile "$out/profile.json" --stages "$stages" \
    --microbatches "$m" "$@" -o "$out/$name.plan.json"
  record "$name.run.txt" "$pipeplan" run "$out/$name.plan.json" --steps "$steps" \
    --trace "$out/$name.trace.json"
  record "$name.diff.txt" "$pipeplan" diff "$out/$name.plan.json" "$out/$name.trace.json"
}
loop 1f1b-2bp --schedule 1f1b --backward 2bp
loop zb-v --schedule zb-v
loop gpipe --schedule gpipe
loop interleaved --schedule interleaved --chunks 2 --backward 2bp
loop zb-h1 --schedule zb-h1

record fit.txt "$pipeplan" calibrate fit --profile "$out/profile.json" \
  -o "$out/profile.calibrated.json" "$out/gpipe" "$out/interleaved" "$out/zb-h1"
record eval.txt "$pipeplan" calibrate eval --profile "$out/profile.calibrated.json" \
  "$out/1f1b-2bp" "$out/zb-v"
echo "bench/cpu_loop.sh: wrote $out"
grep -h "step time (makespan)" "$out"/*.diff.txt | sed 's/^/  /'
