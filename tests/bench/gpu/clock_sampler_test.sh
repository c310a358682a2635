#!/usr/bin/env bash
# bench/gpu/run.sh for real (not a dry run) on a machine without a GPU: a fake nvidia-smi and a
# fake pipeplan on PATH stand in for the GPU machine, so that the clock sampler beside the
# SM-share profile is exercised the way it runs on a GPU: the suite asks pipeplan (`env --json`)
# for the GPU and the SM share, probes which fields the driver answers (here an older driver,
# which names the throttle reasons and has no instantaneous power), samples with them while the
# command runs, stops the sampler when it ends, leaves NAME.clocks.csv beside the raw outputs,
# writes manifest.json, and the summary tabulates the samples. Then a driver that answers none of
# the field sets: no sampler, the command still runs. Usage: clock_sampler_test.sh REPO
set -euo pipefail
repo=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "clock_sampler_test: $*" >&2
  exit 1
}

# The fake GPU machine: nvidia-smi refuses the fields in $FAKE_SMI_REFUSE (an extended regular
# expression), and with -lms prints a CSV header and a sample every few milliseconds until it is
# killed; each query and each start of a sampler is logged.
mkdir -p "$work/path" "$work/bin"
cat > "$work/path/nvidia-smi" << 'SMI'
#!/usr/bin/env bash
query='' loop=''
for arg in "$@"; do
  case $arg in
    --query-gpu=*) query=${arg#--query-gpu=} ;;
    -lms) loop=1 ;;
  esac
done
[[ -z $query ]] && { echo "Fake GPU 0: NVIDIA H200"; exit 0; }
echo "$query" >> "$FAKE_SMI_LOG.queries"
if [[ -n ${FAKE_SMI_REFUSE:-} && $query =~ $FAKE_SMI_REFUSE ]]; then
  echo "Field \"${BASH_REMATCH[0]}\" is not a valid field to query." >&2
  exit 2
fi
if [[ -z $loop ]]; then echo "0"; exit 0; fi
echo "$$" >> "$FAKE_SMI_LOG"
echo "$query" | sed 's/,/, /g'
while :; do
  echo "2026/11/27 12:00:00.000, 100, 1755, 3201, 650.5, 61, 0x0000000000000004"
  sleep 0.01
done
SMI
# pipeplan: `env --json` answers as on a one-H200 machine; `profile ... -o FILE` takes a moment
# and writes FILE; anything else fails.
cat > "$work/bin/pipeplan" << 'PIPEPLAN'
#!/usr/bin/env bash
if [[ ${1:-} == env && ${2:-} == --json ]]; then
  cat << 'JSON'
{"pipeplan": {"version": "0.1.0", "cuda_backend": true, "fused_attention": true, "mpi": false},
 "cuda_module": {"path": "/opt/pipeplan/libpipeplan_cuda.so", "loaded": true, "error": null,
                 "kernel_driver": "580.159.04"},
 "gpus": [{"index": 0, "name": "NVIDIA H200", "gpu_entry": "h200", "sms": 132,
           "memory_bytes": 150754820096, "compute_capability": "9.0",
           "driver_version": "13.0", "runtime_version": "13.0",
  "emulate_sm_share": [{"stages": 4, "sms_per_stage": 32}, {"stages": 8, "sms_per_stage": 16}]}],
 "libraries": [{"name": "cudnn", "path": "/x/libcudnn.so.9", "version": "9.19.0"},
               {"name": "nccl", "path": "/x/libnccl.so.2", "version": "2.28.3"}],
 "environment": {}}
JSON
  exit 0
