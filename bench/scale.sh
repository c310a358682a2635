#!/usr/bin/env bash
# How writing, reading, validating and drawing a plan grow with its size: for 2bp plans of uniform
# costs at about 10^4, 10^5 and 10^6 task-graph nodes (1F1B), and the size of the Zero Bubble
# paper's 28.3B case (P = 32, m = 96; 1F1B and ZB-V), the median over RUNS runs of
#   plan -o     wall time, planner time (its own planning_ms), peak RSS, file size, nodes
#   validate    wall time, peak RSS
#   show        wall time, peak RSS (timeline and summary to /dev/null)
#   show --trace wall time, peak RSS, trace file size (the simulated Perfetto trace)
#   diff        wall time, peak RSS (the plan against that trace, read back as a measured one)
# Wall time and peak RSS come from /usr/bin/time (10 ms resolution); each run is a fresh process.
#
# Usage: bench/scale.sh PIPEPLAN [OUT.tsv]     (RUNS, default 3; SIZES, default "16:96 32:512
#   128:1024 32:96 32:96:zb-v" as P:m or P:m:schedule, schedule 1f1b when left out)
set -euo pipefail
pipeplan=$(realpath "${1:?usage: bench/scale.sh PIPEPLAN [OUT.tsv]}")
# The table goes to OUT.tsv (created or truncated), else to standard output as the caller opened
# it (appended to with >>, not truncated).
if [[ -n ${2:-} ]]; then
  exec 3>"$2"
else
  exec 3>&1
fi
runs=${RUNS:-3}
sizes=${SIZES:-"16:96 32:512 128:1024 32:96 32:96:zb-v"}
command -v /usr/bin/time >/dev/null || { echo "bench/scale.sh: needs /usr/bin/time" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/pipeplan_scale.XXXXXX")
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# timed FILE CMD...: runs CMD (stdout to $work/stdout), appends "seconds kilobytes" to FILE.
timed() {
  local file=$1
  shift
  /usr/bin/time -f '%e %M' -o "$work/time" "$@" >"$work/stdout"
  cat "$work/time" >>"$file"
}

printf 'P\tm\tschedule\tnodes\tbytes\tplan_s\tplanning_ms\tplan_rss_mb\tvalidate_s\tvalidate_rss_mb\tshow_s\tshow_rss_mb\ttrace_s\ttrace_rss_mb\ttrace_bytes\tdiff_s\tdiff_rss_mb\n' >&3
for size in $sizes; do
  IFS=: read -r p m schedule <<<"$size"
  schedule=${schedule:-1f1b}
  plan_file=$work/plan-$p-$m-$schedule.json
  args=(plan --uniform 10:10:8:0.4 --stages "$p" --microbatches "$m" --schedule "$schedule"
    --backward 2bp -o "$plan_file")
  trace_file=$work/trace-$p-$m-$schedule.json
  rm -f "$work"/{plan,validate,show,planning,trace,diff}
  for _ in $(seq "$runs"); do
    timed "$work/plan" "$pipeplan" "${args[@]}" --json
    sed -n 's/^ *"planning_ms": \([0-9.e+-]*\),*$/\1/p' "$work/stdout" >>"$work/planning"
    timed "$work/validate" "$pipeplan" validate "$plan_file"
    timed "$work/show" "$pipeplan" show "$plan_file" --width 120
    timed "$work/trace" "$pipeplan" show "$plan_file" --width 120 --trace "$trace_file"
    timed "$work/diff" "$pipeplan" diff "$plan_file" "$trace_file"
  done
  nodes=$("$pipeplan" validate "$plan_file" | sed -n 's/.*(\([0-9]*\) nodes.*/\1/p')
  bytes=$(stat -c %s "$plan_file")
  trace_bytes=$(stat -c %s "$trace_file")
  col() { awk -v c="$2" '{ print $c }' "$work/$1" | median; }
  mb() { awk '{ printf "%.1f\n", $1 / 1024 }'; }
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$p" "$m" "$schedule" \
    "$nodes" "$bytes" "$(col plan 1)" "$(median <"$work/planning")" "$(col plan 2 | mb)" \
    "$(col validate 1)" "$(col validate 2 | mb)" "$(col show 1)" "$(col show 2 | mb)" \
    "$(col trace 1)" "$(col trace 2 | mb)" "$trace_bytes" "$(col diff 1)" "$(col diff 2 | mb)" >&3
done
