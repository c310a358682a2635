#!/usr/bin/env bash
# Whole-process start-up cost of pipeplan binaries: median wall time (hyperfine, no shell,
# 3 warm-ups, 30 runs; where hyperfine is not installed, the same protocol timed by Python's
# perf_counter around each process, written in hyperfine's JSON shape) and median peak RSS
# (/usr/bin/time -f %M over RSS_RUNS runs) of `pipeplan --version` and of a small plan, for every
# binary given, after the timer's floor (/bin/true timed the same way).
# docs/design/cuda-backend.md ("Plugin") quotes its output for the binary before and after the
# CUDA backend became a module.
#
# Usage: bench/startup.sh BINARY [BINARY...]     (e.g. /tmp/pipeplan.before build/tools/pipeplan)
# Environment: RUNS (hyperfine runs, 30), RSS_RUNS (11), OUT (folder for hyperfine's JSON, one
# file per binary and command, <N>-<basename>-<command>.json with N the binary's place among the
# arguments, and floor.json; a temporary one by default).
set -euo pipefail
if [ "$#" -eq 0 ]; then
  echo "usage: bench/startup.sh BINARY [BINARY...]" >&2
  exit 2
fi
for tool in jq /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "bench/startup.sh: needs $tool" >&2; exit 2; }
done
timer=hyperfine
if ! command -v hyperfine >/dev/null; then
  command -v python3 >/dev/null || { echo "bench/startup.sh: needs hyperfine or python3" >&2; exit 2; }
  timer=python3
fi
runs=${RUNS:-30}
rss_runs=${RSS_RUNS:-11}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"

plan_args=(plan --model llama-7b --gpu h100 --stages 4 --microbatches 8 --seq 2048
  --schedule 1f1b --backward 2bp)

# Median of the numbers on stdin.
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# measure NAME LABEL BINARY ARGS...: one table row; the timer's JSON in $out/NAME.json.
measure() {
  local name=$1 label=$2 binary=$3
  shift 3
  local json="$out/$name.json"
  if [ "$timer" = hyperfine ]; then
    hyperfine -N --warmup 3 -r "$runs" --export-json "$json" -- "$binary $*" >"$json.log" 2>&1 ||
      { cat "$json.log" >&2; exit 1; }
  else
    python3 - "$runs" "$json" "$binary" "$@" <<'PY' >"$json.log" 2>&1 || { cat "$json.log" >&2; exit 1; }
import json, statistics, subprocess, sys, time
runs, out, command = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
def once():
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start
for _ in range(3):
    once()
times = [once() for _ in range(runs)]
with open(out, "w") as f:
    json.dump({"timer": "python3 perf_counter", "results": [
        {"command": " ".join(command), "median": statistics.median(times), "times": times}]}, f)
PY
  fi
  local wall_ms
  wall_ms=$(jq '.results[0].median * 1000' "$json")
  local rss_kib
  rss_kib=$(for _ in $(seq "$rss_runs"); do
    /usr/bin/time -f %M "$binary" "$@" 2>&1 >/dev/null | tail -n 1
  done | median)
  printf '%-40s %-10s %10.1f %12.1f\n' "$binary" "$label" "$wall_ms" "$(awk -v k="$rss_kib" 'BEGIN { print k / 1024 }')"
}

printf '%-40s %-10s %10s %12s\n' "binary" "command" "wall (ms)" "peak RSS (MiB)"
# The timer's floor: a process that does nothing, timed the same way.
measure floor floor /bin/true
# Each binary's files are named by its place among the arguments as well as its name: two builds'
# bin/pipeplan would otherwise share them.
index=0
for binary in "$@"; do
  [ -x "$binary" ] || { echo "bench/startup.sh: $binary is not an executable" >&2; exit 2; }
  index=$((index + 1))
  name="$index-$(basename "$binary")"
  measure "$name-version" version "$binary" --version
  measure "$name-plan" plan "$binary" "${plan_args[@]}"
done
echo "(median of $runs runs after 3 warm-ups, timed by $timer; peak RSS: median of $rss_runs runs; plan: pipeplan ${plan_args[*]}; JSON in $out)"
