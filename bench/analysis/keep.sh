# Helpers sourced by bench/analysis/fidelity_*.sh.
# shellcheck shell=bash

# run_and_keep FILE CMD...: runs CMD, its output in FILE after a '# command:' line (written to
# FILE.tmp, then renamed: never half-written), and printed.
run_and_keep() {
  local file=$1
  shift
  { echo "# command: $(printf '%q ' "$@")"; "$@"; } > "$file.tmp"
  mv "$file.tmp" "$file"
  cat "$file"
}

# run_folders RESULTS: RESULTS's run folders (those with an index.txt, as bench/gpu/run.sh writes
# them), one per line, in the order they were measured (the UTC time on index.txt's first line).
run_folders() {
  local folder
  for folder in "$1"/*/; do
    folder=${folder%/}
    [[ -f $folder/index.txt ]] || continue
    printf '%s\t%s\n' "$(head -n 1 "$folder/index.txt" | grep -o '[0-9-]*T[0-9:]*Z' | head -n 1)" \
      "$folder"
  done | sort | cut -f2
}
