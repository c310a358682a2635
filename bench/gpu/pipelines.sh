# bench/gpu/run.sh's pipeline measurements: profile-sm, pipelines, bpipe, stalls, copies, waits,
# gemm (stages emulated on one GPU, each in a green context of its SM share) and multi-gpu (one
# stage per GPU). Sourced; the variables are run.sh's.
# shellcheck shell=bash
# shellcheck disable=SC2154,SC2317,SC2034  # run.sh's variables; record reads cap_s

what_profile_sm() {
  local share
  share=$(share_for "$stages") || { failures=$((failures + 1)); return 0; }
  write_model "$model" "$layers"
  sm_profile="$out/$gpu_key-llama-7b-blocks$layers-sm$share.measured.json"
  clocks_to=profile-sm record profile-sm.txt "$pipeplan" profile --backend cuda "${gpu_flag[@]}" \
    --model "$model" --seq "$seq" --mbs 1,2,4 --attention flash --max-concat 8 \
    --sm-partition "$share" "${gemm[@]}" -o "$sm_profile" || true
}

common=()
run_env=()        # a prefix for `pipeplan run` (env CUDA_DEVICE_MAX_CONNECTIONS=N ...)
emulate=(--emulate "$stages")
run_steps=$steps
set_common() {
  common=(--profile "$sm_profile" --gpu "$plan_gpu" --stages "$stages" --seq "$seq")
}

# run_plan NAME PLAN-ARGS...: plan, run (JSON report and trace, the GPU's clocks beside it), diff.
run_plan() {
  local name=$1
  shift
  local plan="$out/$name.plan.json"
  record "$name.plan.txt" "$pipeplan" plan "${common[@]}" "$@" -o "$plan" || return 0
  clocks_to=$name record "$name.run.json" "${run_env[@]}" "$pipeplan" run "$plan" --backend cuda \
    "${gpu_flag[@]}" "${emulate[@]}" --steps "$run_steps" "${gemm[@]}" --json \
    --trace "$out/$name.trace.json" || return 0
  record "$name.diff.txt" "$pipeplan" diff "$plan" "$out/$name.trace.json" --top 15 || true
}

# traced PREFIX...: the runs, one a line, whose PREFIX.plan.json and PREFIX.trace.json exist
# (every one in a dry run). A run refused, out of memory or timed out leaves none, and `pipeplan
# calibrate` refuses a set holding such a run as a whole.
traced() {
  local prefix
  for prefix in "$@"; do
    if ((dry)) || [[ -s $prefix.plan.json && -s $prefix.trace.json ]]; then echo "$prefix"; fi
  done
}

need_profile() {
  if [[ -z $sm_profile || ($dry != 1 && ! -s $sm_profile) ]]; then
    note "run.sh: $1 needs the stages' profile: profile-sm earlier in this invocation, or --sm-profile FILE" >&2
    failures=$((failures + 1))
    return 1
  fi
  set_common
}

# The schedules of --runs at each m of --m (PREFIX names them, e.g. "gpus4-").
schedule_runs() {
  local prefix=$1 m run
  for m in "${ms[@]}"; do
    for run in "${runs[@]}"; do
      if [[ $run == auto ]]; then
        run_plan "${prefix}auto-m$m" --schedule auto --backward 2bp --microbatches "$m"
      else
        run_plan "$prefix${run%-*}-m$m-${run#*-}" --schedule "${run%-*}" \
          --backward "${run#*-}" --microbatches "$m"
      fi
    done
  done
}

what_pipelines() {
  need_profile pipelines || return 0
  local cap_s=120
  schedule_runs ""
}

