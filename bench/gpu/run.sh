#!/usr/bin/env bash
# pipeplan's GPU benchmark suite: measures on this machine's GPUs what pipeplan predicts, from a
# normal build (build/) or a staged copy of the binaries (bench/gpu/stage.sh). bench/gpu/README.md
# says what each WHAT measures and how long it takes.
#
# Usage: bash bench/gpu/run.sh [OPTION...] WHAT...
#
# WHAT (in the order given):
#   env         the GPU, driver and libraries (pipeplan env --json, nvidia-smi, ldd)
#   tests       the GPU test suite (pipeplan_cuda_tests), one process per test suite
#   flash       the fused-attention tests alone
#   block       one LLaMA-7B block's MFU, pipeplan (bench_block) beside PyTorch (torch_block.py)
#   profile     the whole-GPU profile of LLaMA-7B (pipeplan profile --backend cuda)
#   step        one stage on the whole GPU, planned from that profile and run: the step with
#               its optimizer and each device's peak memory, predicted against measured; then
#               pipeplan bpipe's verdict from the same profile (the optimizer in every step)
#   profile-sm  the profile of the emulated stages: the --layers model at one stage's SM share
#   pipelines   emulated pipelines on one GPU, predicted (plan) against measured (run --emulate)
#   predict     1F1B-2bp and ZB-V at 2P from the profile as measured, then again after
#               pipeplan calibrate fit on other schedules' runs (GPipe, interleaved, ZB-H1)
#   pairs       overlapped pairs on two streams: dualpipe-v beside zb-v, and dualpipe, at m = 2P,
#               planned from the stages' profile (its measured overlap efficiency) and run
#   nccl        NCCL on one GPU (NCCL 2.30+, checked first): the --nccl-plans at m = 2P run with
#               device-local copies, over NCCL between emulated stages, and as P torchrun
#               processes sharing the GPU, losses, step times and transfers compared; the NCCL
#               GPU tests; a rank killed mid-step
#   bpipe       8 emulated stages: a micro-batch size that fits only with BPipe, run with it
#   stalls      where emulated stages wait with their inputs ready, per work-queue count
#   copies      device-local copies issued each way (PIPEPLAN_DEVICE_COPY)
#   waits       how receivers wait for a copy (PIPEPLAN_COPY_WAIT)
#   gemm        timed cuBLASLt answers per GEMM shape in the emulated pipelines
#   multi-gpu   P GPUs, one stage each (NCCL), predicted against measured; skipped on one GPU
#   summary     Markdown tables of everything in the output folder (bench/gpu/summary.py)
#
# Binaries:
#   --pipeplan BIN        default build/tools/pipeplan (its CUDA module is found next to it)
#   --tests-binary BIN    default build/tests/runtime/cuda/pipeplan_cuda_tests
#   --bench-block BIN     default build/bench/cuda/bench_block
#   --staged DIR          a staged copy (bench/gpu/stage.sh): DIR/bin/ holds all three, and the
#                         CUDA, cuDNN and NCCL libraries are looked for on this machine
#   --nccl-lib-dir DIR    the folder of the libnccl.so.2 to load, put first on LD_LIBRARY_PATH
#                         (default: $PIPEPLAN_NCCL_LIB_DIR, else .deps/nccl/lib where
#                         tools/dev/fetch_nccl.sh put one, else the binaries' own search); a
#                         folder without it stops the nccl WHAT alone (a line in index.txt)
# Output:
#   --out DIR             default bench/results/<gpu>/<YYYY-MM-DD>-<what...> (gpu: the gpus.json
#                         entry pipeplan matches, else the lower-case device name; -2, -3 ... if
#                         it exists); a folder named here must be new or empty
#   --dry-run             print every command, in order, run none (no GPU needed), exit 0
#   --deadline-s N        the run's end, N s after the start (0: none; default 0; decimal): each
#                         command is stopped 20 s before it, and one left under 10 s is skipped
#                         (recorded as such); the questions asked of the machine on the way
#                         (pipeplan env --json, nvidia-smi, the test listing) get no more than
#                         what is left; the summary is written whatever is left (at most 60 s
#                         more)
#   --test-cap-s N        seconds per test suite (150); other commands 120 to 300 s each
#   --clock-sample-ms N   nvidia-smi's sampling period beside runs and profiles (20); the GPU
#                         sampled is the first of CUDA_VISIBLE_DEVICES (index or UUID), else 0
# The GPU:
#   --gpu KEY             the gpus.json entry (h100-sxm, h100-pcie, h200, a100-80g or an alias)
#                         whose peak FLOP/s and memory profile, plan, run and bench_block use;
#                         default: the one pipeplan env --json matches to the device's name. A GPU
#                         it matches to none needs it (the run stops in one line without it); the
#                         output folder keeps the device's own name
# Model and runs:
#   --stages P            emulated stages, or GPUs for multi-gpu (4)
#   --layers N            LLaMA-7B blocks of the pipelines' model (8)
#   --seq N               sequence length (2048)
#   --steps N             steps per run; the report is the last and the median of 2..N (3)
#   --m LIST              micro-batch counts of pipelines and multi-gpu (P,2P)
#   --runs LIST           of 1f1b-fused 1f1b-2bp gpipe-fused gpipe-2bp auto (all five)
#   --sm-share N          SMs per emulated stage (default: what pipeplan env --json reports)
#   --sm-profile FILE     the stages' profile of pipelines, predict, pairs, nccl, stalls, copies,
#                         waits, gemm
#                         (default: the one profile-sm wrote earlier in this invocation)
#                         A profile given (--sm-profile, --gpu-profile, --bpipe-profile) must be
#                         of this GPU (the profiles/ ones are H200 ones): another is refused in
#                         one line
#   --gpu-profile FILE    the whole-GPU profile multi-gpu plans from (default: profile's, else
#                         multi-gpu profiles the --multi-gpu-model itself)
#   --multi-gpu-model M   the model of multi-gpu (llama-7b): a preset or a Hugging Face config.json
#                         that pipeplan reads (asked of pipeplan profile --analytic up front)
#   --step-layers N       LLaMA-7B blocks of step's model (32; 16 on a GPU of 100 GiB or less);
#                         not with --gpu-profile (step then plans the profile's model)
#   --step-steps N        steps of step's runs; the median of steps 2..N is compared (6)
#   --nccl-plans LIST     of gpipe-fused 1f1b-2bp interleaved-2bp zb-v-2bp 1f1b-fused-bpipe (all five)
#   --nccl-steps N        steps of each nccl run (5)
#   --gemm-candidates N   cuBLASLt answers timed per GEMM shape in every profile and run (1)
#   --gemm-tuned N        the answers gemm compares with the heuristic's first (8)
#   --bpipe-profile FILE  the 8-stage profile (bpipe skips profiling; stalls and copies need it)
#   --bpipe-stages N, --bpipe-layers N (8, 8), --bpipe-mbs LIST (2,4)
#   --stall-steps N (6), --connections LIST (default,32: CUDA_DEVICE_MAX_CONNECTIONS values)
#   --copy-modes LIST (memcpy,priority), --copies-limit SIZE (9.107GiB; a number and B, KiB, MiB,
#                         GiB, TiB, K, M, G, T, KB, MB, GB or TB)
#   --wait-m N (2P), --copy-waits LIST (blocking,stream,poll)
# Lists are comma-separated, none empty and no element empty. Numbers are decimal (no leading 0).
# A bad option or value: one line naming it, exit 2.
# shellcheck disable=SC2317  # the WHATs (and what they call) run indirectly: "what_$name"
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
here="$repo/bench/gpu"
start_s=$SECONDS
original_ld_library_path=${LD_LIBRARY_PATH:-}
# shellcheck source=bench/gpu/lib.sh
source "$here/lib.sh"

