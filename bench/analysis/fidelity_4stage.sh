#!/usr/bin/env bash
# The fidelity analysis of a results folder's emulated 4-stage runs (no GPU): fits the
# simulator's contention model (`pipeplan calibrate fit`) to the runs at m = 4 and 8 and
# re-predicts them, and diffs every other run (stalls: compute waiting with its inputs ready).
#
# Usage: bash bench/analysis/fidelity_4stage.sh RESULTS [PIPEPLAN]
#   RESULTS   a bench/results/<gpu>/<date>-<what> folder of run folders (bench/gpu/run.sh
#             output folders, taken in the order they were measured): the first with a
#             `*-sm*.measured.json` profile gives the profile, the first with 4-stage runs
#             (1f1b-m4-fused ...) the runs; every other trace (BPipe, 8 stages) is diffed only
#   PIPEPLAN  default build/tools/pipeplan
# Writes RESULTS/fidelity/: fit-m4*.txt (fit on m = 4, re-predict m = 4 and the held-out m = 8),
# fit-all*.txt (fit on all ten), each for the contention by ops at once alone (-count) and with
# the sustained load (the calibrated profile: fit-all with --sustained),
# heldout-<folder>*.eval.txt (the other folders' 4-stage runs re-predicted from both),
# diff-*.txt; and the calibrated profile, RESULTS/fidelity/<measured name>.calibrated.json (the
# one in profiles/ is a copy of such a file: its contention.source says which fit made it).
# Runs are re-predicted as recorded (calibrate eval --resimulate): an auto run's plan is the one
# that ran, where planning its command again at a later commit can choose another order.
set -euo pipefail
cd "$(dirname "$0")/../.."
results=${1:?usage: fidelity_4stage.sh RESULTS [PIPEPLAN]}
pipeplan=${2:-build/tools/pipeplan}
[[ -x $pipeplan ]] || { echo "fidelity_4stage.sh: no pipeplan at '$pipeplan'" >&2; exit 2; }
out="$results/fidelity"
mkdir -p "$out"
fit=("$pipeplan" calibrate)

# shellcheck source=bench/analysis/keep.sh
source bench/analysis/keep.sh
mapfile -t folders < <(run_folders "$results")

shopt -s nullglob
profile_folder='' runs_folder=''
for folder in "${folders[@]}"; do
  found=("$folder"/*-sm*.measured.json)
  [[ -z $profile_folder && ${#found[@]} -gt 0 ]] && profile_folder=$folder
  [[ -z $runs_folder && -f $folder/1f1b-m4-2bp.trace.json ]] && runs_folder=$folder
done
m4=() m8=()
if [[ -n $runs_folder ]]; then
  [[ -n $profile_folder ]] || {
    echo "fidelity_4stage.sh: $results has 4-stage runs but no */*-sm*.measured.json" >&2
    exit 2
  }
  folder=$runs_folder
  found=("$profile_folder"/*-sm*.measured.json)
  measured=$(basename "${found[0]}")
  for run in 1f1b-m4-fused 1f1b-m4-2bp gpipe-m4-fused gpipe-m4-2bp auto-m4; do
    [[ -f $folder/$run.trace.json ]] && m4+=("$folder/$run")
  done
  for run in 1f1b-m8-fused 1f1b-m8-2bp gpipe-m8-fused gpipe-m8-2bp auto-m8; do
    [[ -f $folder/$run.trace.json ]] && m8+=("$folder/$run")
  done
  calibrated="$out/${measured%.measured.json}.calibrated.json"
  # The copy in profiles/ where there is one (its model named by the model file, as profiles/
  # has it, not by the folder the profile was measured in).
  source_profile="$profile_folder/$measured"
  [[ -f profiles/$measured ]] && source_profile="profiles/$measured"
  # Two models: the contention by ops at once alone ("-count"), and with the sustained load
  # (--sustained, profiles/contention.h); the second, fitted on all ten, is the calibrated one.
  for model in count sustained; do
    flags=() suffix=""
    if [[ $model == sustained ]]; then flags=(--sustained); else suffix="-count"; fi
    {
      run_and_keep "$out/fit-m4$suffix.fit.txt" "${fit[@]}" fit "${flags[@]}" \
        --profile "$source_profile" -o "$out/fit-m4$suffix.profile.json" "${m4[@]}"
      run_and_keep "$out/fit-m4$suffix.eval.txt" "${fit[@]}" eval --resimulate \
        --profile "$out/fit-m4$suffix.profile.json" "${m4[@]}" "${m8[@]}"
    } > /dev/null
    all_profile="$out/fit-all-count.profile.json"
    [[ $model == sustained ]] && all_profile=$calibrated
    run_and_keep "$out/fit-all$suffix.fit.txt" "${fit[@]}" fit "${flags[@]}" \
      --profile "$source_profile" -o "$all_profile" "${m4[@]}" "${m8[@]}" > /dev/null
    run_and_keep "$out/fit-all$suffix.eval.txt" "${fit[@]}" eval --resimulate \
      --profile "$all_profile" "${m4[@]}" "${m8[@]}" > /dev/null
    echo "== $model: fit on m = 4 (m = 8 held out)"; tail -n +2 "$out/fit-m4$suffix.eval.txt"
    echo "== $model: fit on all ten ($all_profile)"; tail -n +2 "$out/fit-all$suffix.eval.txt"
  done
  for run in "${m4[@]}" "${m8[@]}"; do
    run_and_keep "$out/diff-$(basename "$run").txt" "$pipeplan" diff "$run.plan.json" \
      "$run.trace.json" --top 10 > /dev/null
  done
  # 4-stage runs of the other folders (e.g. other m, planned from the calibrated profile before
  # they ran): re-predicted from the calibrated profile, never fitted on.
  for other in "${folders[@]}"; do
    [[ $other == "$folder" ]] && continue
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
      run_and_keep "$heldout" "${fit[@]}" eval --resimulate --profile "$all_profile" \
        "${held[@]}" > /dev/null
      echo "== held out: $(basename "$other") from $all_profile"; tail -n +2 "$heldout"
    done
  done
fi
fitted=" ${m4[*]} ${m8[*]} "
for run in "${folders[@]/%//*.trace.json}"; do
  [[ -f $run ]] || continue
  run=${run%.trace.json}
  [[ $fitted == *" $run "* ]] && continue
  run_and_keep "$out/diff-$(basename "$(dirname "$run")")-$(basename "$run").txt" "$pipeplan" \
    diff "$run.plan.json" "$run.trace.json" --top 10 | sed -n '/^devices/,$p'
done
