# Shared helpers of bench/gpu/run.sh (sourced; it sets the variables these read).
# shellcheck shell=bash
# shellcheck disable=SC2154  # the options and the machine's answers are set by run.sh

# die MESSAGE: one line on stderr, exit 2 (a bad option or a missing input, before anything runs).
die() {
  echo "run.sh: $*" >&2
  exit 2
}

# --- probes: short questions to the machine, never past the deadline ----------------------------

# probe_limit CAP: the seconds a probe may take: seconds_left with CAP for cap_s (CAP, and with
# --deadline-s no more than what is left of it less 20 s); 0 where nothing is left.
probe_limit() {
  local limit
  limit=$(cap_s=$1 seconds_left)
  ((limit > 0)) || limit=0
  echo "$limit"
}

# probe CAP CMD...: CMD (a program, not a function) for at most probe_limit CAP seconds, killed
# 2 s after that; status 124 without running it where no time is left. A hung tool (nvidia-smi or
# a driver call on a wedged GPU) costs at most that, never the run's deadline.
probe() {
  local limit
  limit=$(probe_limit "$1")
  shift
  ((limit > 0)) || return 124
  timeout -k 2 "$limit" "$@"
}

# alive PID: the process runs (a zombie, ended and not yet waited for, does not).
alive() {
  kill -0 "$1" 2> /dev/null || return 1
  [[ ! -r /proc/$1/status ]] || ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2> /dev/null
}

# stop_process PID [SECONDS]: SIGTERM, at most SECONDS (5) for it to end, then SIGKILL; waited
# for only once it has ended, so that a process stuck in the driver cannot hold the run.
stop_process() {
  local pid=$1 tenths=$((${2:-5} * 10)) n
  kill "$pid" 2> /dev/null || true
  for ((n = 0; n < tenths; ++n)); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then
    kill -9 "$pid" 2> /dev/null || true
    for ((n = 0; n < 10; ++n)); do
      alive "$pid" || break
      sleep 0.1
    done
  fi
  if ! alive "$pid"; then wait "$pid" 2> /dev/null || true; fi
}

# --- the machine: what pipeplan reports ---------------------------------------------------------

# ask_pipeplan: `pipeplan env --json` into variables (gpu_name, gpu_entry, gpu_count, total_sms,
# memory_bytes, driver_version, the SM share of each emulated stage count; the manifest takes the
# CUDA and library versions from the same answer). Empty where pipeplan has no answer (no binary,
# no GPU, or none within 60 s or what --deadline-s leaves: a wedged GPU): a dry run prints
# placeholders there, a real run refuses what needs them. gpu_entry is empty, not "none", where
# pipeplan matches the GPU to no gpus.json entry.
env_json=''
# shellcheck disable=SC2034  # set by printf -v from pipeplan's answer
gpu_name='' gpu_entry='' gpu_count=0 total_sms='' memory_bytes='' driver_version=''
declare -A sm_share=()
ask_pipeplan() {
  if [[ -x $pipeplan ]]; then
    local status=0 limit errors
    limit=$(probe_limit 60)
    errors=$(mktemp "${TMPDIR:-/tmp}/pipeplan-env.XXXXXX")
    env_json=$(probe 60 "$pipeplan" env --json 2> "$errors") || status=$?
    if ((status != 0)); then env_json=''; fi
    if ((limit == 0)); then
      echo "run.sh: pipeplan env --json not asked: --deadline-s $deadline_s leaves no time" >&2
    elif ((status == 124 || status == 137)); then
      echo "run.sh: pipeplan env --json gave no answer within $limit s (a wedged GPU?)" >&2
    elif ((status != 0)); then
      # It did not start or failed (a library the loader did not find): its own words, since
      # everything that needs the GPU fails after it.
      echo "run.sh: $pipeplan env --json failed (exit status $status): $(head -c 400 "$errors" |
        tr '\n' ' ')" >&2
    fi
    rm -f "$errors"
  fi
  [[ -n $env_json ]] || return 0
  local key value
  while IFS=$'\t' read -r key value; do
    case $key in
      share) sm_share[${value%% *}]=${value#* } ;;
      *) printf -v "$key" '%s' "$value" ;;
    esac
  done < <(python3 - "$env_json" << 'PY'
import json, sys
try:
    env = json.loads(sys.argv[1])
except ValueError:
    sys.exit(0)
gpus = env.get("gpus") or []
first = gpus[0] if gpus else {}
entry = first.get("gpu_entry") or ""
out = {"gpu_name": first.get("name", ""), "gpu_entry": "" if entry == "none" else entry,
       "gpu_count": len(gpus), "total_sms": first.get("sms", ""),
       "memory_bytes": first.get("memory_bytes", ""),
       "driver_version": (env.get("cuda_module") or {}).get("kernel_driver")
                         or first.get("driver_version", "")}
for key, value in out.items():
    print(f"{key}\t{value}")
module = env.get("cuda_module") or {}
if gpus and module and not module.get("loaded", True):
    # The GPU is there but the CUDA module did not load (a missing libnccl or cuDNN): say why.
    print(f"run.sh: pipeplan's CUDA module did not load: {module.get('error', '?')}",
          file=sys.stderr)
for share in first.get("emulate_sm_share") or []:
    print(f"share\t{share['stages']} {share['sms_per_stage']}")
PY
  )
}