fi
[[ ${1:-} == profile ]] || { echo "fake pipeplan: only env --json and profile" >&2; exit 1; }
while (($#)); do
  if [[ $1 == -o ]]; then output=$2; fi
  shift
done
sleep 0.4
echo '{"format": "pipeplan-profile", "version": 1}' > "$output"
echo "fake profile written to $output"
PIPEPLAN
chmod +x "$work/path/nvidia-smi" "$work/bin/pipeplan"

# run NAME WHAT...: run.sh WHAT... on the fake machine, its output folder $work/NAME/out.
run() {
  local name=$1
  shift
  mkdir -p "$work/$name"
  export FAKE_SMI_LOG="$work/$name/samplers.log"
  : > "$FAKE_SMI_LOG"
  : > "$FAKE_SMI_LOG.queries"
  if ! PATH="$work/path:$PATH" TMPDIR="$work/$name" bash "$repo/bench/gpu/run.sh" \
    --pipeplan "$work/bin/pipeplan" --out "$work/$name/out" --clock-sample-ms 10 \
    --deadline-s 120 "$@" > "$work/$name/log" 2>&1; then
    cat "$work/$name/log"
    fail "$name: run.sh failed"
  fi
}
# stopped LOG: every sampler the log names has ended.
stopped() {
  local pid
  while read -r pid; do
    if kill -0 "$pid" 2> /dev/null; then
      kill "$pid"
      fail "the sampler $pid still runs after its command ended"
    fi
  done < "$1"
}

# An older driver: clocks_throttle_reasons and power.draw, not clocks_event_reasons and
# power.draw.instant.
FAKE_SMI_REFUSE='clocks_event_reasons|power\.draw\.instant' PIPEPLAN_COPY_WAIT=poll \
  run older profile-sm summary
raw="$work/older/out"
[[ -s $raw/profile-sm.txt ]] || fail "no profile-sm.txt in the output folder"
grep -q '^# gpu: NVIDIA H200, driver 580.159.04' "$raw/profile-sm.txt" || fail "profile-sm.txt: no GPU header"
grep -q '^# command: .*--sm-partition 32 -o {out}/h200-llama-7b-blocks8-sm32.measured.json$' \
  "$raw/profile-sm.txt" || fail "profile-sm.txt: not pipeplan's SM share, or a host path in the command"
grep -q '^# environment: .* PIPEPLAN_COPY_WAIT=poll' "$raw/profile-sm.txt" ||
  fail "profile-sm.txt: the runtime switch set for the run is not in its header"
grep -q '^# exit status: 0' "$raw/profile-sm.txt" || fail "profile-sm.txt: the profile did not exit 0"
csv="$raw/profile-sm.clocks.csv"
[[ -s $csv ]] || fail "no profile-sm.clocks.csv beside the profile"
header=$(head -n 1 "$csv")
[[ $header == "timestamp, utilization.gpu, clocks.sm, clocks.mem, power.draw, temperature.gpu, clocks_throttle_reasons.active" ]] ||
  fail "profile-sm.clocks.csv: the fields of the older driver expected, header '$header'"
(($(wc -l < "$csv") >= 3)) || fail "profile-sm.clocks.csv: fewer than two samples in 0.4 s"
(($(wc -l < "$FAKE_SMI_LOG") == 1)) || fail "one sampler expected, $(wc -l < "$FAKE_SMI_LOG") started"
stopped "$FAKE_SMI_LOG"
# The summary tabulates the samples: the SM clock, the power and the throttle reason named.
summary="$raw/summary.md"
grep -q '^## GPU clock and power' "$summary" || { cat "$summary"; fail "summary: no clock table"; }
grep -q '^| profile-sm | .*| 1755 (1755) | 650 (650) | 61 | SW power cap 100 % |' "$summary" ||
  { cat "$summary"; fail "summary: the clock row is not the samples'"; }
# manifest.json: the GPU and the versions pipeplan reported, every command with its status.
python3 - "$raw/manifest.json" << 'PY' || fail "manifest.json is not what the run did"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["gpu"] == "NVIDIA H200" and m["driver"] == "580.159.04", m
assert m["cuda_runtime"] == "13.0" and m["cudnn"] == "9.19.0" and m["nccl"] == "2.28.3", m
assert m["sms"] == 132 and m["what"] == ["profile-sm", "summary"], m
outputs = [c["output"] for c in m["commands"]]
assert outputs == ["profile-sm.txt", "summary.md"], outputs
assert all(c["exit_status"] == 0 and isinstance(c["wall_s"], int) for c in m["commands"]), m
assert "--sm-partition 32 -o {out}/h200-llama-7b-blocks8-sm32.measured.json" in m["commands"][0]["command"]
assert m["commands"][1]["command"] == "python3 bench/gpu/summary.py {out}", m["commands"][1]
PY

# A driver that answers none of the field sets: no sampler and no clocks file, the profile runs.
FAKE_SMI_REFUSE='clocks\.sm' run none profile-sm summary
[[ ! -e $work/none/out/profile-sm.clocks.csv ]] || fail "a clocks file without a field set"
[[ ! -s $FAKE_SMI_LOG ]] || fail "a sampler started without a field set"
grep -q '^# exit status: 0' "$work/none/out/profile-sm.txt" || fail "without a sampler the profile did not run"
grep -q 'answers none of the clock field sets' "$work/none/log" || fail "no word of the missing samples"

# A run that samples nothing asks nvidia-smi nothing: the GPU is pipeplan's answer.
run quiet summary
[[ ! -s $FAKE_SMI_LOG.queries ]] || fail "nvidia-smi asked in a run that samples nothing"
grep -q '^# gpu: NVIDIA H200' "$work/quiet/out/summary.md" || fail "summary.md: no GPU header"
echo "clock_sampler_test: passed"
