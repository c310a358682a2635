#!/usr/bin/env bash
# How long the README's first command takes on a fresh clone with an empty compiler cache: clones
# HEAD into a temporary folder RUNS times, runs tools/quickstart.sh there with its own empty
# ccache folder, and prints each run's wall time and the median. The Debian packages must already
# be installed (a first run of tools/setup.sh does it), so what is timed is the build and the
# plan and show. Usage: bash bench/quickstart_cold.sh [RUNS]   (default 3)
set -euo pipefail
runs=${1:-3}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "quickstart_cold: RUNS must be a positive integer, got '$runs'" >&2; exit 2; }
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
commit=$(git -C "$repo" rev-parse --short HEAD)
echo "quickstart_cold: commit $commit, $(nproc) cores, $runs runs, $(date -u +%Y-%m-%d)"
times=()
for ((i = 1; i <= runs; i++)); do
  work=$(mktemp -d)
  git clone -q "$repo" "$work/src"
  start_ms=$(($(date +%s%N) / 1000000))
  if ! (cd "$work/src" && CCACHE_DIR="$work/ccache" bash tools/quickstart.sh >"$work/log" 2>&1); then
    tail -20 "$work/log" >&2
    echo "quickstart_cold: run $i failed (log above)" >&2
    rm -rf "$work"
    exit 1
  fi
  ms=$(($(date +%s%N) / 1000000 - start_ms))
  t=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
  times+=("$t")
  printf 'run %d: %.1f s\n' "$i" "$t"
  rm -rf "$work"
done
printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {m = (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2; printf "median: %.1f s (min %.1f, max %.1f)\n", m, a[1], a[NR]}'
