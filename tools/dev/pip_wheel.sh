# shellcheck shell=bash
# Sourced by tools/dev/fetch_cudnn_frontend.sh and tools/dev/fetch_nccl.sh: one pinned wheel from
# PyPI, without its dependencies, for the files inside it.
#
# download_wheel WHAT PACKAGE==VERSION FOLDER: downloads the wheel into FOLDER and prints its path.
# Where there is no python3 with pip, or the download fails (no network), it says so on stderr,
# naming WHAT, and returns 1; the caller decides what that means for the build.
download_wheel() {
  local what=$1 requirement=$2 folder=$3 python
  python=$(command -v python3 || true)
  if [[ -z $python ]] || ! "$python" -m pip --version > /dev/null 2>&1; then
    echo "$what: no python3 with pip here" >&2
    return 1
  fi
  if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: "$requirement" \
    -d "$folder" > "$folder/pip.log" 2>&1; then
    echo "$what: pip download $requirement failed (no network?):" >&2
    tail -n 3 "$folder/pip.log" >&2
    return 1
  fi
  find "$folder" -maxdepth 1 -name '*.whl' | head -n 1
}
