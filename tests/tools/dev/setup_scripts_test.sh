#!/usr/bin/env bash
# tools/setup.sh, tools/quickstart.sh, tools/test.sh and the checks of tools/dev, run from a copy
# of them beside a small CMake project (no compiler, no package installed, nothing built):
# - -h/--help prints the usage and does nothing else; an unknown argument is one line, exit 2;
# - a build/ whose configure failed is configured again by the next setup.sh (and sanitize.sh),
#   not built as it is; configure's `pipeplan:` lines are shown;
# - a unity build/ (setup.sh --cli) is turned back into one file by file by setup.sh;
# - nvcc at /usr/local/cuda/bin but not on PATH is given to CMake (where it is there);
# - test.sh forces the tests and -Werror on, and ctest fails when it finds no test;
# - check_layers.sh, check_narrative.sh and lint.sh outside a git checkout fail in one line.
# Usage: bash tests/tools/dev/setup_scripts_test.sh SOURCE_DIR
set -euo pipefail
source_dir=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
checks=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect STATUS WANTED-OUTPUT COMMAND...: runs COMMAND in the copy, stdout and stderr together.
expect() {
  local want_status=$1 want_output=$2 status=0 output
  shift 2
  checks=$((checks + 1))
  output=$(cd "$tree" && "$@" 2>&1) || status=$?
  if [ "$status" -ne "$want_status" ]; then
    fail "$* exited $status, expected $want_status: $output"
  elif ! grep -qF -- "$want_output" <<<"$output"; then
    fail "$* did not print '$want_output': $output"
  fi
  last_output=$output
}

# The copy: the scripts under test, with stand-ins on PATH for what would install or take long.
tree=$(cd "$work" && pwd -P)/tree
mkdir -p "$tree/tools/dev" "$work/bin"
cp "$source_dir"/tools/{setup,quickstart,test}.sh "$tree/tools/"
cp "$source_dir"/tools/dev/{ccache_env,check_layers,check_narrative,lint,nvcc_option,sanitize,tracked_files}.sh \
  "$tree/tools/dev/"
printf '#!/bin/sh\necho "fetched cudnn-frontend"\n' >"$tree/tools/dev/fetch_cudnn_frontend.sh"
# Every package is installed; apt-get and sudo must not be reached.
cat >"$work/bin/dpkg-query" <<'EOF'
#!/bin/sh
printf 'install ok installed'
EOF
for tool in apt-get sudo; do
  printf '#!/bin/sh\necho "%s was run: $*" >> "%s/ran"\nexit 1\n' "$tool" "$work" \
    >"$work/bin/$tool"
done
chmod +x "$work/bin/"*
export PATH="$work/bin:$PATH"
# A project that configures in a moment: it says what it was given, fails while a file named
# `fail` is in the tree, and has a pipeplan target that builds nothing.
cat >"$tree/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.24)
project(scripts_test NONE)
if(EXISTS ${CMAKE_SOURCE_DIR}/fail)
  message(FATAL_ERROR "configure failed on purpose")
endif()
message(STATUS "pipeplan: configured (tests ${PIPEPLAN_TESTS}, werror ${PIPEPLAN_WERROR})")
message(STATUS "not a pipeplan line")
if(CMAKE_CUDA_COMPILER)
  message(STATUS "pipeplan: CUDA compiler ${CMAKE_CUDA_COMPILER}")
endif()
add_custom_target(pipeplan)
EOF

# Help: the usage, exit 0, nothing run.
expect 0 "Usage: bash tools/setup.sh" bash tools/setup.sh --help
expect 0 "Usage: bash tools/setup.sh" bash tools/setup.sh --cli -h
expect 0 "Usage: bash tools/quickstart.sh" bash tools/quickstart.sh --help
expect 0 "Usage: bash tools/test.sh" bash tools/test.sh -h
[ ! -e "$tree/build" ] || fail "a --help configured build/"
# Unknown arguments: one line, exit 2, nothing run.
expect 2 "setup: unknown argument '--bogus'" bash tools/setup.sh --bogus
expect 2 "setup: unknown argument 'PIPEPLAN_CUDA=OFF'" bash tools/setup.sh PIPEPLAN_CUDA=OFF
expect 2 "quickstart: unknown argument 'now'" bash tools/quickstart.sh now
expect 2 "test.sh: unknown argument '--fast'" bash tools/test.sh --fast
[ "$(wc -l <<<"$last_output")" -eq 1 ] || fail "test.sh --fast printed more than one line: $last_output"
[ ! -e "$tree/build" ] || fail "an unknown argument configured build/"