usage() {
  sed -n '2,/^# shellcheck/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

# --- options -------------------------------------------------------------------------------------

pipeplan='' tests_binary='' bench_block='' staged='' out='' dry=0 deadline_s=0 test_cap_s=150
clock_ms=20 stages=4 layers=8 seq=2048 steps=3 opt_m='' opt_runs='' opt_sm_share='' sm_profile=''
gpu_profile='' step_layers='' step_steps=6 nccl_plans='' nccl_steps=5 opt_nccl_lib_dir=''
multi_gpu_model=llama-7b gemm_candidates=1 gemm_tuned=8 bpipe_profile='' opt_gpu=''
bpipe_stages=8 bpipe_layers=8 bpipe_mbs=2,4 stall_steps=6 connections=default,32
copy_modes=memcpy,priority copies_limit=9.107GiB opt_wait_m='' copy_waits=blocking,stream,poll
whats=()
options_used=()
positive() {  # positive OPTION VALUE
  [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1: '$2' is not a positive integer"
}
# listed OPTION VALUE: VALUE is a comma-separated list, neither empty nor with an empty element.
listed() {
  [[ -n $2 ]] || die "$1: an empty list"
  [[ ,$2, != *,,* ]] || die "$1: '$2' has an empty element (a comma-separated list)"
}
# size OPTION VALUE: VALUE is a size pipeplan reads (a decimal number and a unit: 9.107GiB, 12G,
# 4096MiB), above 0.
size() {
  local unit='([kKmMgGtT]([iI]?[bB])?|[bB])'
  [[ $2 =~ ^[0-9]+(\.[0-9]+)?$unit$ && ! $2 =~ ^0+(\.0+)?$unit$ ]] ||
    die "$1: '$2' is not a size above 0 (e.g. 9.107GiB)"
}
while (($#)); do
  case $1 in
    --dry-run) dry=1; options_used+=("$1"); shift; continue ;;
    -h | --help) usage; exit 0 ;;
    --*)
      (($# >= 2)) || die "$1: needs a value"
      options_used+=("$1" "$2")
      case $1 in
        --pipeplan) pipeplan=$2 ;;
        --tests-binary) tests_binary=$2 ;;
        --bench-block) bench_block=$2 ;;
        --staged) staged=$2 ;;
        --out) out=$2 ;;
        --deadline-s) [[ $2 =~ ^(0|[1-9][0-9]*)$ ]] ||
          die "$1: '$2' is not a number of seconds (decimal, no leading 0)"
          deadline_s=$2 ;;
        --test-cap-s) positive "$1" "$2"; test_cap_s=$2 ;;
        --clock-sample-ms) positive "$1" "$2"; clock_ms=$2 ;;
        --gpu) opt_gpu=$2 ;;
        --stages) positive "$1" "$2"; stages=$2 ;;
        --layers) positive "$1" "$2"; layers=$2 ;;
        --seq) positive "$1" "$2"; seq=$2 ;;
        --steps) positive "$1" "$2"; steps=$2 ;;
        --m) listed "$1" "$2"; opt_m=$2 ;;
        --runs) listed "$1" "$2"; opt_runs=$2 ;;
        --sm-share) positive "$1" "$2"; opt_sm_share=$2 ;;
        --sm-profile) sm_profile=$2 ;;
        --gpu-profile) gpu_profile=$2 ;;
        --multi-gpu-model) multi_gpu_model=$2 ;;
        --step-layers) positive "$1" "$2"; step_layers=$2 ;;
        --step-steps) positive "$1" "$2"; step_steps=$2 ;;
        --nccl-plans) listed "$1" "$2"; nccl_plans=$2 ;;
        --nccl-steps) positive "$1" "$2"; nccl_steps=$2 ;;
        --nccl-lib-dir) opt_nccl_lib_dir=$2 ;;
        --gemm-candidates) positive "$1" "$2"; gemm_candidates=$2 ;;
        --gemm-tuned) positive "$1" "$2"; gemm_tuned=$2 ;;
        --bpipe-profile) bpipe_profile=$2 ;;
        --bpipe-stages) positive "$1" "$2"; bpipe_stages=$2 ;;
        --bpipe-layers) positive "$1" "$2"; bpipe_layers=$2 ;;
        --bpipe-mbs) listed "$1" "$2"; bpipe_mbs=$2 ;;
        --stall-steps) positive "$1" "$2"; stall_steps=$2 ;;
        --connections) listed "$1" "$2"; connections=$2 ;;
        --copy-modes) listed "$1" "$2"; copy_modes=$2 ;;
        --copies-limit) size "$1" "$2"; copies_limit=$2 ;;
        --wait-m) positive "$1" "$2"; opt_wait_m=$2 ;;
        --copy-waits) listed "$1" "$2"; copy_waits=$2 ;;
        *) die "unknown option '$1' (--help lists them)" ;;
      esac
      shift 2 ;;
    -*) die "unknown option '$1' (--help lists them)" ;;
    *)
      case $1 in
        env | tests | flash | block | profile | step | profile-sm | pipelines | predict | pairs | \
          nccl | bpipe | stalls | copies | waits | gemm | multi-gpu | summary) whats+=("$1") ;;
        *) die "unknown WHAT '$1' (env tests flash block profile step profile-sm pipelines predict pairs nccl bpipe stalls copies waits gemm multi-gpu summary)" ;;
      esac
      shift ;;
  esac
