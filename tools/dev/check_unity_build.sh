#!/usr/bin/env bash
# The quickstart's unity build of the CLI and its CUDA module (tools/setup.sh --cli) compiles: two
# sources of one library that define the same name in an anonymous namespace are one file there.
# Builds into build-unity/ (through ccache when installed, as tools/setup.sh does).
# Usage: bash tools/dev/check_unity_build.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
# shellcheck source=tools/dev/ccache_env.sh
. tools/dev/ccache_env.sh
# nvcc where tools/setup.sh finds it: on PATH, else /usr/local/cuda/bin.
# shellcheck source=tools/dev/nvcc_option.sh
. tools/dev/nvcc_option.sh
find_nvcc build-unity
cmake -S . -B build-unity "${generator[@]}" "${ccache_launchers[@]}" "${nvcc_option[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON -DPIPEPLAN_TESTS=OFF -DPIPEPLAN_BENCH=OFF \
  >/dev/null
cmake --build build-unity -j "$(nproc)" --target pipeplan
./build-unity/tools/pipeplan --version >/dev/null
echo "unity build: the CLI (and CUDA module, where nvcc is found) compile"