# A failed configure, then setup.sh again: configured, not "ninja: error: loading 'build.ninja'".
touch "$tree/fail"
expect 1 "setup: configuring build/ failed" bash tools/setup.sh
[ -f "$tree/build/CMakeCache.txt" ] || fail "the failed configure left no CMakeCache.txt"
rm "$tree/fail"
expect 0 "pipeplan: configured" bash tools/setup.sh -DPIPEPLAN_TESTS=OFF
grep -qF "not a pipeplan line" <<<"$last_output" && fail "setup.sh showed configure's other lines"
# The -D option reached CMake and stays in the cache.
expect 0 "pipeplan: configured (tests OFF" bash tools/setup.sh

# --cli makes a new build/ a unity build; setup.sh turns it back.
rm -rf "$tree/build"
expect 0 "pipeplan: configured" bash tools/setup.sh --cli
grep -qE '^CMAKE_UNITY_BUILD:[A-Z]*=ON$' "$tree/build/CMakeCache.txt" ||
  fail "setup.sh --cli made no unity build"
expect 0 "pipeplan: configured" bash tools/setup.sh
grep -qE '^CMAKE_UNITY_BUILD:[A-Z]*=OFF$' "$tree/build/CMakeCache.txt" ||
  fail "setup.sh left the unity build on"

# nvcc where the toolkit installs it but not on PATH: given to CMake.
no_nvcc=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v cuda | paste -sd: -)
if [ -x /usr/local/cuda/bin/nvcc ] && ! PATH=$no_nvcc command -v nvcc >/dev/null; then
  rm -rf "$tree/build"
  expect 0 "pipeplan: CUDA compiler /usr/local/cuda/bin/nvcc" \
    env PATH="$no_nvcc" bash tools/setup.sh
fi

# sanitize.sh configures a folder whose configure failed (its ctest finds no test here).
touch "$tree/fail"
expect 1 "configure failed on purpose" bash tools/dev/sanitize.sh build-sanitize
rm "$tree/fail"
expect 0 "" bash tools/dev/sanitize.sh build-sanitize
[ -f "$tree/build-sanitize/build.ninja" ] || [ -f "$tree/build-sanitize/Makefile" ] ||
  fail "sanitize.sh did not configure build-sanitize/ again"

# test.sh: the tests and -Werror forced on over the cache; ctest with no test is a failure.
rm -rf "$tree/build"
for stage in lint check_unity_build fuzz_smoke; do
  printf '#!/bin/sh\necho "%s ran"\n' "$stage" >"$tree/tools/dev/$stage.sh"
done
printf '#!/bin/sh\necho "sanitize ran"\n' >"$tree/tools/dev/sanitize.sh"
expect 0 "pipeplan: configured" bash tools/setup.sh -DPIPEPLAN_TESTS=OFF -DPIPEPLAN_WERROR=OFF
expect 8 "pipeplan: configured (tests ON, werror ON)" bash tools/test.sh
grep -qF "No tests were found" <<<"$last_output" || fail "test.sh's ctest found tests: $last_output"
grep -qF "sanitize ran" <<<"$last_output" && fail "test.sh went on after ctest failed"

# The checks outside a git checkout (the copy is none): one line each, exit 1.
expect 1 "layers: $tree is not a git checkout" bash tools/dev/check_layers.sh
expect 1 "narrative: $tree is not a git checkout" bash tools/dev/check_narrative.sh
cp "$source_dir/tools/dev/lint.sh" "$tree/tools/dev/lint.sh"
expect 1 "lint: $tree is not a git checkout" bash tools/dev/lint.sh

[ ! -e "$work/ran" ] || fail "a package tool was run: $(cat "$work/ran")"
if [ "$failures" -gt 0 ]; then
  echo "setup_scripts_test: $failures failure(s) ($checks commands run)"
  exit 1
fi
echo "setup_scripts_test: passed ($checks commands run)"
