#!/usr/bin/env bash
# Run HERE (no GPU): issue 12's fidelity analysis of a device session's raw outputs. Fits the
# simulator's contention model (tools/calibrate/fit_contention.py) to the emulated 4-stage runs and
# re-predicts them, and diffs the 8-stage runs (stalls: compute waiting with its inputs ready).
#
# Usage: bash tools/device/issue12_fidelity.sh RESULTS-DIR [PIPEPLAN]
#   RESULTS-DIR  a bench/results/issue12-<gpu>-<date> folder of call*-*/ folders: the first
#                call with a `*-sm*.measured.json` profile gives the profile, the first with
#                4-stage runs (1f1b-m4-fused ...) the runs (one call or two); every other
#                trace (BPipe, 8 stages) is diffed only
#   PIPEPLAN     default build/tools/pipeplan
# Writes RESULTS-DIR/fidelity/: fit-m4*.txt (fit on m = 4, re-predict m = 4 and the held-out
# m = 8), fit-all*.txt (fit on all ten), each for the contention by ops at once alone (-count)
# and with the sustained load (the calibrated profile: fit-all with --sustained),
# heldout-<call>*.eval.txt (the other calls' 4-stage runs re-predicted from both), diff-*.txt;
# and the calibrated profile beside the measured one in profiles/ (<measured
# name>.calibrated.json).
set -euo pipefail
cd "$(dirname "$0")/../.."
results=${1:?usage: issue12_fidelity.sh RESULTS-DIR [PIPEPLAN]}
pipeplan=${2:-build/tools/pipeplan}
[[ -x $pipeplan ]] || { echo "issue12_fidelity.sh: no pipeplan at '$pipeplan'" >&2; exit 2; }
out="$results/fidelity"
mkdir -p "$out"
fit=(python3 tools/calibrate/fit_contention.py)

# shellcheck source=tools/device/keep.sh
source tools/device/keep.sh

shopt -s nullglob
profile_call='' runs_call=''
for call in "$results"/call*-*/; do
  call=${call%/}
  found=("$call"/*-sm*.measured.json)
  [[ -z $profile_call && ${#found[@]} -gt 0 ]] && profile_call=$call
  [[ -z $runs_call && -f $call/1f1b-m4-2bp.trace.json ]] && runs_call=$call
done
m4=() m8=()
if [[ -n $runs_call ]]; then
  [[ -n $profile_call ]] || {
    echo "issue12_fidelity.sh: $results has 4-stage runs but no call*-*/*-sm*.measured.json" >&2
    exit 2
  }
  call=$runs_call
  measured=$(cd "$profile_call" && ls ./*-sm*.measured.json | head -n 1)
  measured=${measured#./}
  for run in 1f1b-m4-fused 1f1b-m4-2bp gpipe-m4-fused gpipe-m4-2bp auto-m4; do
    [[ -f $call/$run.trace.json ]] && m4+=("$call/$run")
  done
  for run in 1f1b-m8-fused 1f1b-m8-2bp gpipe-m8-fused gpipe-m8-2bp auto-m8; do
    [[ -f $call/$run.trace.json ]] && m8+=("$call/$run")
  done
  calibrated="profiles/${measured%.measured.json}.calibrated.json"
  # The copy in profiles/ where there is one (its model named by the model file, not the
  # device's temporary folder, as the profiles of the first session were).
  source_profile="$profile_call/$measured"
  [[ -f profiles/$measured ]] && source_profile="profiles/$measured"
  # Two models: the contention by ops at once alone ("-count"), and with the sustained load
  # (--sustained, profiles/contention.h); the second, fitted on all ten, is the calibrated one.
  for model in count sustained; do
    flags=() suffix=""
    if [[ $model == sustained ]]; then flags=(--sustained); else suffix="-count"; fi
    {
      run_and_keep "$out/fit-m4$suffix.fit.txt" "${fit[@]}" fit "${flags[@]}" \
        --profile "$source_profile" -o "$out/fit-m4$suffix.profile.json" "${m4[@]}"
      run_and_keep "$out/fit-m4$suffix.eval.txt" "${fit[@]}" eval --pipeplan "$pipeplan" \
        --profile "$out/fit-m4$suffix.profile.json" "${m4[@]}" "${m8[@]}"
    } > /dev/null
    all_profile="$out/fit-all-count.profile.json"
    [[ $model == sustained ]] && all_profile=$calibrated
    run_and_keep "$out/fit-all$suffix.fit.txt" "${fit[@]}" fit "${flags[@]}" \
      --profile "$source_profile" -o "$all_profile" "${m4[@]}" "${m8[@]}" > /dev/null
    run_and_keep "$out/fit-all$suffix.eval.txt" "${fit[@]}" eval --pipeplan "$pipeplan" \
      --profile "$all_profile" "${m4[@]}" "${m8[@]}" > /dev/null
    echo "== $model: fit on m = 4 (m = 8 held out)"; tail -n +2 "$out/fit-m4$suffix.eval.txt"
    echo "== $model: fit on all ten ($all_profile)"; tail -n +2 "$out/fit-all$suffix.eval.txt"
  done
  for run in "${m4[@]}" "${m8[@]}"; do
    run_and_keep "$out/diff-$(basename "$run").txt" "$pipeplan" diff "$run.plan.json" \
      "$run.trace.json" --top 10 > /dev/null
  done
  # 4-stage runs of the other calls (e.g. other m, planned from the calibrated profile before
  # they ran): re-predicted from the calibrated profile, never fitted on.
  for other in "$results"/call*-*/; do
    other=${other%/}
    [[ $other == "$call" ]] && continue
    held=()
    for run in "$other"/*.trace.json; do
      run=${run%.trace.json}
      name=$(basename "$run")
      [[ $name =~ ^((1f1b|gpipe)-m[0-9]+-(fused|2bp)|auto-m[0-9]+)$ ]] && held+=("$run")
    done
    ((${#held[@]} > 0)) || continue
    for all_profile in "$out/fit-all-count.profile.json" "$calibrated"; do
      suffix=""
      [[ $all_profile == "$calibrated" ]] || suffix="-count"
      heldout="$out/heldout-$(basename "$other")$suffix.eval.txt"
      run_and_keep "$heldout" "${fit[@]}" eval --pipeplan "$pipeplan" --profile "$all_profile" \
        "${held[@]}" > /dev/null
      echo "== held out: $(basename "$other") from $all_profile"; tail -n +2 "$heldout"
    done
  done
fi
fitted=" ${m4[*]} ${m8[*]} "
for run in "$results"/call*-*/*.trace.json; do
  run=${run%.trace.json}
  [[ $fitted == *" $run "* ]] && continue
  run_and_keep "$out/diff-$(basename "$(dirname "$run")")-$(basename "$run").txt" "$pipeplan" \
    diff "$run.plan.json" "$run.trace.json" --top 10 | sed -n '/^devices/,$p'
done