# gpus_json ARG...: answers from profiles/gpus.json (the entries pipeplan knows, with their
# aliases), by python3: `known KEY` prints the entries (but cpu) and exits 1 where KEY is neither
# one nor an alias of one; `mismatch ENTRY OPTION FILE...` prints "OPTION<tab>FILE<tab>GPU" for
# each profile measured on another GPU than ENTRY (as `pipeplan plan` compares them; a file that
# does not parse, or names no GPU, is left to pipeplan).
gpus_json() {
  python3 - "$PIPEPLAN_DATA_DIR/gpus.json" "$@" << 'PY'
import json, sys
try:
    with open(sys.argv[1], encoding="utf-8") as f:
        gpus = [g for g in json.load(f)["gpus"] if g.get("name") != "cpu"]
except (OSError, ValueError, KeyError, TypeError):
    gpus = []


def entry(key):
    key = (key or "").lower()
    for g in gpus:
        if key == g["name"] or key in (g.get("aliases") or []):
            return g["name"]
    return None


if sys.argv[2] == "known":
    print(" ".join(g["name"] for g in gpus))
    sys.exit(0 if entry(sys.argv[3]) else 1)
wanted = entry(sys.argv[3]) or sys.argv[3]
args = sys.argv[4:]
for option, path in zip(args[::2], args[1::2]):
    try:
        with open(path, encoding="utf-8") as f:
            gpu = json.load(f).get("gpu")
    except (OSError, ValueError, AttributeError):
        continue
    if isinstance(gpu, str) and gpu and (entry(gpu) or gpu.lower()) != wanted:
        print(f"{option}\t{path}\t{gpu}")
PY
}

# share_for STAGES: the SMs of one emulated stage, as pipeplan reports it (--sm-share overrides).
share_for() {
  if [[ -n $opt_sm_share ]]; then
    echo "$opt_sm_share"
  elif [[ -n ${sm_share[$1]:-} ]]; then
    echo "${sm_share[$1]}"
  elif ((dry)); then
    echo "SHARE$1"
  else
    echo "run.sh: pipeplan env --json gives no SM share for $1 emulated stages (a GPU? --sm-share N)" >&2
    return 1
  fi
}

# --- the NCCL the binaries load ------------------------------------------------------------------

