#!/usr/bin/env bash
# The unit tests once under AddressSanitizer + UndefinedBehaviorSanitizer, in their own build
# folder (clang, CUDA off, no benchmarks), which also holds the fuzz targets that
# tools/dev/fuzz_smoke.sh runs (docs/development/fuzzing.md). Any sanitizer report fails its test.
# Usage: bash tools/dev/sanitize.sh [BUILD_DIR]   (default build-sanitize; needs clang, libclang-rt-dev)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build-sanitize}
jobs=$(nproc)
configure=()
if command -v ninja >/dev/null; then configure+=(-G Ninja); fi
. tools/dev/ccache_env.sh
configure+=("${ccache_launchers[@]}")
# ccache hashes -fsanitize-coverage-ignorelist=/abs/path as written (it rewrites only the options
# it knows to be paths), so every clone missed the cache and CI rebuilt this folder from scratch
# (about 700 s of its run). Hash the list's contents instead of its path.
if [ ${#ccache_launchers[@]} -gt 0 ]; then
  export CCACHE_IGNOREOPTIONS=${CCACHE_IGNOREOPTIONS:-"-fsanitize-coverage-ignorelist=*"}
  export CCACHE_EXTRAFILES=${CCACHE_EXTRAFILES:-$PWD/tests/fuzz/coverage_ignorelist.txt}
fi
# Configured while it has nothing to build: new, or its configure failed (which leaves a
# CMakeCache.txt but no build.ninja or Makefile).
if [ ! -f "$build/build.ninja" ] && [ ! -f "$build/Makefile" ]; then
  # -O1, the level ASan is made for, with line tables: readable reports, tests not too slow.
  cmake -S . -B "$build" "${configure[@]}" -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
    -DPIPEPLAN_CUDA=OFF -DPIPEPLAN_BENCH=OFF -DPIPEPLAN_SANITIZE=address,undefined \
    -DPIPEPLAN_FUZZ=ON >/dev/null
fi
cmake --build "$build" -j "$jobs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# A test that cannot run in this build gets the ctest label no-sanitizer, with the reason where
# it is set; none has it. (Ranks under mpirun run without the leak check: tests/mpi_support.h.)
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 900 -LE no-sanitizer
