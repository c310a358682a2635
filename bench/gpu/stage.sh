#!/usr/bin/env bash
# Builds the binaries bench/gpu/run.sh measures with and stages them, stripped and relocatable,
# into one folder to copy to a GPU machine that has no toolchain (run.sh --staged DIR there).
#
# Usage: bash bench/gpu/stage.sh [BUILD-DIR] [STAGED-DIR]
#        (defaults build-gpu and build-gpu/staged; /build*/ is git-ignored)
#
# The build: Release, CUDA architectures $CUDA_ARCHITECTURES (default 90: H100, H200), fused
# attention required (PIPEPLAN_FUSED_ATTENTION=ON: the cudnn-frontend headers in .deps/, fetched
# first if missing), and without MPI (CMAKE_DISABLE_FIND_PACKAGE_MPI), so that pipeplan starts on a
# machine without Open MPI. Targets: pipeplan, the CUDA module, pipeplan_cuda_tests, bench_block.
# Staged: bin/ (those four, stripped), lib/libstdc++.so.6 (used there only if the machine's is
# older than the build's), BUILD_INFO (the commit, and where the checkout differs from it the
# sha256 of `git diff HEAD`; options, what each binary loads per ldd, sizes).
# JOBS (default 2) sets the build's parallelism.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
staged=${2:-$build/staged}
jobs=${JOBS:-2}

bash tools/dev/fetch_cudnn_frontend.sh
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi
mkdir -p "$build"
cmake -S . -B "$build" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DPIPEPLAN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-90}" -DPIPEPLAN_FUSED_ATTENTION=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DPIPEPLAN_TESTS=ON -DPIPEPLAN_BENCH=ON > "$build/configure.log"
grep 'pipeplan:' "$build/configure.log"
nice cmake --build "$build" -j "$jobs" --target pipeplan pipeplan_cuda_plugin pipeplan_cuda_tests \
  bench_block

rm -rf "$staged"
mkdir -p "$staged/bin" "$staged/lib"
binaries=("$build/tools/pipeplan" "$build/tools/libpipeplan_cuda.so"
  "$build/tests/runtime/cuda/pipeplan_cuda_tests" "$build/bench/cuda/bench_block")
for binary in "${binaries[@]}"; do
  # --strip-unneeded keeps the dynamic symbols the module binds to in pipeplan (-rdynamic).
  strip --strip-unneeded -o "$staged/bin/$(basename "$binary")" "$binary"
done
libstdcxx=$(g++ -print-file-name=libstdc++.so.6)
cp -L "$libstdcxx" "$staged/lib/libstdc++.so.6"

{
  echo "# what bench/gpu/stage.sh staged"
  # The uncommitted changes built in, told apart by their hash (run.sh's manifest copies this
  # line as staged_commit).
  changes=''
  if ! git diff --quiet HEAD; then
    changes=" (+ uncommitted changes: git diff HEAD sha256"
    changes+=" $(git diff HEAD | sha256sum | cut -c 1-16))"
  fi
  echo "commit: $(git rev-parse HEAD)$changes"
  echo "branch: $(git rev-parse --abbrev-ref HEAD)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "nvcc: $(nvcc --version | tail -n 1)"
  echo "g++: $(g++ --version | head -n 1)"
  echo "cudnn-frontend: $(cat .deps/cudnn-frontend/VERSION)"
  grep 'pipeplan:' "$build/configure.log"
  for file in "$staged"/bin/*; do
    echo
    echo "== ldd $(basename "$file") (on the build machine)"
    ldd "$file" | grep -v -E 'linux-vdso|ld-linux' || true
    echo "   needs: $(objdump -T "$file" | grep -o 'GLIBC_[0-9.]*' | sort -V -u | tail -n 1)," \
      "$(objdump -T "$file" | grep -o 'GLIBCXX_[0-9.]*' | sort -V -u | tail -n 1)"
  done
  echo
  echo "== sizes"
  du -ab "$staged" | sort -k2
} > "$staged/BUILD_INFO"

total=$(du -sb "$staged" | cut -f1)
echo "staged $staged: $((total / 1024 / 1024)) MiB ($total bytes); see $staged/BUILD_INFO"
