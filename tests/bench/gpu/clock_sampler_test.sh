#!/usr/bin/env bash
# bench/gpu/run.sh for real (not a dry run) on a machine without a GPU: a fake nvidia-smi and a
# fake pipeplan on PATH stand in for the GPU machine, so that the clock sampler beside the
# SM-share profile is exercised the way it runs on a GPU: the suite asks pipeplan (`env --json`)
# for the GPU and the SM share, probes which fields the driver answers (here an older driver,
# which names the throttle reasons and has no instantaneous power), samples with them while the
# command runs, stops the sampler when it ends, leaves NAME.clocks.csv beside the raw outputs,
# writes manifest.json, and the summary tabulates the samples; nvidia-smi is asked of one GPU
# alone (-i: the first of CUDA_VISIBLE_DEVICES, else 0), named in the headers and the manifest.
# Then a driver that answers none of the field sets: no sampler, the command still runs. Then
# --deadline-s kept where nvidia-smi, `pipeplan env --json` or the tests' listing hangs, and
# run.sh stopped from outside (SIGTERM): the command and its sampler end, manifest.json is
# written. Usage: clock_sampler_test.sh REPO
set -euo pipefail
repo=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "clock_sampler_test: $*" >&2
  exit 1
}

# The fake GPU machine: nvidia-smi refuses the fields in $FAKE_SMI_REFUSE (an extended regular
# expression), hangs with FAKE_SMI_HANG set, and with -lms prints a CSV header and a sample every
# few milliseconds until it is killed; each query (and the GPU -i names, "all" without) and each
# start of a sampler is logged.
mkdir -p "$work/path" "$work/bin"
cat > "$work/path/nvidia-smi" << 'SMI'
#!/usr/bin/env bash
query='' loop='' id=''
while (($#)); do
  case $1 in
    --query-gpu=*) query=${1#--query-gpu=} ;;
    -lms) loop=1 ;;
    -i) id=$2; shift ;;
  esac
  shift
done
[[ -z $query ]] && { echo "Fake GPU 0: NVIDIA H200"; exit 0; }
echo "$query" >> "$FAKE_SMI_LOG.queries"
echo "${id:-all}" >> "$FAKE_SMI_LOG.ids"
if [[ -n ${FAKE_SMI_HANG:-} ]]; then exec sleep 300; fi
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
# pipeplan: `env --json` answers as on a one-H200 machine (hangs with FAKE_ENV_HANG set);
# `profile ... -o FILE` takes a moment ($FAKE_PROFILE_S, 0.4 s; its pid in $FAKE_PROFILE_PID where
# set) and writes FILE; anything else fails. A tests binary whose listing hangs.
cat > "$work/bin/pipeplan" << 'PIPEPLAN'
#!/usr/bin/env bash
if [[ ${1:-} == env && ${2:-} == --json ]]; then
  if [[ -n ${FAKE_ENV_HANG:-} ]]; then exec sleep 300; fi
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
if [[ -n ${FAKE_PROFILE_PID:-} ]]; then echo "$$" > "$FAKE_PROFILE_PID"; fi
sleep "${FAKE_PROFILE_S:-0.4}"
echo '{"format": "pipeplan-profile", "version": 1}' > "$output"
echo "fake profile written to $output"
PIPEPLAN
printf '#!/usr/bin/env bash\nexec sleep 300\n' > "$work/bin/hung_tests"
chmod +x "$work/path/nvidia-smi" "$work/bin/pipeplan" "$work/bin/hung_tests"

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
# One GPU asked and sampled: 0 without CUDA_VISIBLE_DEVICES, named in the header.
[[ $(sort -u "$FAKE_SMI_LOG.ids") == 0 ]] ||
  fail "nvidia-smi not asked of GPU 0 alone: $(sort -u "$FAKE_SMI_LOG.ids" | tr '\n' ' ')"
