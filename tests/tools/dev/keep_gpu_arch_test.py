#!/usr/bin/env python3
"""tools/dev/keep_gpu_arch.py on a CUDA shared library built here with nvcc for sm_80 and sm_90,
with relocatable device code (as NCCL is): the copy keeps sm_90's images byte for byte and no
other, moves no section, keeps the host side's bytes, drops the debug sections, leaves the input
alone and refuses bad arguments with one line. Exits 77 (skipped) where nvcc is not found.

Usage: keep_gpu_arch_test.py REPO-ROOT
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

repo = os.path.abspath(sys.argv[1])
sys.path.insert(0, os.path.join(repo, "tools", "dev"))
import keep_gpu_arch as tool  # noqa: E402

TOOL = os.path.join(repo, "tools", "dev", "keep_gpu_arch.py")
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print(f"FAIL: {what}")


def images(path):
    """{section: [(kind, arch, payload bytes)]} over every container, in order."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    out = {}
    for name, offset, size, _ in tool.elf_sections(data, path):
        if name not in tool.SECTIONS:
            continue
        found = []
        at, end = offset, offset + size
        while at + 16 <= end:
            magic, _, header, body = tool.struct.unpack_from("<IHHQ", data, at)
            if magic not in tool.MAGICS:
                at += 8
                continue
            for entry_at, entry_header, padded, kind, arch in tool.entries(
                    data, at + header, at + header + body, path):
                payload = bytes(data[entry_at + entry_header:entry_at + entry_header + padded])
                found.append((kind, arch, hashlib.sha256(payload).hexdigest()))
            at += header + body
        out[name] = found
    return out


def sections(path):
    with open(path, "rb") as f:
        return tool.elf_sections(bytearray(f.read()), path)


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


nvcc = shutil.which("nvcc")
if nvcc is None:
    print("skipped: nvcc not found; the tool is checked on a library nvcc builds")
    sys.exit(77)

with tempfile.TemporaryDirectory() as tmp:
    a, b = os.path.join(tmp, "a.cu"), os.path.join(tmp, "b.cu")
    with open(a, "w") as f:
        f.write("__device__ int g(int);\n__global__ void k(int* p) { p[0] = g(p[0]); }\n"
                "void launch(int* p) { k<<<1, 1>>>(p); }\n")
    with open(b, "w") as f:
        f.write("__device__ int g(int x) { return x + 1; }\n")
    lib = os.path.join(tmp, "libtwo.so")
    build = subprocess.run(
        [nvcc, "-shared", "-g", "-rdc=true", "-Xcompiler", "-fPIC",
         "-gencode", "arch=compute_80,code=sm_80",
         "-gencode", "arch=compute_90,code=[sm_90,compute_90]", a, b, "-o", lib],
        capture_output=True, text=True)
    if build.returncode != 0:
        print(build.stderr)
        sys.exit("nvcc could not build the test library")
    with open(lib, "rb") as f:
        input_digest = hashlib.sha256(f.read()).hexdigest()
    before = images(lib)
    check(sorted({arch for _, arch, _ in before[".nv_fatbin"]}) == [80, 90],
          f"the test library holds sm_80 and sm_90 linked images: {before['.nv_fatbin']}")
    check("__nv_relfatbin" in before, "the test library has relocatable images")

    out = os.path.join(tmp, "kept.so")
    done = run(lib, out, "--arch", "90")
    check(done.returncode == 0, f"--arch 90 succeeds: {done.stderr}")
    after = images(out)
    for name, found in before.items():
        wanted = [e for e in found if (e[0] == tool.KIND_ELF and e[1] == 90) or
                  (e[0] == tool.KIND_PTX and e[1] <= 90)]
        check(after[name] == wanted,
              f"{name}: sm_90's images and its PTX kept byte for byte, nothing else: "
              f"{after[name]} vs {wanted}")
    check(any(e[1] == 80 for e in before[".nv_fatbin"]) and
          not any(e[1] == 80 for e in after[".nv_fatbin"]), "sm_80's linked image dropped")
    kept_sections = {n: (o, s) for n, o, s, _ in sections(out)}
    for name, offset, size, flags in sections(lib):
        if name.startswith(".debug"):
            check(name not in kept_sections, f"{name} dropped")
        elif flags & 2:  # SHF_ALLOC: loaded, so it must not move
            check(kept_sections.get(name) == (offset, size), f"{name} keeps its offset and size")
    with open(lib, "rb") as f:
        original = f.read()
    with open(out, "rb") as f:
        copy = f.read()
    fat = {n: (o, s) for n, o, s, _ in sections(lib) if n in tool.SECTIONS}
    for name, offset, size, flags in sections(lib):
        if flags & 2 and name not in tool.SECTIONS:
            check(original[offset:offset + size] == copy[offset:offset + size],
                  f"{name} is byte for byte the input's")
    first_fat = min(o for o, _ in fat.values())
    # From the program headers on (the ELF header names where the section headers now are).
    check(original[64:first_fat] == copy[64:first_fat],
          "everything from the program headers to the fat binaries is kept")
    with open(lib, "rb") as f:
        check(hashlib.sha256(f.read()).hexdigest() == input_digest, "the input is left alone")
    check(os.access(out, os.X_OK), "the copy keeps the input's mode")

    dropped = os.path.join(tmp, "dropped.so")
    done = run(lib, dropped, "--arch", "90", "--drop-relocatable")
    check(done.returncode == 0, f"--drop-relocatable succeeds: {done.stderr}")
    after = images(dropped)
    check(after["__nv_relfatbin"] == [], "--drop-relocatable empties the relocatable containers")
    check(after[".nv_fatbin"] == images(out)[".nv_fatbin"],
          "--drop-relocatable keeps the same linked images")

    # A container with no image for the kept architecture is left as it is.
    done = run(lib, os.path.join(tmp, "none.so"), "--arch", "100")
    check(done.returncode == 0 and images(os.path.join(tmp, "none.so")) == before,
          "--arch of an architecture the library lacks leaves every container as it is")

    refusals = [
        ((lib, lib, "--arch", "90"), "is the input"),
        ((os.path.join(tmp, "absent.so"), out, "--arch", "90"), "no such file"),
        ((a, out, "--arch", "90"), "not a 64-bit little-endian ELF file"),
        ((lib, out, "--arch", "9000"), "--arch"),
    ]
    os.symlink(out, os.path.join(tmp, "link.so"))
    refusals.append(((lib, os.path.join(tmp, "link.so"), "--arch", "90"), "symbolic link"))
    for args, words in refusals:
        done = run(*args)
        lines = done.stderr.strip().splitlines()
        check(done.returncode == 1 and len(lines) == 1 and words in lines[0],
              f"{args[1:]} refused in one line naming '{words}': {done.stderr!r}")
    check(not [n for n in os.listdir(tmp) if n.startswith(".")], "no temporary file is left")

if failures:
    sys.exit(f"{len(failures)} checks failed")
print("keep_gpu_arch: every check passed")
