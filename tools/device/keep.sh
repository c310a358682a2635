# Sourced by tools/device/issue12_fidelity*.sh (here, no GPU).
# run_and_keep FILE CMD...: runs CMD, its output in FILE after a '# command:' line (written to
# FILE.tmp, then renamed: never half-written), and printed.
run_and_keep() {
  local file=$1
  shift
  { echo "# command: $(printf '%q ' "$@")"; "$@"; } > "$file.tmp"
  mv "$file.tmp" "$file"
  cat "$file"
}
