#!/usr/bin/env bash
# Fetches a newer NCCL than the CUDA toolkit's into .deps/nccl (git-ignored), where
# runtime/cuda/CMakeLists.txt looks for it first: NCCL 2.30 and later run several ranks on one GPU
# (NCCL_MULTI_RANK_GPU_ENABLE=1), which tests the whole NCCL path on a single GPU. NVIDIA ships
# NCCL as the PyPI wheel nvidia-nccl-cu13: `pip download --no-deps` of the pinned version, then
# the wheel's nccl.h and libnccl.so.2 are unpacked to .deps/nccl/{include,lib} (with the
# libnccl.so link a linker looks for). The library is about 330 MB.
#
# Usage: bash tools/dev/fetch_nccl.sh [destination-root]   (default .deps/nccl), then configure
# (PIPEPLAN_NCCL_VERSION=X.Y.Z picks another wheel than the pinned one; 2.30 or later for several
# ranks on one GPU)
# again (a build folder that found another NCCL keeps it: remove PIPEPLAN_NCCL_INCLUDE_DIR and
# PIPEPLAN_NCCL_LIBRARY from its cache, or configure a fresh folder). `pipeplan env` and the
# header of a run over NCCL say which NCCL was loaded, from where.
# Without network or pip it says so and exits 1 (nothing is built without it here: the toolkit's
# NCCL stays in use).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
version=${PIPEPLAN_NCCL_VERSION:-2.31.2}
dest=${1:-.deps/nccl}
stamp="$dest/VERSION"
if [[ -f "$dest/include/nccl.h" && -f "$dest/lib/libnccl.so.2" && -f "$stamp" &&
  $(cat "$stamp") == "$version" ]]; then
  echo "NCCL $version: already in $dest"
  exit 0
fi
# shellcheck source=tools/dev/pip_wheel.sh
source tools/dev/pip_wheel.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$dest.partial"' EXIT
wheel=$(download_wheel fetch_nccl "nvidia-nccl-cu13==$version" "$tmp") || exit 1
python=$(command -v python3)
rm -rf "$dest.partial"
mkdir -p "$dest.partial/include" "$dest.partial/lib"
# zipfile, not unzip: python3 is there already, unzip may not be. Only the host API header and
# the library: the device-side headers are for kernels that call NCCL, which pipeplan has none of.
"$python" - "$wheel" "$dest.partial" << 'PY'
import os, shutil, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
wanted = {"nvidia/nccl/include/nccl.h": "include/nccl.h",
          "nvidia/nccl/lib/libnccl.so.2": "lib/libnccl.so.2"}
with zipfile.ZipFile(wheel) as z:
    names = set(z.namelist())
    for inside, target in wanted.items():
        if inside not in names:
            sys.exit(f"{wheel}: no {inside} inside")
        with z.open(inside) as src, open(os.path.join(out, target), "wb") as dst:
            shutil.copyfileobj(src, dst)
PY
chmod 755 "$dest.partial/lib/libnccl.so.2"
ln -s libnccl.so.2 "$dest.partial/lib/libnccl.so"
echo "$version" > "$dest.partial/VERSION"
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "NCCL $version: $dest/include/nccl.h and $dest/lib/libnccl.so.2 (configure again to use it)"
