#!/usr/bin/env bash
# The product describes pipeplan, not how it was developed: no ticket numbers, numbered work
# periods or names of the development environment in tracked file names or contents. Raw
# measurement outputs under bench/results/ keep what their commands printed (their provenance is
# a GPU, a date, a commit and a command); only their paths are checked.
# Usage: bash tools/dev/check_narrative.sh [PATH...]   (default: every tracked file; prints each
# hit as FILE:LINE: TEXT and exits 1 if there is any)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# One extended regular expression, matched without regard to case. "session" alone is a word of
# the product (an MPI session); what is refused is a development session counted or referred to.
ordinals='first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|[0-9]+(st|nd|rd|th)'
patterns=(
  '(^|[^a-z0-9_])issue[ _#-]*[0-9]+'
  '(^|[^a-z])tickets?([^a-z]|$)'
  "(^|[^a-z])(${ordinals}) (working |gpu |device |development )?session"
  '(^|[^a-z])(gpu|device|working|development|coding|earlier|previous|later|next|this) sessions?([^a-z]|$)'
  '(^|[^a-z])work(ing)? periods?([^a-z]|$)'
  '(^|[^a-z])device (tool|budget)([^a-z]|$)'
  '(^|[^a-z])(lending|lent to)([^a-z]|$)'
  '(^|[^a-z])(give_back|can_start_another|budget_left|farm-studio|farm-bench)([^a-z]|$)'
  '(^|[^a-z])(brief|style)\.md|brief §|shared/seeds'
)
regex=$(IFS='|'; echo "${patterns[*]}")

# This script names the patterns it refuses; its own test plants them.
exempt='^(tools/dev/check_narrative\.sh|tests/tools/dev/check_narrative_test\.sh)$'

if [ $# -gt 0 ]; then
  files=("$@")
else
  # Without PATHs, every file git tracks.
  # shellcheck source=tools/dev/tracked_files.sh
  . tools/dev/tracked_files.sh
  tracked_files narrative
fi

hits=0
for file in "${files[@]}"; do
  [[ $file =~ $exempt ]] && continue
  if printf '%s\n' "$file" | grep -qiE "$regex"; then
    echo "narrative: file name: $file"
    hits=$((hits + 1))
  fi
  [[ $file == bench/results/* ]] && continue
  [ -f "$file" ] || continue
  # -I: binary files are skipped. A temporary path a recorded command used (/tmp/NAME.XXXXXX)
  # is what the command was, not a description.
  # grep exits 1 when nothing matches, 2 when it cannot read the file.
  status=0
  found=$(grep -nIiE "$regex" -- "$file") || status=$?
  if [ "$status" -gt 1 ]; then
    echo "narrative: $file: grep could not read it (exit $status)" >&2
    exit 1
  fi
  [ -n "$found" ] || continue
  while IFS= read -r hit; do
    printf '%s\n' "$hit" | sed -E 's#/tmp/[^ "]*##g' | grep -qiE "$regex" || continue
    echo "narrative: $file:$hit"
    hits=$((hits + 1))
  done <<<"$found"
done

if [ "$hits" -gt 0 ]; then
  echo "narrative: $hits place(s) describe the development instead of the product"
  exit 1
fi
echo "narrative: clean"
