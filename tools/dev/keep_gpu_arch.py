#!/usr/bin/env python3
"""Copies a CUDA shared library keeping the device code of the named GPU architectures only.

A library built for every GPU generation carries one compiled image per architecture in its fat
binaries: NCCL's libnccl.so.2 from the nvidia-nccl-cu13 wheel is about 300 MB, of which the images
for one architecture are 14 MB (linked) and 18 MB (relocatable), and 70 MB are debug sections.
For a machine whose GPUs are all of one kind (H100 and H200: sm_90), this writes a copy that:

- keeps, in every fat binary container that has an image for a kept architecture, only the
  compiled images (ELF) of the kept architectures and the PTX that can be compiled for them (PTX
  of an architecture at most the highest kept one); a container with no image for a kept
  architecture is left as it is;
- with --drop-relocatable, also empties the relocatable (-rdc) images' containers, which the
  CUDA runtime is handed beside the linked image (nvcc's crt/link.stub) for linking at load time:
  drop them only where the linked images hold code for the GPU;
- drops the debug sections (objcopy --strip-debug), which are never loaded.

Section offsets and addresses do not move (a container's kept entries move to its start and the
rest of it becomes zeros), so the host code, its relocations and symbols are byte for byte the
input's; the file keeps its size (less the debug sections) and compresses to about what it
holds: `xz` makes NCCL 2.31's sm_90 copy about 34 MB, or 16 MB with --drop-relocatable.

Usage: keep_gpu_arch.py INPUT OUTPUT --arch 90 [--arch 100 ...] [--drop-relocatable]
Prints one line per section: containers, entries kept and dropped, bytes kept. Writes OUTPUT
through a temporary file beside it (renamed over it on success); refuses OUTPUT = INPUT.
Fat binary layout: a 16-byte header (magic, version, header size, size of what follows) and its
entries, each a header (kind: 1 PTX, 2 ELF; header size; padded payload size; SM architecture at
byte 28) followed by its payload; docs/development/building.md says where this is used.
"""
import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile

MAGICS = (0xBA55ED50, 0x466243B1)
SECTIONS = {".nv_fatbin": "linked", "__nv_relfatbin": "relocatable"}
ENTRY_MIN = 64
KIND_PTX, KIND_ELF = 1, 2


class Refusal(Exception):
    pass


def elf_sections(data, path):
    """(name, file offset, size, flags) of each section, from the ELF64 little-endian header."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise Refusal(f"{path}: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or shoff + shnum * shentsize > len(data) or shstrndx >= shnum:
        raise Refusal(f"{path}: its section header table is missing or truncated")
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at, names_size = headers[shstrndx][4], headers[shstrndx][5]
    names = data[names_at:names_at + names_size]
    out = []
    for name_at, kind, flags, _addr, offset, size in headers:
        name = names[name_at:names.index(b"\0", name_at)].decode("ascii", "replace")
        if kind != 8:  # SHT_NOBITS holds no bytes in the file
            out.append((name, offset, size, flags))
    return out


def entries(data, start, end, path):
    """The (offset, header size, padded payload size, kind, arch) of a container's entries."""
    out = []
    at = start
    while at + ENTRY_MIN <= end:
        kind, _, header, padded = struct.unpack_from("<HHII", data, at)
        arch, = struct.unpack_from("<I", data, at + 28)
        if header < ENTRY_MIN or at + header + padded > end:
            raise Refusal(f"{path}: a fat binary entry at byte {at} runs past its container")
        out.append((at, header, padded, kind, arch))
        at += header + padded
    return out


