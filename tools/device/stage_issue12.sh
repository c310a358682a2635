#!/usr/bin/env bash
# Run HERE (the CPU machine with nvcc 13.0, which is the GPU machine's CUDA): build what issue 12
# runs on the GPU and stage it, stripped, into one git-ignored folder to name in the device tool's
# `carry` (64 MiB for the whole working tree). tools/device/issue12.sh runs it there.
#
# Usage: bash tools/device/stage_issue12.sh [build-dir] [carry-dir]
#        (defaults build-gpu and build-gpu/carry; both under /build*/, which .gitignore ignores)
#
# The build: Release, sm_90 only, fused attention required (PIPEPLAN_FUSED_ATTENTION=ON: the
# cudnn-frontend headers in .deps/, fetched first if missing), and WITHOUT MPI
# (CMAKE_DISABLE_FIND_PACKAGE_MPI): the GPU image has no Open MPI, and a pipeplan linked with it
# would not start there. Targets: pipeplan, the CUDA module, pipeplan_cuda_tests, bench_block.
# Staged: bin/ (those four, stripped), lib/libstdc++.so.6 (used there only if the image's is older
# than GCC 12's), BUILD_INFO (commit, options, what each binary loads per ldd, sizes).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
carry=${2:-$build/carry}
jobs=${JOBS:-2}

bash tools/dev/fetch_cudnn_frontend.sh
export CCACHE_DIR=${CCACHE_DIR:-/work/.ccache} CCACHE_BASEDIR=${CCACHE_BASEDIR:-/work}
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi
mkdir -p "$build"
cmake -S . -B "$build" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DPIPEPLAN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPIPEPLAN_FUSED_ATTENTION=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DPIPEPLAN_TESTS=ON -DPIPEPLAN_BENCH=ON > "$build/configure.log"
grep 'pipeplan:' "$build/configure.log"
nice cmake --build "$build" -j "$jobs" --target pipeplan pipeplan_cuda_plugin pipeplan_cuda_tests \
  bench_block

rm -rf "$carry"
mkdir -p "$carry/bin" "$carry/lib"
binaries=("$build/tools/pipeplan" "$build/tools/libpipeplan_cuda.so"
  "$build/tests/runtime/cuda/pipeplan_cuda_tests" "$build/bench/cuda/bench_block")
for binary in "${binaries[@]}"; do
  # --strip-unneeded keeps the dynamic symbols the module binds to in pipeplan (-rdynamic).
  strip --strip-unneeded -o "$carry/bin/$(basename "$binary")" "$binary"
done
libstdcxx=$(g++ -print-file-name=libstdc++.so.6)
cp -L "$libstdcxx" "$carry/lib/libstdc++.so.6"

{
  echo "# what tools/device/stage_issue12.sh staged"
  echo "commit: $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (+ uncommitted changes)')"
  echo "branch: $(git rev-parse --abbrev-ref HEAD)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "nvcc: $(nvcc --version | tail -n 1)"
  echo "g++: $(g++ --version | head -n 1)"
  echo "cudnn-frontend: $(cat .deps/cudnn-frontend/VERSION)"
  grep 'pipeplan:' "$build/configure.log"
  for file in "$carry"/bin/*; do
    echo
    echo "== ldd $(basename "$file") (on the build machine)"
    ldd "$file" | grep -v -E 'linux-vdso|ld-linux' || true
    echo "   needs: $(objdump -T "$file" | grep -o 'GLIBC_[0-9.]*' | sort -V -u | tail -n 1)," \
      "$(objdump -T "$file" | grep -o 'GLIBCXX_[0-9.]*' | sort -V -u | tail -n 1)"
  done
  echo
  echo "== sizes"
  du -ab "$carry" | sort -k2
} > "$carry/BUILD_INFO"

total=$(du -sb "$carry" | cut -f1)
echo "staged $carry: $((total / 1024 / 1024)) MiB ($total bytes); see $carry/BUILD_INFO"
if ((total > 48 * 1024 * 1024)); then
  echo "stage_issue12: $carry is over 48 MiB; the device tool carries 64 MiB with the tree" >&2
  exit 1
fi
