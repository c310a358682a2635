#!/usr/bin/env bash
# The test suite under ThreadSanitizer, in its own build folder (clang, CUDA off, no benchmarks):
# the planner's helper thread (run_beside, run_items_beside), the runtime's stream threads and
# transports. Not part of tools/test.sh (a third build of the suite): run it after changing
# code that shares data between threads. Any data race fails its test.
# Usage: bash tools/dev/tsan.sh [BUILD_DIR] [ctest arguments...]
#        (default build-tsan; needs clang; e.g. `bash tools/dev/tsan.sh build-tsan -R Auto`)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build-tsan}
shift || true
jobs=$(nproc)
configure=()
if command -v ninja >/dev/null; then configure+=(-G Ninja); fi
# shellcheck source=tools/dev/ccache_env.sh
. tools/dev/ccache_env.sh
configure+=("${ccache_launchers[@]}")
# Configured while it has nothing to build: new, or its configure failed (which leaves a
# CMakeCache.txt but no build.ninja or Makefile).
if [ ! -f "$build/build.ninja" ] && [ ! -f "$build/Makefile" ]; then
  cmake -S . -B "$build" "${configure[@]}" -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
    -DPIPEPLAN_CUDA=OFF -DPIPEPLAN_BENCH=OFF -DPIPEPLAN_SANITIZE=thread >/dev/null
fi
cmake --build "$build" -j "$jobs"
# die_after_fork=0: the launcher tests fork ranks from a process whose helper thread runs.
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:die_after_fork=0}
# Left out: the CPU runs of the CUDA kernels (Kernels.*) and the CPU stand-in for the GPU
# (fake-device), whose thread blocks and streams are fibers, which the tool does not follow (it
# crashes in them); and the runs under mpirun (Open MPI's own locking and shared-memory copies are
# not instrumented, so the tool reports them).
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 1800 \
  -LE 'no-sanitizer|fake-device' -E '^Kernels\.|Mpi' "$@"