done
((${#whats[@]} > 0)) || { usage >&2; exit 2; }

# The lists' elements (each list checked by listed as it was given), checked before anything runs.
IFS=, read -r -a ms <<< "${opt_m:-$stages,$((2 * stages))}"
for m in "${ms[@]}"; do positive --m "$m"; done
IFS=, read -r -a runs <<< "${opt_runs:-1f1b-fused,1f1b-2bp,gpipe-fused,gpipe-2bp,auto}"
for run in "${runs[@]}"; do
  case $run in
    1f1b-fused | 1f1b-2bp | gpipe-fused | gpipe-2bp | auto) ;;
    *) die "--runs: unknown run '$run' (1f1b-fused 1f1b-2bp gpipe-fused gpipe-2bp auto)" ;;
  esac
done
IFS=, read -r -a bpipe_sizes <<< "$bpipe_mbs"
for mbs in "${bpipe_sizes[@]}"; do positive --bpipe-mbs "$mbs"; done
IFS=, read -r -a connection_counts <<< "$connections"
for conn in "${connection_counts[@]}"; do
  [[ $conn == default || $conn =~ ^[1-9][0-9]*$ ]] ||
    die "--connections: '$conn' is neither 'default' nor a positive integer"
done
# one_of OPTION WORD VALUE ALLOWED...: VALUE is one of ALLOWED, or the run stops naming OPTION.
one_of() {
  local option=$1 word=$2 value=$3
  shift 3
  local allowed
  for allowed in "$@"; do [[ $value == "$allowed" ]] && return 0; done
  die "$option: unknown $word '$value' ($*)"
}
IFS=, read -r -a copy_mode_list <<< "$copy_modes"
for mode in "${copy_mode_list[@]}"; do one_of --copy-modes mode "$mode" memcpy priority overlap; done
IFS=, read -r -a copy_wait_list <<< "$copy_waits"
for wait in "${copy_wait_list[@]}"; do one_of --copy-waits wait "$wait" blocking poll stream; done
wait_m=${opt_wait_m:-$((2 * stages))}
nccl_plans=${nccl_plans:-gpipe-fused,1f1b-2bp,interleaved-2bp,zb-v-2bp,1f1b-fused-bpipe}
IFS=, read -r -a nccl_plan_list <<< "$nccl_plans"
for entry in "${nccl_plan_list[@]}"; do
  one_of --nccl-plans plan "$entry" gpipe-fused 1f1b-2bp interleaved-2bp zb-v-2bp 1f1b-fused-bpipe
done
# Paths named relative to where run.sh was started are made absolute (run.sh runs from the
# repository root), then checked.
absolute() { [[ -z $1 || $1 == /* ]] && echo "$1" || echo "$OLDPWD/$1"; }
if [[ ${OLDPWD:-$repo} != "$repo" ]]; then
  sm_profile=$(absolute "$sm_profile") gpu_profile=$(absolute "$gpu_profile")
  bpipe_profile=$(absolute "$bpipe_profile") out=$(absolute "$out") staged=$(absolute "$staged")
  opt_nccl_lib_dir=$(absolute "$opt_nccl_lib_dir")
  pipeplan=$(absolute "$pipeplan") tests_binary=$(absolute "$tests_binary")
  bench_block=$(absolute "$bench_block")
  # --multi-gpu-model: a config file (a path, or a name ending in .json), not a preset's name.
  if [[ $multi_gpu_model == */* || $multi_gpu_model == *.json ]]; then
    multi_gpu_model=$(absolute "$multi_gpu_model")
  fi
fi
for option in sm gpu bpipe; do
  file=${option}_profile
  file=${!file}
  [[ -z $file || -f $file || $dry == 1 ]] || die "--$option-profile: no file '$file'"
done
# step plans the model of a --gpu-profile as it is: --step-layers would be ignored.
if [[ -n $step_layers && -n $gpu_profile ]]; then
  die "--step-layers: not with --gpu-profile (step plans the profile's own model; leave" \
    "--gpu-profile out to profile $step_layers blocks here)"
fi
export PIPEPLAN_DATA_DIR="$repo/profiles"  # gpus.json
export PYTHONDONTWRITEBYTECODE=1  # summary.py's imports leave no __pycache__ in the checkout
if [[ -n $opt_gpu ]]; then
  known=$(gpus_json known "$opt_gpu") || die "--gpu: '$opt_gpu' is not a gpus.json entry ($known)"
fi
# An output folder named by --out is new or empty: summary.py reads everything in it.
if [[ -n $out && -e $out ]]; then
  [[ -d $out ]] || die "--out: '$out' is not a folder"
  [[ -z $(ls -A "$out") ]] || die "--out: '$out' is not empty (name a new or empty folder)"
fi

# --- binaries -------------------------------------------------------------------------------------

if [[ -n $staged ]]; then
  [[ -d $staged/bin || $dry == 1 ]] || die "--staged: no folder '$staged/bin' (bench/gpu/stage.sh makes it)"
  [[ -d $staged ]] && staged=$(cd "$staged" && pwd)
  pipeplan=${pipeplan:-$staged/bin/pipeplan}
  tests_binary=${tests_binary:-$staged/bin/pipeplan_cuda_tests}
  bench_block=${bench_block:-$staged/bin/bench_block}
fi
pipeplan=${pipeplan:-$repo/build/tools/pipeplan}
tests_binary=${tests_binary:-$repo/build/tests/runtime/cuda/pipeplan_cuda_tests}
bench_block=${bench_block:-$repo/build/bench/cuda/bench_block}
if ((!dry)); then
  [[ -x $pipeplan ]] || die "--pipeplan: no executable '$pipeplan' (build it, or --staged DIR)"
fi
choose_nccl
if [[ -n $staged ]]; then
  export PIPEPLAN_CUDA_PLUGIN="$staged/bin/libpipeplan_cuda.so"
  # The tests that run the CLI, pointed at the staged binaries (their compiled-in paths are the
  # build machine's).
  export PIPEPLAN_TEST_BINARY="$pipeplan" PIPEPLAN_TEST_CUDA_MODULE="$staged/bin/libpipeplan_cuda.so"
  if ((!dry)); then find_staged_libraries; fi
else
  # The tests that run the CLI run this one (their compiled-in path is where the tests were
  # built, which a copied checkout or --pipeplan need not be).
  if [[ -x $pipeplan ]]; then
    pipeplan_dir=$(cd "$(dirname "$pipeplan")" && pwd)
    PIPEPLAN_TEST_BINARY="$pipeplan_dir/$(basename "$pipeplan")"
    export PIPEPLAN_TEST_BINARY
    if [[ -f $pipeplan_dir/libpipeplan_cuda.so ]]; then
      export PIPEPLAN_TEST_CUDA_MODULE="$pipeplan_dir/libpipeplan_cuda.so"
    fi
  fi
fi
use_nccl
# A --multi-gpu-model other than the default is one pipeplan reads (a preset, or a config.json it
# parses): asked of its analytic profile, which needs no GPU and takes milliseconds. Without a
# pipeplan (a dry run) or with no time left before --deadline-s, the question is not asked.
if [[ $multi_gpu_model != llama-7b && -x $pipeplan ]]; then
  model_scratch=$(mktemp -d "${TMPDIR:-/tmp}/pipeplan-model.XXXXXX")
  model_status=0
  model_answer=$(probe 30 "$pipeplan" profile --analytic --model "$multi_gpu_model" \
    -o "$model_scratch/profile.json" 2>&1 > /dev/null) || model_status=$?
  rm -rf "$model_scratch"
  if ((model_status != 0 && model_status != 124 && model_status != 137)); then
    model_answer=$(tail -n 1 <<< "$model_answer")
    model_answer=${model_answer#pipeplan: error: }
    die "--multi-gpu-model: ${model_answer#--model: }"
  fi
fi

# --- the machine, the output folder ---------------------------------------------------------------

ask_pipeplan
gpu_line=${gpu_name:-"no GPU reported by pipeplan env --json"}
[[ -n $driver_version ]] && gpu_line+=", driver $driver_version"
[[ -n $memory_bytes ]] && gpu_line+=", $((memory_bytes / 1048576)) MiB"
[[ -n $opt_gpu ]] && gpu_line+=", gpus.json entry $opt_gpu (--gpu)"
# gpu_key names the output folder and the profiles measured: the gpus.json entry pipeplan matches
# to the device, else the device's name in lower case (--gpu does not rename them: results of
# another GPU are not filed as that entry's). plan_gpu is the entry the commands get: --gpu, else
# the matched one; gpu_flag passes --gpu to profile, run and bench_block, which otherwise take
# the entry from the device's name themselves.
gpu_key=${gpu_entry:-$(echo "${gpu_name:-unknown-gpu}" | tr '[:upper:]' '[:lower:]' |
  tr -cs 'a-z0-9' '-' | sed 's/^-//; s/-$//')}
plan_gpu=${opt_gpu:-$gpu_key}
gpu_flag=()
if [[ -n $opt_gpu ]]; then gpu_flag=(--gpu "$opt_gpu"); fi
# A GPU pipeplan matches to no gpus.json entry: the WHATs that profile, plan or run need --gpu.
unmatched=''
if [[ -n $gpu_name && -z $gpu_entry && -z $opt_gpu ]]; then
  for what in "${whats[@]}"; do
    case $what in env | tests | flash | summary) ;; *) unmatched=${unmatched:-$what} ;; esac
  done
fi
if [[ -n $unmatched ]]; then
  message="pipeplan matches '$gpu_name' to no gpus.json entry: pass --gpu KEY, the entry whose"
  message+=" peak and memory to use ($(gpus_json known none || true)), for $unmatched and the"
  message+=" other WHATs that profile, plan or run"
  if ((!dry)); then die "$message"; fi
  echo "# dry run: a real run stops here: $message"
fi
# The profiles given are this GPU's: another GPU's costs would be planned as this one's.
if [[ -n $opt_gpu || -n $gpu_entry ]]; then
  mismatched=$(gpus_json mismatch "$plan_gpu" --sm-profile "$sm_profile" \
    --gpu-profile "$gpu_profile" --bpipe-profile "$bpipe_profile" | head -n 1)
  if [[ -n $mismatched ]]; then
    IFS=$'\t' read -r option file measured_on <<< "$mismatched"
    case $option in
      --sm-profile)
        remedy="measure one here first: WHAT profile-sm (the WHATs after it plan from it)" ;;
      --gpu-profile) remedy="measure one here first: WHAT profile (or leave --gpu-profile out)" ;;
      *) remedy="leave it out: bpipe measures its own" ;;
    esac
    die "$option: $(portable "$file") was measured on $measured_on, this GPU is $plan_gpu:" \
      "$remedy"
  fi