grep -q '^# clocks: nvidia-smi -i 0 every 10 ms: profile-sm.clocks.csv$' "$raw/profile-sm.txt" ||
  fail "profile-sm.txt: the GPU sampled is not in its header"
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
assert m["clocks_gpu"] == {"id": "0", "from": "default"}, m["clocks_gpu"]
assert m["gpu_used"] == {"entry": "h200", "from": "pipeplan env --json"}, m["gpu_used"]
assert m["stopped_by"] is None, m["stopped_by"]
PY

# A driver that answers none of the field sets: no sampler and no clocks file, the profile runs.
# The GPU asked is the first of CUDA_VISIBLE_DEVICES (a UUID here), as the manifest says.
CUDA_VISIBLE_DEVICES=' GPU-8f3a-11,1' FAKE_SMI_REFUSE='clocks\.sm' run none profile-sm summary
[[ ! -e $work/none/out/profile-sm.clocks.csv ]] || fail "a clocks file without a field set"
[[ ! -s $FAKE_SMI_LOG ]] || fail "a sampler started without a field set"
grep -q '^# exit status: 0' "$work/none/out/profile-sm.txt" || fail "without a sampler the profile did not run"
grep -q 'answers none of the clock field sets' "$work/none/log" || fail "no word of the missing samples"
[[ $(sort -u "$FAKE_SMI_LOG.ids") == GPU-8f3a-11 ]] ||
  fail "nvidia-smi not asked of CUDA_VISIBLE_DEVICES' first GPU: $(sort -u "$FAKE_SMI_LOG.ids" | tr '\n' ' ')"
python3 - "$work/none/out/manifest.json" << 'PY' || fail "manifest.json: not the GPU of CUDA_VISIBLE_DEVICES"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["clocks_gpu"] == {"id": "GPU-8f3a-11", "from": "CUDA_VISIBLE_DEVICES"}, m["clocks_gpu"]
PY

# A run that samples nothing asks nvidia-smi nothing: the GPU is pipeplan's answer.
run quiet summary
[[ ! -s $FAKE_SMI_LOG.queries ]] || fail "nvidia-smi asked in a run that samples nothing"
grep -q '^# gpu: NVIDIA H200' "$work/quiet/out/summary.md" || fail "summary.md: no GPU header"
# late NAME LIMIT [VAR=VALUE...] -- OPTION... WHAT...: run.sh under `timeout LIMIT` (which a
# run past its --deadline-s meets); its status in $status, its seconds in $took.
late() {
  local name=$1 limit=$2
  shift 2
  local -a vars=()
  while [[ $1 != -- ]]; do vars+=("$1"); shift; done
  shift
  mkdir -p "$work/$name"
  export FAKE_SMI_LOG="$work/$name/samplers.log"
  : > "$FAKE_SMI_LOG"
  status=0
  local began=$SECONDS
  env "${vars[@]}" PATH="$work/path:$PATH" TMPDIR="$work/$name" timeout -k 5 "$limit" bash \
    "$repo/bench/gpu/run.sh" --pipeplan "$work/bin/pipeplan" --out "$work/$name/out" \
    --clock-sample-ms 10 "$@" > "$work/$name/log" 2>&1 || status=$?
  took=$((SECONDS - began))
}
# nvidia-smi hangs: the clock probes take what the deadline leaves (14 s at most here, not 60 s
# each; the profile is skipped unprobed where its start leaves under 10 s, so a few seconds of
# slack for a loaded machine), the profile is skipped, the summary written, all within
# --deadline-s 34.
late smi-hangs 60 FAKE_SMI_HANG=1 -- --deadline-s 34 profile-sm summary
if [[ $status != 1 ]] || ((took > 34)); then
  cat "$work/smi-hangs/log"
  fail "a hung nvidia-smi: run.sh exited $status after $took s (--deadline-s 34)"