# Predicted before any run, then calibrated: from the stages' profile as the profiler wrote it
# (its contention and sustained-load model measured at profile time, nothing fitted to a run),
# 1F1B-2bp and ZB-V at m = 2P are planned and run; then other schedules (GPipe fused, interleaved
# 2bp, ZB-H1 2bp) at m = P are run, `pipeplan calibrate fit` fits the contention model to those
# alone (the ones that left a plan and a trace), and `calibrate eval` predicts each of the first
# two again from the calibrated profile, one command per run (predict-calibrate-eval-<run>.txt:
# its "before" column is the prediction from the profile as measured, its "after" the calibrated
# one; summary.py sets both against the runs' median of steps 2..N).
what_predict() {
  need_profile predict || return 0
  local cap_s=120 m2=$((2 * stages)) m1=$stages
  local measured=$sm_profile base
  base=$(basename "$measured" .json)
  base=${base%.measured}
  base=${base%.calibrated}
  local calibrated="$out/$base.predict.calibrated.json"
  run_plan "predict-1f1b-m$m2-2bp" --schedule 1f1b --backward 2bp --microbatches "$m2"
  run_plan "predict-zbv-m$m2" --schedule zb-v --backward 2bp --microbatches "$m2"
  local -a fit_runs=() predicted=()
  local entry schedule backward name run
  for entry in "gpipe fused" "interleaved 2bp" "zb-h1 2bp"; do
    read -r schedule backward <<< "$entry"
    name="fit-$schedule-m$m1-$backward"
    run_plan "$name" --schedule "$schedule" --backward "$backward" --microbatches "$m1"
    fit_runs+=("$out/$name")
  done
  mapfile -t fit_runs < <(traced "${fit_runs[@]}")
  if ((${#fit_runs[@]} == 0)); then
    not_run predict-calibrate-fit.txt "no fit-* run left a plan and a trace"
    return 0
  fi
  cap_s=300 record predict-calibrate-fit.txt "$pipeplan" calibrate fit --profile "$measured" \
    --sustained -o "$calibrated" "${fit_runs[@]}" || return 0
  # One eval per run: a run without a trace loses its own row, not the other's.
  mapfile -t predicted < <(traced "$out/predict-1f1b-m$m2-2bp" "$out/predict-zbv-m$m2")
  for run in "${predicted[@]}"; do
    name=$(basename "$run")
    record "predict-calibrate-eval-${name#predict-}.txt" "$pipeplan" calibrate eval \
      --profile "$calibrated" "$run" || true
  done
}

# Overlapped pairs (a forward beside another micro-batch's backward, the second on a side stream
# of the stage): dualpipe-v and zb-v on the same V layout, and bidirectional dualpipe (P even),
# at m = 2P, planned with the overlap efficiency the stages' profile measured.
# Then `calibrate fit --overlap` on the pair runs: the efficiency the pipelines show beside the one
# the profiler measured; and the dualpipe-v export checked against PyTorch's ScheduleDualPipeV.
what_pairs() {
  need_profile pairs || return 0
  local cap_s=120 m2=$((2 * stages))
  local -a pair_runs=("$out/pairs-dualpipev-m$m2-2bp")
  run_plan "pairs-dualpipev-m$m2-2bp" --schedule dualpipe-v --backward 2bp --microbatches "$m2"
  run_plan "pairs-zbv-m$m2-2bp" --schedule zb-v --backward 2bp --microbatches "$m2"
  if ((stages % 2 == 0)); then
    run_plan "pairs-dualpipe-m$m2-2bp" --schedule dualpipe --backward 2bp --microbatches "$m2"
    pair_runs+=("$out/pairs-dualpipe-m$m2-2bp")
  fi
  mapfile -t pair_runs < <(traced "${pair_runs[@]}")
  if ((${#pair_runs[@]})); then
    record pairs-calibrate-fit.txt "$pipeplan" calibrate fit --overlap --profile "$sm_profile" \
      -o "$out/$(basename "${sm_profile%.json}").pairs.json" "${pair_runs[@]}" || true
  else
    not_run pairs-calibrate-fit.txt "no dualpipe run left a plan and a trace"
  fi
  # dualpipe-v exported against PyTorch's own ScheduleDualPipeV at 2 to 16 ranks, where this
  # machine's python3 has torch (exit 77, recorded as such, where it has not). The test starts
  # pipeplan with the library path run.sh set, torch (torch_python.sh) with the one it was
  # started with.
  local torch_status=0
  record torch-dualpipe-v.txt env PIPEPLAN_TORCH_PYTHON="$here/torch_python.sh" \
    PIPEPLAN_TORCH_LD_LIBRARY_PATH="$original_ld_library_path" \
    python3 "$repo/tests/schedules/torch_dualpipe_v_test.py" "$pipeplan" "$repo" ||
    torch_status=$?
  # 77: no torch here, recorded as such in the output and index.txt, and not a failure.
  if ((torch_status == 77)); then failures=$((failures - 1)); fi
}

# NCCL on one GPU (several ranks on one GPU need NCCL 2.30 or later and
# NCCL_MULTI_RANK_GPU_ENABLE=1, set here). First the NCCL the runs will load, as `pipeplan env
# --json` reports it (nccl-env.json): older than 2.30, or none, stops the stage in one line. Then
# each plan of --nccl-plans at m = 2P, planned from the stages' profile, run --nccl-steps steps
# three ways: with device-local copies (--emulate P), over NCCL between the emulated stages
# (--transport nccl), and as P processes sharing the GPU under torchrun (else `python3 -m
# torch.distributed.run`; with neither, recorded as not run: a failure); each way's trace is
# `pipeplan diff --json`ed, and nccl-losses.txt compares the losses. Then the NCCL GPU tests, and
# a rank killed at its first node (nccl_rank_killed).
what_nccl() {
  if [[ -n $nccl_missing ]]; then
    note "nccl: stopped: $nccl_missing (name a folder that holds it, or none)" >&2
    failures=$((failures + 1))
    return 0
  fi
  need_profile nccl || return 0
  if ((stages < 2)); then
    note "nccl: needs 2 or more stages (--stages $stages)" >&2
    failures=$((failures + 1))
    return 0
  fi
  local cap_s=180 m2=$((2 * stages)) name plan way
  local NCCL_MULTI_RANK_GPU_ENABLE=1
  export NCCL_MULTI_RANK_GPU_ENABLE
  local env_status=0
  record nccl-env.json "$pipeplan" env --json || env_status=$?
  if ((dry)); then
    note "(dry run: the stage goes on only where nccl-env.json reports NCCL 2.30 or later)"
  else
    local version path new
    {
      read -r version
      read -r path
      read -r new
    } < <(nccl_loaded "$out/nccl-env.json")
    if [[ -z $version ]]; then
      if grep -q '^# skipped' "$out/nccl-env.json"; then
        note "nccl: stopped: the NCCL version was not measured (nccl-env.json skipped: the" \
          "deadline is near)" >&2
      elif ((env_status != 0)); then
        note "nccl: stopped: the NCCL version was not measured (pipeplan env --json exit" \
          "$env_status, see nccl-env.json)" >&2
      else
        note "nccl: stopped: pipeplan env --json reports no NCCL version (see nccl-env.json)" >&2
      fi
      failures=$((failures + 1))
      return 0
    fi
    if ((new != 1)); then
      note "nccl: stopped: NCCL $version from $path is loaded; several ranks on one GPU need" \
        "NCCL 2.30 or later (--nccl-lib-dir DIR, PIPEPLAN_NCCL_LIB_DIR, or bash" \
        "tools/dev/fetch_nccl.sh)" >&2
      failures=$((failures + 1))
      return 0
    fi
    local chosen=''
    if [[ -n $nccl_dir && $path == "$nccl_dir"/* ]]; then
      chosen=" (chosen by $nccl_source, first on LD_LIBRARY_PATH)"
    elif [[ -n $nccl_dir ]]; then
      chosen=", not from $nccl_dir (chosen by $nccl_source): see nccl-env.json"
    fi
    note "nccl: NCCL $version from $path$chosen"
  fi
  # The launcher of one process per stage, with the library path run.sh was started with (torch
  # loads its own libraries); each rank's pipeplan gets the one set here.
  local -a launcher=() python_env=(env LD_LIBRARY_PATH="$original_ld_library_path")
  if command -v torchrun > /dev/null; then
    launcher=("${python_env[@]}" torchrun)
  elif probe 60 "${python_env[@]}" python3 -c 'import torch.distributed.run' > /dev/null 2>&1; then
    launcher=("${python_env[@]}" python3 -m torch.distributed.run)
  elif ((dry)); then
    launcher=("${python_env[@]}" torchrun)
    note "(dry run: neither torchrun nor python3 -m torch.distributed.run is here; shown as" \
      "torchrun)"
  else
    note "nccl: no torchrun on the PATH and no python3 -m torch.distributed.run (PyTorch): the" \
      "runs of one process per stage cannot start" >&2
  fi
  local -a losses=() planned=()
  local entry schedule backward bpipe
  for entry in "${nccl_plan_list[@]}"; do
    bpipe=''
    case $entry in
      gpipe-fused) schedule=gpipe backward=fused ;;
      1f1b-2bp) schedule=1f1b backward=2bp ;;
      interleaved-2bp) schedule=interleaved backward=2bp ;;
      zb-v-2bp) schedule=zb-v backward=2bp ;;
      1f1b-fused-bpipe) schedule=1f1b backward=fused bpipe=on ;;
    esac
    name="nccl-$schedule-m$m2-$backward${bpipe:+-bpipe}"
    plan="$out/$name.plan.json"
    # BPipe moves stashes only where a pair's peak falls: with no memory limit, 1F1B fused on
    # these stages does (2bp's retained tensors keep the first stage's peak where it is).
    record "$name.plan.txt" "$pipeplan" plan "${common[@]}" --schedule "$schedule" \
      --backward "$backward" --microbatches "$m2" ${bpipe:+--bpipe on --memory 0} -o "$plan" ||
      continue
    planned+=("$name")
    record "$name.local.json" "$pipeplan" run "$plan" --backend cuda "${gpu_flag[@]}" \
      --emulate "$stages" --steps "$nccl_steps" --json --trace "$out/$name.local.trace.json" || true
    record "$name.nccl.json" "$pipeplan" run "$plan" --backend cuda "${gpu_flag[@]}" \
      --emulate "$stages" --transport nccl --steps "$nccl_steps" --json \
      --trace "$out/$name.nccl.trace.json" || true
    if ((${#launcher[@]})); then
      record "$name.torchrun.json" "${launcher[@]}" --nproc-per-node "$stages" --no-python \
        env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" "$pipeplan" run "$plan" --backend cuda \
        "${gpu_flag[@]}" --steps "$nccl_steps" --json --trace "$out/$name.torchrun.trace.json" ||
        true
    else
      not_run "$name.torchrun.json" "no torchrun and no python3 -m torch.distributed.run here"
    fi
    for way in local nccl torchrun; do
      if ((dry)) || [[ -s $out/$name.$way.trace.json ]]; then
        record "$name.$way.diff.json" "$pipeplan" diff "$plan" "$out/$name.$way.trace.json" \
          --json --all || true
      fi
    done
    losses+=("$out/$name.local.json" "$out/$name.nccl.json" "$out/$name.torchrun.json")
  done
  if ((${#losses[@]})); then
    record nccl-losses.txt python3 "$here/summary.py" --losses "${losses[@]}" || true
  fi
  # A test over NCCL that cannot run here fails instead of skipping (the stage asked for NCCL).
  PIPEPLAN_REQUIRE_NCCL=1 cap_s=$test_cap_s record tests-nccl.txt "$tests_binary" \
    --gtest_filter='NcclTransport.*:EmulatedRun.OverNccl*:CudaMpiRun.*:GpuShare.*' \
    --gtest_output="json:$out/tests-nccl.json" || true
  if ((${#planned[@]} == 0)); then
    note "nccl: no plan was made: no rank killed" >&2
    return 0
  fi
  name=${planned[0]}
  if [[ " ${planned[*]} " == *" nccl-1f1b-m$m2-2bp "* ]]; then name="nccl-1f1b-m$m2-2bp"; fi
  nccl_rank_killed "$out/$name.plan.json"
}

# A rank killed (bench/gpu/rank_killed.sh): the P ranks of PLAN started as torchrun starts them,
# PIPEPLAN_TEST_FAULT=die:K killing rank K (2, or 1 with two stages) at its first node of step 1;
# nccl-rank-killed.txt lists each rank's exit status and end, nccl-rank-killed.rank<R>.txt its
# output. summary.py --rank-killed (nccl-rank-killed-check.txt, exit 1 on a miss) requires rank K
# killed, and every other rank to exit non-zero with one error line naming rank K ("rank K closed
# its connection") within --timeout-ms (rank_timeout_ms) plus rank_slack_s of rank K's end. Each
# rank's limit is rank_limit_s, and 10 s less than the harness has (--deadline-s), so that the
# ranks end before it is stopped.
rank_timeout_ms=20000 rank_slack_s=10 rank_limit_s=120
nccl_rank_killed() {  # nccl_rank_killed PLAN
  local killed=$((stages > 2 ? 2 : 1)) cap_s=$((rank_limit_s + 30)) limit=$rank_limit_s left
  left=$(seconds_left)
  if ((left - 10 < limit)); then limit=$((left - 10)); fi
  if ((limit < 1)); then limit=1; fi
  PIPEPLAN_TEST_FAULT=die:$killed record nccl-rank-killed.txt bash "$here/rank_killed.sh" "$out" \
    "$stages" "$killed" "$rank_timeout_ms" "$rank_slack_s" "$limit" \
    "$pipeplan" run "$1" --backend cuda "${gpu_flag[@]}" --steps 1 --json \
    --timeout-ms "$rank_timeout_ms" || true
  record nccl-rank-killed-check.txt python3 "$here/summary.py" --rank-killed \
    "$out/nccl-rank-killed.txt" || true
}

# The 8-stage plans: --bpipe-stages stages of one block each, 1F1B fused, m = 2P.
bpipe_common() {  # bpipe_common PROFILE
  emulate=(--emulate "$bpipe_stages")
  common=(--profile "$1" --gpu "$plan_gpu" --stages "$bpipe_stages" --seq "$seq"
    --microbatches $((2 * bpipe_stages)) --schedule 1f1b --backward fused)
}

# bpipe_run NAME PLAN-ARGS...: run_plan with the 8-stage plans' options (--bpipe-profile).
bpipe_run() {
  local -a emulate common
  bpipe_common "$bpipe_profile"
  run_plan "$@"
}

# peaks PLAN-ARGS...: "<max over devices> <sum over devices>" of the planned peaks, bytes.
peaks() {
  probe 60 "$pipeplan" plan "$@" --json 2> /dev/null | python3 -c '
import json, sys
p = json.load(sys.stdin)["peak_memory_bytes"]
print(max(p), sum(p))' 2> /dev/null
}

# BPipe. At 4 emulated stages BPipe lowers a 1F1B pair's peak little in pipeplan's memory model
# (the acceptor, holding the LM head, ends nearly as full as the evictor; docs/design/bpipe.md).
# At --bpipe-stages (8) stages of one block each, 1F1B fused, m = 2P, it lowers it more. So:
# profile that SM share (--bpipe-profile skips it), and for each size of --bpipe-mbs take each
# stage's planned peak without and with BPipe (--memory 0: with a limit every stage fits, BPipe
# moves nothing); the first size whose BPipe peak is at least 3 % lower and whose
# stages together fit 85 % of the GPU's memory gets a per-stage limit halfway between the two
# (--reserve 0), which the plan without BPipe exceeds (recorded, exit 1 by design) and the one
# with it meets. Run that, and the largest smaller size that fits without BPipe at that limit.
what_bpipe() {
  local cap_s=120 share profile=$bpipe_profile
  local -a emulate common
  if [[ -z $profile ]]; then
    share=$(share_for "$bpipe_stages") || { failures=$((failures + 1)); return 0; }
    local bpipe_model="$out/llama-7b-blocks$bpipe_layers.json"
    write_model "$bpipe_model" "$bpipe_layers"
    profile="$out/$gpu_key-llama-7b-blocks$bpipe_layers-sm$share.measured.json"
    cap_s=300 clocks_to=profile-bpipe record profile-bpipe.txt "$pipeplan" profile \
      --backend cuda "${gpu_flag[@]}" --model "$bpipe_model" --seq "$seq" --mbs 1,2,4 \
      --attention flash --max-concat 8 --sm-partition "$share" "${gemm[@]}" -o "$profile" ||
      return 0
  fi
  bpipe_common "$profile"
  if ((dry)); then
    record "bpipe-mbs2-without.plan.txt" "$pipeplan" plan "${common[@]}" --mbs 2 \
      --memory LIMIT --reserve 0
    run_plan "bpipe-mbs2" --mbs 2 --bpipe on --memory LIMIT --reserve 0
    run_plan "nobpipe-mbs1" --mbs 1 --memory LIMIT --reserve 0
    note "(dry run: LIMIT is halfway between the planned peaks without and with BPipe)"
    return 0
  fi
  if [[ -z $memory_bytes ]]; then
    note "run.sh: bpipe: pipeplan env --json reports no GPU memory to fit the stages into" >&2
    failures=$((failures + 1))
    return 0
  fi
  local usable=$((memory_bytes * 85 / 100))
  local mbs smaller off on off_max on_max on_sum limit
  for mbs in "${bpipe_sizes[@]}"; do
    off=$(peaks "${common[@]}" --mbs "$mbs") || off=""
    on=$(peaks "${common[@]}" --mbs "$mbs" --bpipe on --memory 0) || on=""
    note "bpipe: mbs $mbs, planned peak per stage (max, sum) without BPipe: ${off:-none}," \
      "with: ${on:-none}"
    if [[ -z $off || -z $on ]]; then continue; fi
    read -r off_max _ <<< "$off"
    read -r on_max on_sum <<< "$on"
    if ((on_max * 100 > off_max * 97 || on_sum > usable)); then continue; fi
    limit=$(python3 -c "print(f'{($off_max + $on_max) / 2 / 2**30:.3f}GiB')")
    note "bpipe: mbs $mbs, limit $limit per stage: fits only with BPipe"
    record "bpipe-mbs$mbs-without.plan.txt" "$pipeplan" plan "${common[@]}" --mbs "$mbs" \
      --memory "$limit" --reserve 0 || true
    run_plan "bpipe-mbs$mbs" --mbs "$mbs" --bpipe on --memory "$limit" --reserve 0
    # Each size asked of pipeplan, its plan written to a scratch file (pipeplan writes regular
    # files only) and removed.
    local fits scratch
    for ((smaller = mbs - 1; smaller >= 1; --smaller)); do
      scratch=$(scratch_file) fits=0
      probe 60 "$pipeplan" plan "${common[@]}" --mbs "$smaller" --memory "$limit" --reserve 0 \
        -o "$scratch" > /dev/null 2>&1 && fits=1
      rm -f "$scratch"
      if ((fits)); then
        run_plan "nobpipe-mbs$smaller" --mbs "$smaller" --memory "$limit" --reserve 0
        break
      fi
    done
    return 0
  done
  note "bpipe: no size of --bpipe-mbs fits only with BPipe at $bpipe_stages stages"
}

# Where emulated stages wait with their inputs ready: the 8-stage 1F1B run at mbs 1 (needs
# --bpipe-profile) and the P-stage 1F1B-2bp runs at m = P and 2P (need the stages' profile),
# --stall-steps steps each, once per CUDA_DEVICE_MAX_CONNECTIONS value of --connections ("default"
# leaves it unset); `pipeplan diff` splits each stall into the host's part and the GPU's.
what_stalls() {
  local cap_s=150 conn m run_steps=$stall_steps
  for conn in "${connection_counts[@]}"; do
    local -a run_env=()
    [[ $conn == default ]] || run_env=(env "CUDA_DEVICE_MAX_CONNECTIONS=$conn")
    if [[ -n $bpipe_profile ]]; then
      bpipe_run "stalls-c$conn-${bpipe_stages}st-mbs1" --mbs 1
    else
      note "run.sh: stalls: no --bpipe-profile, no ${bpipe_stages}-stage run" >&2
    fi
    if need_profile stalls; then
      for m in "$stages" $((2 * stages)); do
        run_plan "stalls-c$conn-1f1b-m$m-2bp" --schedule 1f1b --backward 2bp --microbatches "$m"
      done
    fi
  done
}

# How device-local copies are issued: the 8-stage BPipe run at mbs 2 (needs --bpipe-profile;
# limit --copies-limit) and the P-stage auto run at m = 2P (needs the stages' profile), once per
# PIPEPLAN_DEVICE_COPY mode of --copy-modes.
what_copies() {
  local cap_s=120 mode
  for mode in "${copy_mode_list[@]}"; do
    local -a run_env=(env "PIPEPLAN_DEVICE_COPY=$mode")
    if [[ -n $bpipe_profile ]]; then
      bpipe_run "copies-$mode-bpipe-mbs2" --mbs 2 --bpipe on --memory "$copies_limit" --reserve 0
    else
      note "run.sh: copies: no --bpipe-profile, no ${bpipe_stages}-stage run" >&2
    fi
    if need_profile copies; then
      run_plan "copies-$mode-auto-m$((2 * stages))" --schedule auto --backward 2bp \
        --microbatches $((2 * stages))
    fi
  done
}

# How the receiving side waits for a device-local copy: one 1F1B-2bp plan at m = --wait-m run
# once per PIPEPLAN_COPY_WAIT mode of --copy-waits, side by side on one warm GPU.
what_waits() {
  need_profile waits || return 0
  local cap_s=120 mode
  for mode in "${copy_wait_list[@]}"; do
    local -a run_env=(env "PIPEPLAN_COPY_WAIT=$mode")
    run_plan "waits-$mode-1f1b-m$wait_m-2bp" --schedule 1f1b --backward 2bp --microbatches "$wait_m"
  done
}

# Timed GEMM answers in the emulated pipelines: the stages' profile again with --gemm-candidates
# --gemm-tuned, the given profile's contention model copied into it (the stages share memory
# bandwidth and L2 whichever tiles run), and the 1F1B-2bp runs at m = P and 2P planned from each
# profile and run with the GEMMs it measured: gemm1-* beside gemm<N>-*. Needs --sm-profile (a
# calibrated one, with the heuristic's GEMMs).
what_gemm() {
  if [[ -z $sm_profile ]]; then
    note "run.sh: gemm needs --sm-profile (a calibrated stages' profile)" >&2
    failures=$((failures + 1))
    return 0
  fi
  local share m
  share=$(share_for "$stages") || { failures=$((failures + 1)); return 0; }
  write_model "$model" "$layers"
  local measured="$out/$gpu_key-llama-7b-blocks$layers-sm$share-gemm$gemm_tuned.measured.json"
  local calibrated="$out/$gpu_key-llama-7b-blocks$layers-sm$share-gemm$gemm_tuned.calibrated.json"
  cap_s=300 record "gemm$gemm_tuned-profile-sm.txt" "$pipeplan" profile --backend cuda \
    "${gpu_flag[@]}" --model "$model" --seq "$seq" --mbs 1,2,4 --attention flash --max-concat 8 \
    --sm-partition "$share" --gemm-candidates "$gemm_tuned" -o "$measured" || return 0
  record "gemm$gemm_tuned-contention.txt" "$pipeplan" calibrate copy \
    --from "$sm_profile" -o "$calibrated" "$measured" || return 0
  local cap_s=120
  for m in "$stages" $((2 * stages)); do
    local -a gemm=() common=(--profile "$sm_profile" --gpu "$plan_gpu" --stages "$stages"
      --seq "$seq")
    run_plan "gemm1-1f1b-m$m-2bp" --schedule 1f1b --backward 2bp --microbatches "$m"
    gemm=(--gemm-candidates "$gemm_tuned")
    common=(--profile "$calibrated" --gpu "$plan_gpu" --stages "$stages" --seq "$seq")
    run_plan "gemm$gemm_tuned-1f1b-m$m-2bp" --schedule 1f1b --backward 2bp --microbatches "$m"
  done
}

# P GPUs, one stage each, the stages' transfers over NCCL: the --runs schedules at each m of --m,
# planned from a whole-GPU profile of --multi-gpu-model (--gpu-profile, else the one `profile`
# wrote earlier, else profiled here) and run with `pipeplan run --backend cuda` (no --emulate).
what_multi_gpu() {
  if ((!dry && gpu_count < 2)); then
    note "multi-gpu: skipped: pipeplan env --json reports ${gpu_count} GPU(s); it needs 2 or more"
    return 0
  fi
  if ((!dry && gpu_count < stages)); then
    note "multi-gpu: skipped: --stages $stages needs $stages GPUs, pipeplan env --json reports $gpu_count"
    return 0
  fi
  local profile=${gpu_profile:-$whole_gpu_profile}
  if [[ $multi_gpu_model != llama-7b ]]; then profile=$gpu_profile; fi
  if [[ -z $profile ]]; then
    profile="$out/$gpu_key-$(basename "${multi_gpu_model%.json}").measured.json"
    cap_s=300 record profile-multi-gpu.txt "$pipeplan" profile --backend cuda "${gpu_flag[@]}" \
      --model "$multi_gpu_model" --seq "$seq" --mbs 1,2,4 --attention flash "${gemm[@]}" \
      -o "$profile" || return 0
  fi
  local cap_s=180
  local -a emulate=() common=(--profile "$profile" --gpu "$plan_gpu" --stages "$stages"
    --seq "$seq")
  schedule_runs "gpus$stages-"
}