fi
run_date=$(date -u +%Y-%m-%d)
if [[ -z $out ]]; then
  out="$repo/bench/results/$gpu_key/$run_date-$(IFS=-; echo "${whats[*]}")"
  if ((!dry)) && [[ -e $out ]]; then
    for ((n = 2; ; ++n)); do [[ -e $out-$n ]] || { out=$out-$n; break; }; done
  fi
fi
if ((!dry)); then
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
fi
commands_tsv=$(mktemp "${TMPDIR:-/tmp}/pipeplan-bench.XXXXXX")
# shellcheck disable=SC2016  # expanded when it runs
trap 'rm -f "$commands_tsv"; if ((!dry)) && [[ -d $out ]]; then rm -rf "$out/.scratch"; fi' EXIT
failures=0
gemm=()  # the GEMM algorithm choice, the same for every profile and run
if ((gemm_candidates != 1)); then gemm=(--gemm-candidates "$gemm_candidates"); fi
if ((dry)); then
  echo "# dry run: ${whats[*]} on ${gpu_name:-an unknown GPU}; output folder $out"
  if [[ -n $nccl_dir ]]; then echo "# NCCL: $nccl_dir ($nccl_source) first on LD_LIBRARY_PATH"; fi
else
  # The checkout's commit, else (a copied tree without .git) the one the staged binaries were
  # built from.
  index_commit=$(git -C "$repo" rev-parse --short HEAD 2> /dev/null || true)
  if [[ -z $index_commit && -n $staged && -f $staged/BUILD_INFO ]]; then
    index_commit="$(sed -n 's/^commit: \([0-9a-f]\{7\}\).*/\1/p' "$staged/BUILD_INFO") (staged)"
  fi
  echo "# run.sh ${whats[*]} on $gpu_line, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit" \
    "${index_commit:-?}, pipeplan $(portable "$pipeplan")" > "$out/index.txt"
  if [[ -n $nccl_missing ]]; then
    note "run.sh: $nccl_missing: not used; the nccl WHAT stops on it, the others load the NCCL" \
      "the binaries find" >&2
  fi
  # Stopped from outside: the command running is stopped, manifest.json still written.
  trap 'on_signal TERM' TERM
  trap 'on_signal INT' INT
  trap 'on_signal HUP' HUP
fi

# The LLaMA-7B-like model of the emulated pipelines: N blocks of LLaMA-7B (h 4096, 32 heads, ffn
# 11008, vocab 32000), Hugging Face config form.
write_model() {  # write_model FILE LAYERS
  ((dry)) && return 0
  cat > "$1" << JSON
{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": $2,
 "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
 "max_position_embeddings": $seq}
JSON
}
model="$out/llama-7b-blocks$layers.json"

# shellcheck source=bench/gpu/single.sh
source "$here/single.sh"
# shellcheck source=bench/gpu/pipelines.sh
source "$here/pipelines.sh"

for what in "${whats[@]}"; do
  "what_${what//-/_}"
done

if ((!dry)); then
  write_manifest
  echo "run.sh: $failures failed or skipped command(s); $(portable "$out"): index.txt, manifest.json"
fi
exit $((failures > 0 && !dry ? 1 : 0))
