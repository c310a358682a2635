#!/usr/bin/env python3
"""clang-tidy over translation units, skipping those it passed before unchanged.

Usage: tools/dev/tidy_cached.py BUILD_DIR JOBS FILE...

A unit is skipped when a marker for its key exists in the cache folder ($PIPEPLAN_TIDY_CACHE,
default ~/.cache/pipeplan-clang-tidy). The key hashes what the verdict depends on: clang-tidy's
version, .clang-tidy, the unit's compile command, and the unit preprocessed with that command
(every header it includes, system ones too, with the checkout's path replaced so that another
clone of the same sources has the same key). A marker is written only for a clean unit, so a unit
with findings runs again every time. Prints clang-tidy's findings; exits 1 if any unit has one.
"""
import concurrent.futures
import hashlib
import json
import os
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
    return out + ["-E", "-P"]


def unit_key(root, entry, salt):
    pre = subprocess.run(preprocess_command(entry), cwd=entry["directory"],
                         capture_output=True, check=False)
    if pre.returncode != 0:
        return None  # clang-tidy will say why
    h = hashlib.sha256(salt)
    command = entry.get("command") or " ".join(entry["arguments"])
    h.update(command.replace(root, ".").encode())
    h.update(pre.stdout.replace(root.encode(), b"."))
    return h.hexdigest()


def main():
    build, jobs, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    root = str(Path.cwd().resolve())
    cache = Path(os.environ.get("PIPEPLAN_TIDY_CACHE",
                                Path.home() / ".cache" / "pipeplan-clang-tidy"))
    cache.mkdir(parents=True, exist_ok=True)
    entries = {}
    for e in json.loads((Path(build) / "compile_commands.json").read_text()):
        entries[str((Path(e["directory"]) / e["file"]).resolve())] = e
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True,
                             check=True).stdout
    salt = version + Path(".clang-tidy").read_bytes() + " ".join(TIDY_ARGS).encode()

    def check(f):
        entry = entries.get(str(Path(f).resolve()))
        key = unit_key(root, entry, salt) if entry else None
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