def keep(data, section, offset, size, arches, drop_all, path):
    """Rewrites the containers of one section in place; returns its counts."""
    counts = {"containers": 0, "kept": 0, "dropped": 0, "kept_bytes": 0, "untouched": 0}
    at, end = offset, offset + size
    top = max(arches)
    while at + 16 <= end:
        magic, _version, header, body = struct.unpack_from("<IHHQ", data, at)
        if magic not in MAGICS:
            at += 8  # containers start 8-byte aligned; the gaps between them are padding
            continue
        container_end = at + header + body
        if header < 16 or container_end > end:
            raise Refusal(f"{path}: {section}: a fat binary container at byte {at} runs past "
                          "its section")
        counts["containers"] += 1
        found = entries(data, at + header, container_end, path)
        has_kept = any(kind == KIND_ELF and arch in arches for _, _, _, kind, arch in found)
        if not has_kept and not drop_all:
            counts["untouched"] += 1
            at = container_end
            continue
        kept = []
        for entry_at, entry_header, padded, kind, arch in found:
            wanted = not drop_all and ((kind == KIND_ELF and arch in arches) or
                                       (kind == KIND_PTX and arch <= top))
            if wanted:
                kept.append(bytes(data[entry_at:entry_at + entry_header + padded]))
                counts["kept"] += 1
                counts["kept_bytes"] += padded
            else:
                counts["dropped"] += 1
        new_body = b"".join(kept)
        data[at + header:container_end] = new_body + bytes(body - len(new_body))
        struct.pack_into("<Q", data, at + 8, len(new_body))
        at = container_end
    return counts


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--arch", type=int, action="append", required=True,
                        help="SM architecture to keep, e.g. 90 (H100, H200); repeatable")
    parser.add_argument("--drop-relocatable", action="store_true",
                        help="empty the relocatable images' containers as well")
    args = parser.parse_args(argv)
    try:
        if any(a < 10 or a > 999 for a in args.arch):
            raise Refusal(f"--arch: {args.arch} must be SM numbers such as 90")
        if not os.path.isfile(args.input):
            raise Refusal(f"{args.input}: no such file")
        if os.path.exists(args.output) and os.path.samefile(args.input, args.output):
            raise Refusal(f"{args.output}: is the input; name another output")
        if os.path.islink(args.output):
            raise Refusal(f"{args.output}: is a symbolic link; name a plain file")
        objcopy = shutil.which("objcopy")
        if objcopy is None:
            raise Refusal("objcopy: not found (binutils), needed to drop the debug sections")
        with open(args.input, "rb") as f:
            data = bytearray(f.read())
        arches = set(args.arch)
        found = False
        lines = []
        for name, offset, size, _flags in elf_sections(data, args.input):
            if name not in SECTIONS:
                continue
            found = True
            drop_all = args.drop_relocatable and SECTIONS[name] == "relocatable"
            c = keep(data, name, offset, size, arches, drop_all, args.input)
            lines.append(f"{name} ({SECTIONS[name]}): {c['containers']} containers "
                         f"({c['untouched']} without code for the kept architectures, left as "
                         f"they are), {c['kept']} entries kept, {c['dropped']} dropped, "
                         f"{c['kept_bytes'] / 1e6:.1f} MB kept")
        if not found:
            raise Refusal(f"{args.input}: holds no fat binary (.nv_fatbin or __nv_relfatbin)")
        folder = os.path.dirname(os.path.abspath(args.output))
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(args.output) + ".", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            done = subprocess.run([objcopy, "--strip-debug", tmp], capture_output=True, text=True)
            if done.returncode != 0:
                raise Refusal(f"objcopy --strip-debug: {done.stderr.strip().splitlines()[-1]}")
            os.chmod(tmp, os.stat(args.input).st_mode & 0o777)
            os.replace(tmp, args.output)
        except BaseException:
            os.unlink(tmp)
            raise
    except Refusal as refusal:
        print(f"keep_gpu_arch: {refusal}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"keep_gpu_arch: {error.filename}: {error.strerror}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    print(f"{args.output}: {os.path.getsize(args.output) / 1e6:.1f} MB, device code for "
          f"sm_{', sm_'.join(str(a) for a in sorted(arches))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
