# shellcheck shell=bash
# Sourced by tools/setup.sh and tools/dev/check_unity_build.sh. CMake looks for nvcc on PATH only,
# so where nvcc is not on PATH but the toolkit's usual /usr/local/cuda/bin/nvcc is there, the CUDA
# backend would be left out. `find_nvcc BUILD_DIR [CMAKE_OPTION...]` sets nvcc_found (true when
# nvcc is either) and nvcc_option: -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc in that case,
# unless the options or BUILD_DIR's cache name a CUDA compiler already; else nothing.
# shellcheck disable=SC2034 # nvcc_found and nvcc_option are read by the scripts that source this
find_nvcc() {
  local build=$1 option named=false
  shift
  nvcc_found=false
  nvcc_option=()
  if command -v nvcc >/dev/null; then
    nvcc_found=true
    return 0
  fi
  [ -x /usr/local/cuda/bin/nvcc ] || return 0
  nvcc_found=true
  for option in "$@"; do
    case "$option" in -DCMAKE_CUDA_COMPILER=* | -DCMAKE_CUDA_COMPILER:*) named=true ;; esac
  done
  if [ -f "$build/CMakeCache.txt" ] &&
    grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=/' "$build/CMakeCache.txt"; then
    named=true
  fi
  if [ "$named" = false ]; then
    nvcc_option=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
  fi
}
