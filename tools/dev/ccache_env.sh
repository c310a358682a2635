# shellcheck shell=bash
# Sourced by tools/setup.sh and tools/dev/sanitize.sh: when ccache is installed, compile through it
# with paths hashed relative to the checkout (CCACHE_BASEDIR) and without the working directory
# in the hash (CCACHE_NOHASHDIR: the sanitizer build's line tables name it), so that a fresh clone
# of unchanged sources, as CI makes, hits the cache. Sets ccache_launchers to the CMake options
# (empty without ccache). The caller's own CCACHE_* settings win.
# shellcheck disable=SC2034 # read by the scripts that source this one
ccache_launchers=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  # shellcheck disable=SC2034
  ccache_launchers=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
