#!/usr/bin/env bash
# tools/device/issue12.sh for real (not a dry run) on a machine without a GPU: a fake nvidia-smi
# and a fake pipeplan on PATH stand in for the GPU machine, so that the clock sampler beside the
# SM-share profile is exercised the way a GPU session runs it: the script probes which fields
# the driver answers (here an older driver, which names the throttle reasons and has no
# instantaneous power), samples with them while the command runs, stops the sampler when it
# ends, packs NAME.clocks.csv with the raw outputs, and the summary tabulates it. Then a driver
# that answers none of the field sets: no sampler, the command still runs. Usage:
# issue12_sampler_test.sh REPO
set -euo pipefail
repo=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "issue12_sampler_test: $*" >&2
  exit 1
}

# The fake GPU machine: nvidia-smi answers the GPU's name, refuses the fields in
# $FAKE_SMI_REFUSE (an extended regular expression), and with -lms prints a CSV header and a
# sample every few milliseconds until it is killed; each start of a sampler is logged.
mkdir -p "$work/path" "$work/carry/bin"
cat > "$work/path/nvidia-smi" << 'EOF'
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
if [[ $query == name,driver_version,memory.total ]]; then
  echo "NVIDIA H200, 580.159.04, 143771 MiB"
  exit 0
fi
if [[ -z $loop ]]; then echo "0"; exit 0; fi
echo "$$" >> "$FAKE_SMI_LOG"
echo "$query" | sed 's/,/, /g'
while :; do
  echo "2026/11/27 12:00:00.000, 100, 1755, 3201, 650.5, 61, 0x0000000000000004"
  sleep 0.01
done
EOF
# pipeplan: `profile ... -o FILE` takes a moment and writes FILE; anything else fails.
cat > "$work/carry/bin/pipeplan" << 'EOF'
#!/usr/bin/env bash
[[ ${1:-} == profile ]] || { echo "fake pipeplan: only profile" >&2; exit 1; }
while (($#)); do
  if [[ $1 == -o ]]; then output=$2; fi
  shift
done
sleep 0.4
echo '{"format": "pipeplan-profile", "version": 1}' > "$output"
echo "fake profile written to $output"
EOF
chmod +x "$work/path/nvidia-smi" "$work/carry/bin/pipeplan"

# run NAME PHASE...: issue12.sh PHASE... with the fake machine; unpacks its raw files into
# $work/NAME/raw.
run() {
  local name=$1
  shift
  mkdir -p "$work/$name"
  export FAKE_SMI_LOG="$work/$name/samplers.log"
  : > "$FAKE_SMI_LOG"
  : > "$FAKE_SMI_LOG.queries"
  if ! PATH="$work/path:$PATH" OUT="$work/$name/out" TMPDIR="$work/$name" CLOCK_SAMPLE_MS=10 \
    DEADLINE_S=120 bash "$repo/tools/device/issue12.sh" -c "$work/carry" "$@" \
    > "$work/$name/log" 2>&1; then
    cat "$work/$name/log"
    fail "$name: issue12.sh failed"
  fi
  mkdir -p "$work/$name/raw"
  local tag
  tag=$(IFS=-; echo "$*")
  tar -C "$work/$name/raw" --strip-components=1 -xzf "$work/$name/out/issue12-$tag.tar.gz"
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
raw="$work/older/raw"
[[ -s $raw/profile-sm.txt ]] || fail "no profile-sm.txt in the packed raw files"
grep -q '^# gpu: NVIDIA H200, 580.159.04' "$raw/profile-sm.txt" || fail "profile-sm.txt: no GPU header"
grep -q '^# environment: .* PIPEPLAN_COPY_WAIT=poll' "$raw/profile-sm.txt" ||
  fail "profile-sm.txt: the runtime switch set for the call is not in its header"
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

# A driver that answers none of the field sets: no sampler and no clocks file, the profile runs.
FAKE_SMI_REFUSE='clocks\.sm' run none profile-sm summary
[[ ! -e $work/none/raw/profile-sm.clocks.csv ]] || fail "a clocks file without a field set"
[[ ! -s $FAKE_SMI_LOG ]] || fail "a sampler started without a field set"
grep -q '^# exit status: 0' "$work/none/raw/profile-sm.txt" || fail "without a sampler the profile did not run"
grep -q 'answers none of the clock field sets' "$work/none/log" || fail "no word of the missing samples"

# A call that samples nothing asks nvidia-smi for no clock fields.
run quiet summary
! grep -q 'clocks' "$FAKE_SMI_LOG.queries" || fail "clock fields probed in a call that samples nothing"
grep -q '^name,driver_version,memory.total$' "$FAKE_SMI_LOG.queries" || fail "the GPU was not asked its name"
echo "issue12_sampler_test: passed"
