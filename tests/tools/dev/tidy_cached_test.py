#!/usr/bin/env python3
"""tools/dev/tidy_cached.py on a two-file project: a source without a compile command is left out
and counted (never checked with a guessed command), a clean unit is not checked again while
nothing it depends on changes, and a comment of a header it includes does count: taking a NOLINT
out brings the finding back, rewording it checks the unit again.

Usage: tidy_cached_test.py SOURCE_DIR   (exit 77, skipped, without clang-tidy or c++)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def main():
    source_dir = Path(sys.argv[1]).resolve()
    tidy = source_dir / "tools" / "dev" / "tidy_cached.py"
    if shutil.which("clang-tidy") is None or shutil.which("c++") is None:
        print("tidy_cached_test: skipped (needs clang-tidy and c++)")
        return 77
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        (root / "build").mkdir()
        (root / ".clang-tidy").write_text("Checks: '-*,modernize-use-nullptr'\n"
                                          "HeaderFilterRegex: '.*'\n")
        header = root / "h.h"
        header.write_text("inline int* none() { return 0; }  // NOLINT\n")
        (root / "a.cpp").write_text('#include "h.h"\nint* f() { return none(); }\n')
        # Checked with a guessed command, this one would fail on its missing header.
        (root / "b.cpp").write_text("#include <no_such_header_here.h>\n")
        (root / "build" / "compile_commands.json").write_text(json.dumps([{
            "directory": str(root / "build"),
            "command": f"c++ -std=c++17 -I{root} -o a.o -c {root / 'a.cpp'}",
            "file": str(root / "a.cpp"),
        }]))
        env = dict(os.environ, PIPEPLAN_TIDY_CACHE=str(root / "cache"))

        def run(what, want_status, *wants):
            done = subprocess.run([sys.executable, str(tidy), "build", "1", "a.cpp", "b.cpp"],
                                  cwd=root, env=env, capture_output=True, text=True, check=False)
            out = done.stdout + done.stderr
            if done.returncode != want_status:
                failures.append(f"{what}: exit {done.returncode}, expected {want_status}:\n{out}")
            for want in wants:
                if want not in out:
                    failures.append(f"{what}: no '{want}' in:\n{out}")

        left_out = "leaves out 1 of 2 sources"
        run("first run", 0, left_out, "1 of 1 units clean (0 unchanged since a clean run")
        run("second run", 0, left_out, "1 of 1 units clean (1 unchanged since a clean run")
        header.write_text("inline int* none() { return 0; }\n")
        run("NOLINT taken out", 1, "modernize-use-nullptr", "0 of 1 units clean")
        header.write_text("inline int* none() { return 0; }  // NOLINT(modernize-use-nullptr)\n")
        run("NOLINT reworded", 0, "1 of 1 units clean (0 unchanged since a clean run")
    for failure in failures:
        print(f"FAIL: {failure}")
    if failures:
        print(f"tidy_cached_test: {len(failures)} failure(s)")
        return 1
    print("tidy_cached_test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
