#!/usr/bin/env bash
# Fetches NVIDIA's header-only cudnn-frontend (the C++ graph API the CUDA backend's fused
# attention is written against, runtime/cuda/sdpa.cpp) into .deps/cudnn-frontend/include
# (git-ignored), where runtime/cuda/CMakeLists.txt looks for it. Its headers ship inside the
# PyPI wheel nvidia-cudnn-frontend: `pip download --no-deps` of the pinned version, then the
# wheel's include/ is unpacked (the wheel's Python parts are not used). cuDNN itself (cudnn.h
# and libcudnn.so.9) comes from the CUDA toolkit or a PyTorch install, not from here.
#
# Usage: bash tools/dev/fetch_cudnn_frontend.sh [destination-root]   (default .deps/cudnn-frontend)
# Without network or pip it says so and exits 0: the backend then builds without fused
# attention, configure says so, and --attention flash is refused at run time in one line
# (docs/development/building.md, "The CUDA backend").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
version=1.32.0  # cudnn_frontend_version.h: 1.32.0; compiled against cuDNN 9.19 (CUDA 13.0)
dest=${1:-.deps/cudnn-frontend}
stamp="$dest/VERSION"
if [[ -f "$dest/include/cudnn_frontend.h" && -f "$stamp" && $(cat "$stamp") == "$version" ]]; then
  echo "cudnn-frontend $version: already in $dest/include"
  exit 0
fi
# shellcheck source=tools/dev/pip_wheel.sh
source tools/dev/pip_wheel.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! wheel=$(download_wheel cudnn-frontend "nvidia-cudnn-frontend==$version" "$tmp"); then
  echo "cudnn-frontend: building without fused attention" >&2
  exit 0
fi
python=$(command -v python3)
rm -rf "$dest.partial"
mkdir -p "$dest.partial"
# zipfile, not unzip: python3 is there already, unzip may not be.
"$python" - "$wheel" "$dest.partial" << 'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("include/") and not n.endswith("/")]
    if not any(n == "include/cudnn_frontend.h" for n in names):
        sys.exit(f"{wheel}: no include/cudnn_frontend.h inside")
    for name in names:
        z.extract(name, out)
PY
echo "$version" > "$dest.partial/VERSION"
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "cudnn-frontend $version: headers in $dest/include ($(find "$dest/include" -type f | wc -l) files)"