fi
grep -q 'nvidia-smi gave no answer in time' "$work/smi-hangs/log" || fail "a hung nvidia-smi: no word of it"
grep -q '^# exit status: 0' "$work/smi-hangs/out/summary.md" || fail "a hung nvidia-smi: no summary"
# pipeplan env --json hangs: asked for what the deadline leaves (2 s), not 60 s.
late env-hangs 40 FAKE_ENV_HANG=1 -- --deadline-s 22 env summary
if [[ $status != 1 ]] || ((took > 22)); then
  cat "$work/env-hangs/log"
  fail "a hung pipeplan env: run.sh exited $status after $took s (--deadline-s 22)"
fi
grep -q 'pipeplan env --json gave no answer within [0-9]* s' "$work/env-hangs/log" ||
  { cat "$work/env-hangs/log"; fail "a hung pipeplan env: no word of it"; }
# The tests' listing hangs: listed for what the deadline leaves, recorded as not run.
late list-hangs 40 -- --tests-binary "$work/bin/hung_tests" --deadline-s 22 tests summary
if [[ $status != 1 ]] || ((took > 22)); then
  cat "$work/list-hangs/log"
  fail "a hung test listing: run.sh exited $status after $took s (--deadline-s 22)"
fi
grep -q '^# not run: .*hung_tests --gtest_list_tests gave no answer within [0-9]* s' \
  "$work/list-hangs/out/tests-list.txt" || fail "a hung test listing: not recorded as not run"

# Stopped from outside while a profile runs: the profile and its sampler are stopped at once, the
# output says so, summary.md is written, and manifest.json lists the command with the signal's
# status. run.sh writes into
# a pipe whose reader is gone by then (`run.sh | tee log` stopped with Ctrl-C, a closed
# terminal): that costs it neither the manifest nor its exit status.
mkdir -p "$work/stopped"
export FAKE_SMI_LOG="$work/stopped/samplers.log"
: > "$FAKE_SMI_LOG"
mkfifo "$work/stopped/pipe"
cat "$work/stopped/pipe" > "$work/stopped/log" &
reader=$!
FAKE_PROFILE_S=60 FAKE_PROFILE_PID="$work/stopped/profile.pid" PATH="$work/path:$PATH" \
  TMPDIR="$work/stopped" bash "$repo/bench/gpu/run.sh" --pipeplan "$work/bin/pipeplan" \
  --out "$work/stopped/out" --clock-sample-ms 10 profile-sm summary > "$work/stopped/pipe" 2>&1 &
runner=$!
for ((n = 0; n < 100; ++n)); do
  [[ -s $work/stopped/profile.pid && -s $FAKE_SMI_LOG ]] && break
  sleep 0.1
done
[[ -s $work/stopped/profile.pid ]] || { kill "$runner"; fail "the stopped run: the profile did not start"; }
kill "$reader"
wait "$reader" 2> /dev/null || true
kill -TERM "$runner"
status=0
for ((n = 0; n < 200; ++n)); do
  kill -0 "$runner" 2> /dev/null || break
  sleep 0.1
done
if kill -0 "$runner" 2> /dev/null; then
  kill -9 "$runner"
  fail "run.sh still runs 20 s after SIGTERM"
fi
wait "$runner" || status=$?
[[ $status == 143 ]] || { cat "$work/stopped/log"; fail "run.sh stopped by SIGTERM exited $status"; }
profile_pid=$(< "$work/stopped/profile.pid")
if kill -0 "$profile_pid" 2> /dev/null; then
  kill "$profile_pid"
  fail "the profile outlived run.sh"
fi
stopped "$FAKE_SMI_LOG"
grep -q '^# stopped: run.sh got SIGTERM' "$work/stopped/out/profile-sm.txt" ||
  fail "profile-sm.txt: does not say it was stopped"
grep -q '^## ' "$work/stopped/out/summary.md" ||
  fail "summary.md: not written when stopped (the summary WHAT was asked for)"
python3 - "$work/stopped/out/manifest.json" << 'PY' || fail "manifest.json: not written when stopped"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["stopped_by"] == "SIGTERM", m["stopped_by"]
assert [(c["output"], c["exit_status"]) for c in m["commands"]] == [("profile-sm.txt", 143)], m
PY
echo "clock_sampler_test: passed"
