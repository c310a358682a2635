#!/usr/bin/env bash
# tools/dev/check_narrative.sh fails on planted development narrative (a ticket number, a
# numbered session, a ticket-named file) with the file and line, and passes product text that
# only looks alike (an MPI session, a GPU's device time, a kernel issued).
# Usage: bash tests/tools/dev/check_narrative_test.sh SOURCE_DIR
set -euo pipefail
source_dir=$1
check="$source_dir/tools/dev/check_narrative.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

expect() {  # expect STATUS WANTED-OUTPUT FILE...
  local want_status=$1 want_output=$2 status=0 output
  shift 2
  output=$(bash "$check" "$@" 2>&1) || status=$?
  if [ "$status" -ne "$want_status" ]; then
    echo "FAIL: $* exited $status, expected $want_status: $output"
    failures=$((failures + 1))
  elif ! grep -qF -- "$want_output" <<<"$output"; then
    echo "FAIL: $* did not print '$want_output': $output"
    failures=$((failures + 1))
  fi
}

printf 'A comment.\n// see issue 12 for the numbers\n' >"$work/ticket.cpp"
expect 1 "$work/ticket.cpp:2:// see issue 12 for the numbers" "$work/ticket.cpp"

printf 'measured in the fifth GPU session\n' >"$work/session.md"
expect 1 "$work/session.md:1:" "$work/session.md"

printf 'bench/results/issue12-h200/README.md\n' >"$work/path.md"
expect 1 "$work/path.md:1:" "$work/path.md"

printf 'print("clean")\n' >"$work/issue12_summary.py"
expect 1 "narrative: file name: $work/issue12_summary.py" "$work/issue12_summary.py"

cat >"$work/product.cpp" <<'EOF'
// One MPI session per process; the op's device time excludes the wait. Kernels issued on the
// copy stream; an issue with the driver is reported as a CUDA error. Paths a recorded command
// used stay: --model /tmp/issue12-env.AJ3AQW/llama.json
EOF
expect 0 "narrative: clean" "$work/product.cpp"

if [ "$failures" -gt 0 ]; then
  echo "check_narrative_test: $failures failure(s)"
  exit 1
fi
echo "check_narrative_test: 5 passed, 0 failed"
