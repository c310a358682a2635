#!/usr/bin/env bash
# Run ON THE GPU MACHINE (no network): unpack .debs/ (from tools/device/prepare.sh) into a
# prefix with dpkg -x, configure with CMAKE_PREFIX_PATH at it, build with the CUDA backend and
# run the tests (the GPU ones included). Usage: tools/device/build.sh [build-dir] [cuda:ON|OFF]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-device}
cuda=${2:-ON}
prefix=${PIPEPLAN_DEPS_PREFIX:-/tmp/deps}
mkdir -p "$prefix"
for deb in .debs/*.deb; do dpkg -x "$deb" "$prefix"; done
export PATH="$prefix/usr/bin:/usr/local/cuda/bin:$PATH"
generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi
cmake -S . -B "$build" "${generator[@]}" -DPIPEPLAN_BENCH=OFF -DPIPEPLAN_CUDA="$cuda" \
  -DCMAKE_PREFIX_PATH="$prefix/usr;$prefix/usr/lib/x86_64-linux-gnu/cmake" \
  -DBoost_INCLUDE_DIR="$prefix/usr/include" -DCMAKE_CUDA_ARCHITECTURES=90
if [[ ${PIPEPLAN_CONFIGURE_ONLY:-0} == 1 ]]; then exit 0; fi  # checks the prefix recipe
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j 4
