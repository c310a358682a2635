#!/usr/bin/env python3
"""clang-tidy over translation units, skipping those it passed before unchanged.

Usage: tools/dev/tidy_cached.py BUILD_DIR JOBS FILE...

Only the FILEs that BUILD_DIR/compile_commands.json compiles are checked (the headers they include
through them, as .clang-tidy's HeaderFilterRegex says): a source this configuration does not build
(the CUDA backend without nvcc, the MPI or NCCL parts without those) has no compile command, and a
guessed one would fail on headers that are not there. How many were left out is printed.

A unit is skipped when a marker for its key exists in the cache folder ($PIPEPLAN_TIDY_CACHE,
default ~/.cache/pipeplan-clang-tidy). The key hashes what the verdict depends on: clang-tidy's
version, .clang-tidy, each of the unit's compile commands (a source built into two targets has
two, and clang-tidy checks both), the unit preprocessed with each (every header it includes,
system ones too) and the bytes of every file of the checkout it includes, the unit's own among
them (the preprocessed text has no comments, and NOLINT comments change the verdict). The
checkout's path is replaced, so that another clone of the same sources has the same key. A marker
is written only for a clean unit, so a unit with findings runs again every time. Prints
clang-tidy's findings; exits 1 if any unit has one.
"""
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

TIDY_ARGS = ["--quiet", "--extra-arg=-Wno-unknown-warning-option", "--warnings-as-errors=*"]
NOISE = ("warnings generated", "warning generated", "Suppressed", "Use -header-filter",
         "treated as errors")


def preprocess_command(entry):
    """The unit's compile command, made to write the preprocessed source to stdout."""
    args = entry.get("arguments") or shlex.split(entry["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD"):
            continue
        out.append(a)
    # Line markers kept: they name every file the unit includes.
    return out + ["-E"]


# `# 12 "path" 1`: a line marker of the preprocessor's output.
LINE_MARKER = re.compile(rb'^# [0-9]+ "((?:[^"\\]|\\.)*)"', re.MULTILINE)


def unit_key(root, entries, salt):
    h = hashlib.sha256(salt)
    project = set()
    for entry in entries:
        pre = subprocess.run(preprocess_command(entry), cwd=entry["directory"],
                             capture_output=True, check=False)
        if pre.returncode != 0:
            return None  # clang-tidy will say why
        command = entry.get("command") or " ".join(entry["arguments"])
        h.update(command.replace(root, ".").encode())
        h.update(pre.stdout.replace(root.encode(), b"."))
        for name in LINE_MARKER.findall(pre.stdout):
            name = re.sub(rb"\\(.)", rb"\1", name)  # the marker escapes \ and "
            path = os.path.normpath(os.path.join(entry["directory"], os.fsdecode(name)))
            if path.startswith(root + os.sep) and os.path.isfile(path):
                project.add(path)
    for path in sorted(project):
        h.update(os.path.relpath(path, root).encode() + b"\0")
        h.update(Path(path).read_bytes())
    return h.hexdigest()


def main():
    build, jobs, candidates = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    root = str(Path.cwd().resolve())
    cache = Path(os.environ.get("PIPEPLAN_TIDY_CACHE",
                                Path.home() / ".cache" / "pipeplan-clang-tidy"))
    cache.mkdir(parents=True, exist_ok=True)
    database = Path(build) / "compile_commands.json"
    entries = {}
    for e in json.loads(database.read_text()):
        path = str((Path(e["directory"]) / e["file"]).resolve())
        entries.setdefault(path, []).append(e)
    files = [f for f in candidates if str(Path(f).resolve()) in entries]
    left_out = [f for f in candidates if str(Path(f).resolve()) not in entries]
    if left_out:
        print(f"lint: clang-tidy leaves out {len(left_out)} of {len(candidates)} sources, which "
              f"{database} has no compile command for (not built in this configuration), e.g. "
              f"{left_out[0]}")
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True,
                             check=True).stdout
    salt = version + Path(".clang-tidy").read_bytes() + " ".join(TIDY_ARGS).encode()

    def check(f):
        key = unit_key(root, entries[str(Path(f).resolve())], salt)
        if key and (cache / key).exists():
            return f, True, "", True
        run = subprocess.run(["clang-tidy", "-p", build, *TIDY_ARGS, f], capture_output=True,
                             text=True, check=False)
        text = "\n".join(line for line in (run.stdout + run.stderr).splitlines()
                         if line and not any(n in line for n in NOISE))
        if run.returncode == 0 and key:
            tmp = cache / (key + ".tmp")
            tmp.write_text(f + "\n")
            tmp.replace(cache / key)
        return f, run.returncode == 0, text, False

    failed, cached = [], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for f, ok, text, from_cache in pool.map(check, files):
            cached += from_cache
            if text:
                print(text)
            if not ok:
                failed.append(f)
    print(f"lint: clang-tidy: {len(files) - len(failed)} of {len(files)} units clean "
          f"({cached} unchanged since a clean run, from {cache})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