# choose_nccl: the folder of the libnccl.so.2 to load, the first found of: --nccl-lib-dir,
# $PIPEPLAN_NCCL_LIB_DIR, .deps/nccl/lib (tools/dev/fetch_nccl.sh). Sets nccl_dir and
# nccl_source (empty: none of them; the binaries then load the NCCL their own search finds: a
# staged copy's the CUDA toolkit's or python3's site-packages', a build's its link-time one). A
# folder named by the option or the variable without libnccl.so.2 is not used: nccl_missing says
# why (a line in index.txt, the manifest's nccl_missing), the nccl WHAT stops on it, and the
# other WHATs load the NCCL the binaries find themselves.
nccl_dir='' nccl_source='' nccl_missing=''
choose_nccl() {
  if [[ -n $opt_nccl_lib_dir ]]; then
    nccl_dir=$opt_nccl_lib_dir nccl_source=--nccl-lib-dir
  elif [[ -n ${PIPEPLAN_NCCL_LIB_DIR:-} ]]; then
    nccl_dir=$PIPEPLAN_NCCL_LIB_DIR nccl_source=PIPEPLAN_NCCL_LIB_DIR
  elif [[ -f $repo/.deps/nccl/lib/libnccl.so.2 ]]; then
    nccl_dir=$repo/.deps/nccl/lib nccl_source=.deps/nccl/lib
  fi
  if [[ -n $nccl_dir && ! -f $nccl_dir/libnccl.so.2 && $dry != 1 ]]; then
    nccl_missing="$nccl_source: no libnccl.so.2 in '$nccl_dir'"
    nccl_dir=''
    return 0
  fi
  if [[ -n $nccl_dir && -d $nccl_dir ]]; then nccl_dir=$(cd "$nccl_dir" && pwd); fi
}

# use_nccl: the chosen NCCL's folder first on LD_LIBRARY_PATH (before a staged copy's folders).
use_nccl() {
  [[ -n $nccl_dir ]] || return 0
  export LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# nccl_loaded FILE: three lines, VERSION, PATH and NEW, from a `pipeplan env --json` output
# (libraries[] libnccl; NEW 1 where the version is 2.30 or later, 0 where older or unknown); empty
# lines where it reports none.
nccl_loaded() {
  python3 - "$1" << 'PY'
import json, sys
try:
    with open(sys.argv[1], encoding="utf-8") as f:
        text = "".join(line for line in f if not line.startswith("#"))
    env = json.JSONDecoder().raw_decode(text[text.index("{"):])[0]
except (OSError, ValueError):
    env = {}
nccl = next((lib for lib in env.get("libraries") or [] if lib.get("name") == "libnccl"), {})
version, path = nccl.get("version") or "", nccl.get("path") or ""
try:
    new = tuple(int(part) for part in version.split(".")[:2]) >= (2, 30)
except ValueError:
    new = False
print(version, path, int(new), sep="\n")
PY
}

# --- libraries for a staged copy -----------------------------------------------------------------

# find_staged_libraries: for binaries from a staged copy (bench/gpu/stage.sh) on a machine whose
# CUDA libraries are not where the build machine's were: the CUDA toolkit's folders, then
# python3's site-packages (PyTorch's nvidia-* wheels hold cuDNN and NCCL), then wherever python3's
# `nvidia` namespace package is; NCCL only where choose_nccl found none (use_nccl puts that one
# first). Sets LD_LIBRARY_PATH for the binaries (python3 keeps its own environment) and
# PIPEPLAN_CUDNN_LIBRARY; the staged libstdc++ only where the machine's is older than the
# binaries need.
find_staged_libraries() {
  local site nvidia lib root path dir
  site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2> /dev/null || true)
  local -a roots=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib)
  if [[ -n $site && -d $site/nvidia ]]; then roots+=("$site/nvidia"); fi
  nvidia=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2> /dev/null || true)
  if [[ -n $nvidia && -d $nvidia && $nvidia != "$site/nvidia" ]]; then roots+=("$nvidia"); fi
  local -a dirs=()
  local cudnn=''
  # libnvrtc: cuDNN compiles some fused-attention engines at run time (not linked; found if there).
  for lib in libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libnccl.so.2 libcudnn.so.9 \
    libnvrtc.so.13; do
    if [[ $lib == libnccl.so.2 && -n $nccl_dir ]]; then continue; fi
    for root in "${roots[@]}"; do
      [[ -d $root ]] || continue
      path=$(find -L "$root" -name "$lib" 2> /dev/null | head -n 1 || true)
      [[ -n $path ]] || continue
      [[ $lib == libcudnn.so.9 ]] && cudnn=$path
      dir=$(dirname "$path")
      [[ " ${dirs[*]} " == *" $dir "* ]] || dirs+=("$dir")
      break
    done
  done
  local ld_path
  ld_path=$(IFS=:; echo "${dirs[*]}")
  if [[ -x $pipeplan ]] && ldd "$pipeplan" 2>&1 | grep -q "GLIBCXX.*not found"; then
    ld_path="$staged/lib${ld_path:+:$ld_path}"
  fi
  export LD_LIBRARY_PATH="$ld_path${original_ld_library_path:+:$original_ld_library_path}"
  if [[ -n $cudnn ]]; then export PIPEPLAN_CUDNN_LIBRARY=$cudnn; fi
  export CUDNN_FRONTEND_CUDART_LIB_NAME=libcudart.so.13
}

