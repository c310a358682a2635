# Shared helpers of bench/gpu/run.sh (sourced; it sets the variables these read).
# shellcheck shell=bash
# shellcheck disable=SC2154  # the options and the machine's answers are set by run.sh

# die MESSAGE: one line on stderr, exit 2 (a bad option or a missing input, before anything runs).
die() {
  echo "run.sh: $*" >&2
  exit 2
}

# --- the machine: what pipeplan reports ---------------------------------------------------------

# ask_pipeplan: `pipeplan env --json` into variables (gpu_name, gpu_entry, gpu_count, total_sms,
# memory_bytes, driver_version, the SM share of each emulated stage count; the manifest takes the
# CUDA and library versions from the same answer). Empty where pipeplan has no answer (no binary,
# no GPU, or none within 60 s: a wedged GPU): a dry run prints placeholders there, a real run
# refuses what needs them.
env_json=''
# shellcheck disable=SC2034  # set by printf -v from pipeplan's answer
gpu_name='' gpu_entry='' gpu_count=0 total_sms='' memory_bytes='' driver_version=''
declare -A sm_share=()
ask_pipeplan() {
  if [[ -x $pipeplan ]]; then
    local status=0
    env_json=$(timeout -k 5 60 "$pipeplan" env --json 2> /dev/null) || status=$?
    if ((status != 0)); then env_json=''; fi
    if ((status == 124 || status == 137)); then
      echo "run.sh: pipeplan env --json gave no answer within 60 s (a wedged GPU?)" >&2
    fi
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
out = {"gpu_name": first.get("name", ""), "gpu_entry": first.get("gpu_entry", ""),
       "gpu_count": len(gpus), "total_sms": first.get("sms", ""),
       "memory_bytes": first.get("memory_bytes", ""),
       "driver_version": (env.get("cuda_module") or {}).get("kernel_driver")
                         or first.get("driver_version", "")}
for key, value in out.items():
    print(f"{key}\t{value}")
for share in first.get("emulate_sm_share") or []:
    print(f"share\t{share['stages']} {share['sms_per_stage']}")
PY
  )
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
# instantaneous power); none where it answers none.
clock_fields='' clock_probed=0
clock_command=()
probe_clocks() {
  ((clock_probed)) && return 0
  clock_probed=1
  local base=timestamp,utilization.gpu,clocks.sm fields
  if ((dry)); then
    clock_fields=$base,clocks.mem,power.draw.instant,temperature.gpu,clocks_event_reasons.active
  else
    # Each probe at most 60 s: a wedged GPU leaves the runs without samples, not hanging.
    for fields in \
      $base,clocks.mem,power.draw.instant,temperature.gpu,clocks_event_reasons.active \
      $base,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
      $base,power.draw; do
      if timeout -k 5 60 nvidia-smi --query-gpu="$fields" --format=csv,noheader > /dev/null 2>&1
      then
        clock_fields=$fields
        break
      fi
    done
    if [[ -z $clock_fields ]]; then
      echo "run.sh: nvidia-smi answers none of the clock field sets: no clock samples" >&2
    fi
  fi
  clock_command=(nvidia-smi --query-gpu="$clock_fields" "--format=csv,nounits" -lms "$clock_ms")
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

# record FILE CMD...: runs CMD for at most cap_s seconds (a group may set its own: bash scoping is
# dynamic) and never past the deadline (seconds_left), its output (stdout and stderr) in $out/FILE
# between a header (GPU, UTC date, command, environment) and its exit status and wall time; one
# line in index.txt and one in the manifest's command list. A dry run prints the command and runs
# none.
cap_s=300
record() {
  local name=$1
  shift
  local command
  command=$(portable "$@")
  if [[ -n ${clocks_to:-} ]]; then probe_clocks; fi
  if ((dry)); then
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
  if ((left < 10)); then
    echo "# skipped: the deadline ($deadline_s s) is near" >> "$file"
    printf '%-44s skipped (deadline)\n' "$name" >> "$out/index.txt"
    printf '%s\t%s\tskipped\t0\n' "$name" "$command" >> "$commands_tsv"
    echo "[skipped] $name"
    failures=$((failures + 1))
    return 124
  fi
  local began=$SECONDS status=0 sampler=''
  if [[ -n ${clocks_to:-} && -n $clock_fields ]]; then
    "${clock_command[@]}" > "$out/$clocks_to.clocks.csv" 2>&1 &
    sampler=$!
  fi
  timeout --kill-after=5 "$left" "$@" >> "$file" 2>&1 || status=$?
  if [[ -n $sampler ]]; then
    kill "$sampler" 2> /dev/null || true
    wait "$sampler" 2> /dev/null || true
  fi
  local took=$((SECONDS - began))
  echo "# exit status: $status$( ((status == 124)) && echo ' (timed out)'), wall $took s" >> "$file"
  printf '%-44s exit %-3s %4s s\n' "$name" "$status" "$took" >> "$out/index.txt"
  printf '%s\t%s\t%s\t%s\n' "$name" "$command" "$status" "$took" >> "$commands_tsv"
  echo "[$status] $name (${took} s)"
  if ((status != 0)); then failures=$((failures + 1)); fi
  return "$status"
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
# (pipeplan env --json), the commit, the date, the options and every command with its exit
# status and wall time, in order.
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
    "${nccl_missing//"$repo/"/}" "${options_used[@]}" << 'PY'
import json, sys
path, commands_tsv, env_json, commit, build_info, date, whats, pipeplan = sys.argv[1:9]
nccl_dir, nccl_source, nccl_missing = sys.argv[9:12]
options = sys.argv[12:]
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
}
with open(path, "w", encoding="utf-8") as f:
    json.dump(manifest, f, indent=2)
    f.write("\n")
PY
}
