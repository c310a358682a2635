"""Reading and writing JSON files for the profile scripts (tools/calibrate/fit_contention.py,
tools/calibrate/add_working_memory.py): one-line errors naming the file, and writes that never leave a
file half-written (a temporary file in the same folder, then renamed)."""
import json
import os
import tempfile


class ProfileError(Exception):
    """A bad input file: the message names it and is printed as one line."""


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise ProfileError(f"{path}: cannot read ({e.strerror})") from e
    except json.JSONDecodeError as e:
        raise ProfileError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from e


def load_profile(path):
    profile = load_json(path)
    if not isinstance(profile, dict) or profile.get("format") != "pipeplan-profile":
        raise ProfileError(f"{path}: not a pipeplan profile (field 'format')")
    return profile


def write_json_atomic(path, data):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
