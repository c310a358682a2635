#!/usr/bin/env bash
# A rank killed mid-step, as bench/gpu/run.sh's nccl checks it: the WORLD ranks of one `pipeplan
# run` started here as torchrun starts them (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
# MASTER_ADDR=127.0.0.1, MASTER_PORT a free port), each with its own output
# (OUT/nccl-rank-killed.rank<R>.txt) and a limit of LIMIT_S seconds, and
# PIPEPLAN_TEST_FAULT=die:KILLED: rank KILLED kills itself (SIGKILL) at its first node of step 1.
# The ranks stay in this script's process group (timeout --foreground), so that a timeout around
# the script (run.sh's) ends them with it rather than leaving them on the GPU.
# Prints each rank's exit status and when it ended (ms after the start), then the same as one
# JSON line with TIMEOUT_MS (the run's --timeout-ms) and SLACK_S; summary.py --rank-killed judges
# it. Exits 0 once every rank ended, whatever their statuses.
#
# Usage: rank_killed.sh OUT WORLD KILLED TIMEOUT_MS SLACK_S LIMIT_S PIPEPLAN ARG...
set -euo pipefail
(($# >= 7)) || { sed -n '2,/^set /p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
out=$1 world=$2 killed=$3 timeout_ms=$4 slack_s=$5 limit_s=$6
shift 6
port=$(python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
echo "PIPEPLAN_TEST_FAULT=die:$killed, $world ranks at 127.0.0.1:$port, --timeout-ms $timeout_ms," \
  "slack $slack_s s, a limit of $limit_s s per rank"
start=$(date +%s%N)
for ((r = 0; r < world; ++r)); do
  (
    status=0
    PIPEPLAN_TEST_FAULT=die:$killed RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r \
      LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout --foreground -k 5 "$limit_s" "$@" > "$out/nccl-rank-killed.rank$r.txt" 2>&1 ||
      status=$?
    echo "$status $((($(date +%s%N) - start) / 1000000))" > "$out/nccl-rank-killed.rank$r.status"
  ) 2> /dev/null &  # the shell's own "Killed" notice; each rank's output is in its file
done
wait
json="{\"killed_rank\": $killed, \"world\": $world, \"timeout_ms\": $timeout_ms,"
json+=" \"slack_ms\": $((slack_s * 1000)), \"limit_s\": $limit_s, \"ranks\": ["
for ((r = 0; r < world; ++r)); do
  status=-1 end_ms=-1
  if [[ -s $out/nccl-rank-killed.rank$r.status ]]; then
    read -r status end_ms < "$out/nccl-rank-killed.rank$r.status"
  fi
  rm -f "$out/nccl-rank-killed.rank$r.status"
  echo "rank $r: exit $status, ended $end_ms ms after the start (nccl-rank-killed.rank$r.txt)"
  if ((r > 0)); then json+=", "; fi
  json+="{\"rank\": $r, \"status\": $status, \"end_ms\": $end_ms,"
  json+=" \"output\": \"nccl-rank-killed.rank$r.txt\"}"
done
echo "$json]}"
