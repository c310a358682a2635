"""What the Python tool tests share: checks that record a failure and go on, a command run that
checks its exit status, JSON files written and read back, and the verdict. Imported by tests/tools/*_test.py (their folder is on
sys.path when they run)."""
import json
import shlex
import subprocess
import sys

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)


def run(argv, expect=0):
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    check(out.returncode == expect,
          f"{shlex.join(argv)} exited {out.returncode}, not {expect}: {out.stderr.strip()}")
    return out


def write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def finish(name):
    print(f"{name}:", "FAILED" if failures else "passed")
    sys.exit(1 if failures else 0)
