#!/usr/bin/env bash
# Installs the Debian packages pipeplan builds with (only those missing), then configures and
# builds into build/: every target, or with --cli only the pipeplan CLI and, where nvcc is found,
# the CUDA backend module it loads (what tools/quickstart.sh needs; tools/test.sh builds the rest).
# Usage: bash tools/setup.sh [--cli] [-DVAR=VALUE ...]   (-h or --help: what it takes)
#
# A new build/ made for --cli is a unity build (CMAKE_UNITY_BUILD: each library's sources compiled
# as a few combined files, so the large headers are parsed once per file, not once per source):
# the CLI and the CUDA module then build from a cold compiler cache in under 3 minutes on 2 cores
# (docs/results.md). The full build compiles every source on its own, as clang-tidy and the tests
# check them, and turns a unity build/ back into one (the next build then compiles it all again).
# tools/dev/check_unity_build.sh keeps the unity build compiling.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
  cat <<'USAGE'
Usage: bash tools/setup.sh [--cli] [-DVAR=VALUE ...]
Installs the Debian packages pipeplan builds with (only those missing), configures build/ and
builds every target in it.
  --cli         build only the pipeplan CLI (and, where nvcc is found, its CUDA module); a new
                build/ is then a unity build
  -DVAR=VALUE   a CMake option, e.g. -DPIPEPLAN_CUDA=OFF (docs/development/building.md)
  -h, --help    this text
USAGE
}
for arg in "$@"; do
  case "$arg" in -h | --help) usage; exit 0 ;; esac
done
targets=()
unity=OFF
cmake_options=()
for arg in "$@"; do
  case "$arg" in
    --cli) targets=(--target pipeplan); unity=ON ;;
    -D?*) cmake_options+=("$arg") ;;
    *)
      echo "setup: unknown argument '$arg' (it takes --cli, CMake's -DVAR=VALUE and -h/--help)" >&2
      exit 2
      ;;
  esac
done

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
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  # env: sudo does not pass the caller's environment on.
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
fi

# CMake looks for nvcc on PATH only: /usr/local/cuda/bin/nvcc is given to it when nvcc is there
# but not on PATH (tools/dev/nvcc_option.sh).
# shellcheck source=tools/dev/nvcc_option.sh
. tools/dev/nvcc_option.sh
find_nvcc build "${cmake_options[@]}"
if [ ${#nvcc_option[@]} -gt 0 ]; then
  echo "setup: nvcc is not on PATH; CMake is given /usr/local/cuda/bin/nvcc"
fi

# The CUDA backend's fused attention needs NVIDIA's header-only cudnn-frontend: fetched from PyPI
# into .deps/cudnn-frontend (git-ignored) when nvcc is here; without it (no network) the backend
# builds without fused attention and says so.
if [ "$nvcc_found" = true ]; then
  bash tools/dev/fetch_cudnn_frontend.sh
fi

# A new build/ gets the generator, build type and compiler cache; an existing one keeps its own.
# Paths below the checkout are hashed relative to it, so that another clone of the same sources
# hits the cache (tools/dev/sanitize.sh does the same).
# shellcheck source=tools/dev/ccache_env.sh
. tools/dev/ccache_env.sh
configure=()
if [ ! -f build/CMakeCache.txt ]; then
  if command -v ninja >/dev/null; then configure+=(-G Ninja); fi
  configure+=("${ccache_launchers[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD="$unity")
elif [ "$unity" = OFF ] &&
  grep -qiE '^CMAKE_UNITY_BUILD:[A-Z]*=(ON|TRUE|YES|Y|1)$' build/CMakeCache.txt; then
  configure+=(-DCMAKE_UNITY_BUILD=OFF)
fi
# Configured every time (a second or two when nothing changed): a build/ whose configure failed
# has a CMakeCache.txt but nothing to build. Shown: configure's `pipeplan:` lines (what is built
# and what is left out, and why), its warnings and errors.
if ! cmake -S . -B build "${configure[@]}" "${nvcc_option[@]}" "${cmake_options[@]}" |
  sed -n 's/^-- \(pipeplan: \)/\1/p'; then
  echo "setup: configuring build/ failed (CMake's message above)" >&2
  exit 1
fi
cmake --build build -j "$(nproc)" "${targets[@]}"
