#!/usr/bin/env bash
# Installs the Debian packages pipeplan builds with (only those missing), then configures and
# builds into build/: every target, or with --cli only the pipeplan CLI and, where nvcc is found,
# the CUDA backend module it loads (what tools/quickstart.sh needs; tools/test.sh builds the rest).
# Usage: bash tools/setup.sh [--cli] [extra cmake -D options]
#
# A new build/ made for --cli is a unity build (CMAKE_UNITY_BUILD: each library's sources compiled
# as a few combined files, so the large headers are parsed once per file, not once per source):
# the CLI and the CUDA module then build from a cold compiler cache in under 3 minutes on 2 cores
# (docs/results.md). The full build compiles every source on its own, as clang-tidy and the tests
# check them, and turns a unity build/ back into one (the next build then compiles it all again).
# tools/dev/check_unity_build.sh keeps the unity build compiling.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
targets=()
unity=OFF
if [ "${1:-}" = "--cli" ]; then
  targets=(--target pipeplan)
  unity=ON
  shift
fi

# libopenmpi-dev, openmpi-bin: multi-process runs under mpirun (found by CMake's FindMPI; the
# build works without them, and `run --launcher mpi` then says MPI support is not built).
# clang, libclang-rt-dev (libclang_rt.asan, .ubsan_standalone, .fuzzer) and llvm
# (llvm-symbolizer, for readable reports): the sanitizer build and fuzz targets, tools/dev/sanitize.sh.
# ccache: rebuilds of unchanged sources (a fresh clone, the sanitizer build) come from its cache.
packages=(cmake ninja-build g++ make nlohmann-json3-dev libcli11-dev libboost-graph-dev
          libgtest-dev libgmock-dev libbenchmark-dev clang-format clang-tidy
          libopenmpi-dev openmpi-bin clang libclang-rt-dev llvm ccache)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# The CUDA backend's fused attention needs NVIDIA's header-only cudnn-frontend: fetched from PyPI
# into .deps/cudnn-frontend (git-ignored) when nvcc is here; without it (no network) the backend
# builds without fused attention and says so.
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  bash tools/dev/fetch_cudnn_frontend.sh
fi

generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
# Paths below the checkout are hashed relative to it, so that another clone of the same sources
# hits the cache (tools/dev/sanitize.sh does the same).
. tools/dev/ccache_env.sh
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${generator[@]}" "${ccache_launchers[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_UNITY_BUILD="$unity" "$@" >/dev/null
elif [ "$unity" = OFF ] && grep -q '^CMAKE_UNITY_BUILD:BOOL=ON$' build/CMakeCache.txt; then
  cmake -S . -B build -DCMAKE_UNITY_BUILD=OFF "$@" >/dev/null
elif [ $# -gt 0 ]; then
  cmake -S . -B build "$@" >/dev/null
fi
cmake --build build -j "$(nproc)" "${targets[@]}"