# --- recording -----------------------------------------------------------------------------------

# portable ARG...: the command with this machine's folders replaced: the output folder by {out},
# the repository by "." (the commands are run from the repository root).
portable() {
  local text
  text=$(printf '%q ' "$@")
  text=${text//"$out"/"{out}"}
  text=${text//"$repo/"/}
  echo "${text% }"
}

# GPU clocks and power beside the emulated runs and the SM-share profile (record with
# clocks_to=NAME): nvidia-smi every --clock-sample-ms into NAME.clocks.csv, so that a slowdown the
# contention model cannot explain can be told from the SM clock falling under sustained load. The
# first field set the driver answers (older drivers name the throttle reasons, or lack the
# instantaneous power); none where it answers none. Only the GPU the runs use is sampled
# (clock_gpu, `nvidia-smi -i`): the first entry of CUDA_VISIBLE_DEVICES, an index or a UUID,
# else 0; on a node, multi-gpu's runs sample their first GPU (stage 0's). Each output with
# samples says which GPU in its header ("# clocks:"), the manifest in clocks_gpu.
clock_gpu=${CUDA_VISIBLE_DEVICES-}
clock_gpu=${clock_gpu%%,*}
clock_gpu=${clock_gpu//[[:space:]]/}
clock_gpu_from=CUDA_VISIBLE_DEVICES
if [[ -z $clock_gpu ]]; then clock_gpu=0 clock_gpu_from=default; fi
clock_fields='' clock_probed=0
clock_command=()
probe_clocks() {
  ((clock_probed)) && return 0
  clock_probed=1
  local base=timestamp,utilization.gpu,clocks.sm fields status
  if ((dry)); then
    clock_fields=$base,clocks.mem,power.draw.instant,temperature.gpu,clocks_event_reasons.active
  else
    # Each probe at most 15 s and never past the deadline: a wedged GPU leaves the runs without
    # samples, not hanging; a probe that gets no answer ends the probing (the next would hang
    # alike).
    for fields in \
      $base,clocks.mem,power.draw.instant,temperature.gpu,clocks_event_reasons.active \
      $base,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
      $base,power.draw; do
      status=0
      probe 15 nvidia-smi -i "$clock_gpu" --query-gpu="$fields" --format=csv,noheader \
        > /dev/null 2>&1 || status=$?
      if ((status == 0)); then
        clock_fields=$fields
        break
      fi
      if ((status == 124 || status == 137)); then
        echo "run.sh: nvidia-smi gave no answer in time (a wedged GPU, or the deadline): no" \
          "clock samples" >&2
        break
      fi
    done
    if [[ -z $clock_fields && $status != 124 && $status != 137 ]]; then
      echo "run.sh: nvidia-smi answers none of the clock field sets: no clock samples" >&2
    fi
  fi
  clock_command=(nvidia-smi --query-gpu="$clock_fields" "--format=csv,nounits" -i "$clock_gpu"
    -lms "$clock_ms")
}

# seconds_left: the seconds record gives the next command: cap_s, and with --deadline-s no more
# than what is left of it less 20 s (the last command's output, the summary and the manifest are
# written after it). Under 10: record skips the command.
seconds_left() {
  local left=$cap_s
  if ((deadline_s > 0)); then
    left=$((deadline_s - (SECONDS - start_s) - 20))
    if ((left > cap_s)); then left=$cap_s; fi
  fi
  echo "$left"
}

# skip_near_deadline NAME COMMAND: NAME recorded as skipped, the deadline being near.
skip_near_deadline() {
  echo "# skipped: the deadline ($deadline_s s) is near" >> "$out/$1"
  printf '%-44s skipped (deadline)\n' "$1" >> "$out/index.txt"
  printf '%s\t%s\tskipped\t0\n' "$1" "$2" >> "$commands_tsv"
  echo "[skipped] $1"
  failures=$((failures + 1))
}

# record FILE CMD...: runs CMD for at most cap_s seconds (a group may set its own: bash scoping is
# dynamic) and never past the deadline (seconds_left), its output in $out/FILE between a header
# (GPU, UTC date, command, environment) and its exit status and wall time; one line in index.txt
# and one in the manifest's command list. A FILE named *.json gets CMD's standard output alone
# (what reads it, summary.py or `pipeplan calibrate`, parses it as JSON after the '#' lines): its
# standard error goes to the sibling *.err (removed where empty; a "# stderr:" line names it);
# other files get both. A dry run prints the command and runs none.
cap_s=300
# The command running (for on_signal): the timeout around it, its output, its sampler.
running='' running_name='' running_command='' running_sampler='' running_began=0
record() {
  local name=$1
  shift
  local command
  command=$(portable "$@")
  if ((dry)); then
    if [[ -n ${clocks_to:-} ]]; then probe_clocks; fi
    printf '%q ' "$@"
    if [[ -n ${clocks_to:-} && -n $clock_fields ]]; then
      printf '(beside it: %s> %q)' "$(printf '%q ' "${clock_command[@]}")" \
        "$out/$clocks_to.clocks.csv"
    fi
    echo
    return 0
  fi
  local file="$out/$name" left
  left=$(seconds_left)
  {
    echo "# gpu: $gpu_line"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# command: $command"
    echo "# environment: $(environment_line)"
  } > "$file"
  if ((deadline_s > 0 && left < 10)); then
    skip_near_deadline "$name" "$command"
    return 124
  fi
  if [[ -n ${clocks_to:-} ]]; then
    probe_clocks
    left=$(seconds_left)  # the probes may have taken some of it
    if ((deadline_s > 0 && left < 10)); then
      skip_near_deadline "$name" "$command"
      return 124
    fi
    if [[ -n $clock_fields ]]; then
      echo "# clocks: nvidia-smi -i $clock_gpu every $clock_ms ms: $clocks_to.clocks.csv" >> "$file"
    fi
  fi
  local errors=$file
  if [[ $name == *.json ]]; then errors="$out/${name%.json}.err"; fi
  local began=$SECONDS status=0 sampler=''
  if [[ -n ${clocks_to:-} && -n $clock_fields ]]; then
    "${clock_command[@]}" > "$out/$clocks_to.clocks.csv" 2>&1 &
    sampler=$!
  fi
  # In the background, waited for: a signal to run.sh (on_signal) is handled at once.
  if [[ $errors == "$file" ]]; then
    timeout --kill-after=5 "$left" "$@" >> "$file" 2>&1 &
  else
    timeout --kill-after=5 "$left" "$@" >> "$file" 2> "$errors" &
  fi
  running=$! running_name=$name running_command=$command running_sampler=$sampler
  running_began=$began
  wait "$running" || status=$?
  running=''
  if [[ -n $sampler ]]; then stop_process "$sampler"; fi
  if [[ $errors != "$file" ]]; then
    if [[ -s $errors ]]; then
      echo "# stderr: $(basename "$errors")" >> "$file"
    else
      rm -f "$errors"
    fi
  fi
  local took=$((SECONDS - began))
  echo "# exit status: $status$( ((status == 124)) && echo ' (timed out)'), wall $took s" >> "$file"
  printf '%-44s exit %-3s %4s s\n' "$name" "$status" "$took" >> "$out/index.txt"
  printf '%s\t%s\t%s\t%s\n' "$name" "$command" "$status" "$took" >> "$commands_tsv"
  echo "[$status] $name (${took} s)"
  if ((status != 0)); then failures=$((failures + 1)); fi
  return "$status"
}

# on_signal SIGNAL: run.sh stopped from outside (TERM, INT, HUP): the command running and its
# sampler are stopped (its output ends "# stopped: run.sh got SIGsignal"), summary.md (where the
# summary WHAT was asked for) and manifest.json are written with every command so far; exit 128
# + the signal's number.
stopped_by=''
on_signal() {
  local signal=$1 code=143
  trap - TERM INT HUP
  # The terminal or pipe run.sh writes to may be gone (a closed terminal, `run.sh | tee` stopped
  # with it): nothing written to it may end run.sh before the manifest is.
  trap '' PIPE
  case $signal in
    INT) code=130 ;;
    HUP) code=129 ;;
  esac
  stopped_by=SIG$signal
  if [[ -n $running ]]; then
    stop_process "$running" 10
    if [[ -n $running_sampler ]]; then stop_process "$running_sampler"; fi
    local took=$((SECONDS - running_began))
    echo "# stopped: run.sh got $stopped_by, wall $took s" >> "$out/$running_name"
    printf '%-44s stopped (%s) %4s s\n' "$running_name" "$stopped_by" "$took" >> "$out/index.txt"
    printf '%s\t%s\t%s\t%s\n' "$running_name" "$running_command" "$code" "$took" >> "$commands_tsv"
  fi
  echo "run.sh: stopped by $stopped_by" >> "$out/index.txt"
  # The summary asked for, of what ran (it reads the folder in about a second; 15 s at most).
  if [[ " ${whats[*]} " == *" summary "* ]]; then
    timeout -k 2 15 python3 "$here/summary.py" "$out" > "$out/summary.md" 2>&1 || true
  fi
  write_manifest
  echo "run.sh: stopped by $stopped_by" >&2 || true
  exit "$code"
}

# scratch_file: a new empty regular file in the output folder's scratch ($out/.scratch, removed
# when run.sh ends), for what a probe has pipeplan write and nothing reads.
scratch_file() {
  mkdir -p "$out/.scratch"
  mktemp "$out/.scratch/probe.XXXXXX"
}

# not_run NAME REASON: a command this machine cannot run, recorded as a failure: $out/NAME holds
# the header and "# not run: REASON", index.txt and the manifest list it as not run (skipped).
not_run() {
  local name=$1 reason=$2
  if ((dry)); then
    echo "# not run here: $name ($reason)"
    return 0
  fi
  {
    echo "# gpu: $gpu_line"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# not run: $reason"
  } > "$out/$name"
  printf '%-44s not run (%s)\n' "$name" "$reason" >> "$out/index.txt"
  printf '%s\t%s\tskipped\t0\n' "$name" "(not run: $reason)" >> "$commands_tsv"
  echo "[not run] $name: $reason"
  failures=$((failures + 1))
}

# note TEXT: a line for the reader (index.txt and stdout; stderr too when it is a problem).
note() {
  echo "$*"
  if ((!dry)); then echo "$*" >> "$out/index.txt"; fi
}

# The pipeplan environment switches set for this invocation, as the headers record them.
environment_line() {
  local line switch
  line="PIPEPLAN_DATA_DIR=$(portable "$PIPEPLAN_DATA_DIR")"
  for switch in LD_LIBRARY_PATH PIPEPLAN_CUDA_PLUGIN PIPEPLAN_CUDNN_LIBRARY PIPEPLAN_COPY_WAIT \
    PIPEPLAN_DEVICE_COPY CUDA_DEVICE_MAX_CONNECTIONS NCCL_MULTI_RANK_GPU_ENABLE \
    PIPEPLAN_REQUIRE_NCCL PIPEPLAN_TEST_FAULT; do
    if [[ -n ${!switch:-} ]]; then line+=" $switch=$(portable "${!switch}")"; fi
  done
  echo "$line"
}

# write_manifest: manifest.json in the output folder: the GPU, driver, CUDA and library versions
# (pipeplan env --json), the gpus.json entry the commands used and where it came from, the GPU
# the clocks were sampled on, the commit, the date, the options and every command with its exit
# status and wall time, in order; the signal that stopped run.sh, if one did.
write_manifest() {
  local commit
  commit=$(git -C "$repo" rev-parse HEAD 2> /dev/null || echo '')
  if [[ -n $commit ]] && ! git -C "$repo" diff --quiet HEAD 2> /dev/null; then
    commit+=" (+ uncommitted changes: git diff HEAD sha256"
    commit+=" $(git -C "$repo" diff HEAD | sha256sum | cut -c 1-16))"
  fi
  local build_info=''
  [[ -n $staged && -f $staged/BUILD_INFO ]] && build_info=$(sed -n 's/^commit: //p' "$staged/BUILD_INFO")
  local chosen_nccl=''
  [[ -n $nccl_dir ]] && chosen_nccl=$(portable "$nccl_dir")
  python3 - "$out/manifest.json" "$commands_tsv" "$env_json" "$commit" "$build_info" \
    "$run_date" "${whats[*]}" "$(portable "$pipeplan")" "$chosen_nccl" "$nccl_source" \
    "${nccl_missing//"$repo/"/}" "${opt_gpu:-$gpu_entry}" "$opt_gpu" "$clock_gpu" \
    "$clock_gpu_from" "$stopped_by" "${options_used[@]}" << 'PY'
import json, sys
path, commands_tsv, env_json, commit, build_info, date, whats, pipeplan = sys.argv[1:9]
nccl_dir, nccl_source, nccl_missing = sys.argv[9:12]
gpu_used, given_gpu, clock_gpu, clock_gpu_from, stopped_by = sys.argv[12:17]
options = sys.argv[17:]
try:
    env = json.loads(env_json) if env_json else {}
except ValueError:
    env = {}
gpus = env.get("gpus") or []
first = gpus[0] if gpus else {}
libraries = env.get("libraries") or []

def library(word):
    for entry in libraries:
        if word in str(entry.get("name", "")).lower():
            return entry
    return {}


def version(word):
    return library(word).get("version")

commands = []
with open(commands_tsv, encoding="utf-8") as f:
    for line in f:
        name, command, status, wall = line.rstrip("\n").split("\t")
        commands.append({"output": name, "command": command,
                         "exit_status": None if status == "skipped" else int(status),
                         "skipped": status == "skipped", "wall_s": int(wall)})
manifest = {
    "gpu": first.get("name"), "gpu_entry": first.get("gpu_entry"), "gpus": len(gpus),
    "gpu_used": {"entry": gpu_used or None,
                 "from": "--gpu" if given_gpu else "pipeplan env --json"},
    "clocks_gpu": {"id": clock_gpu, "from": clock_gpu_from},
    "sms": first.get("sms"), "memory_bytes": first.get("memory_bytes"),
    "compute_capability": first.get("compute_capability"),
    "driver": (env.get("cuda_module") or {}).get("kernel_driver"),
    "cuda_driver_api": first.get("driver_version"),
    "cuda_runtime": first.get("runtime_version"),
    "cudnn": version("cudnn"), "nccl": version("nccl"), "cublas": version("cublas"),
    "nccl_path": library("nccl").get("path"),
    "nccl_chosen": {"folder": nccl_dir, "from": nccl_source} if nccl_dir else None,
    "nccl_missing": nccl_missing or None,
    "libraries": libraries, "pipeplan": env.get("pipeplan"),
    "commit": commit or None, "staged_commit": build_info or None, "date": date,
    "what": whats.split(), "options": options, "pipeplan_binary": pipeplan,
    "commands_run_from": "the repository root; {out} is this folder",
    "commands": commands,
    "stopped_by": stopped_by or None,
}
with open(path, "w", encoding="utf-8") as f:
    json.dump(manifest, f, indent=2)
    f.write("\n")
PY
}
