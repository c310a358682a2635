# shellcheck shell=bash
# Sourced by the checks of tools/dev. `tracked_files NAME [PATTERN...]` fills the array `files`
# with the files git tracks in the current folder (those matching a PATTERN; none: every file),
# or ends the script with one line prefixed NAME where the folder is not the top of a git
# checkout (the files checked are the ones git tracks) or git lists none.
# shellcheck disable=SC2034 # `files` is read by the scripts that source this
tracked_files() {
  local name=$1
  shift
  if [ "$(git rev-parse --show-toplevel 2>/dev/null)" != "$(pwd -P)" ]; then
    echo "$name: $(pwd -P) is not a git checkout (the files checked are the ones git tracks)" >&2
    exit 1
  fi
  mapfile -d '' -t files < <(git ls-files -z -- "$@")
  if [ ${#files[@]} -eq 0 ]; then
    echo "$name: git ls-files lists no ${*:-files} in $(pwd -P)" >&2
    exit 1
  fi
}
