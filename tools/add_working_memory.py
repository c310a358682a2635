#!/usr/bin/env python3
"""Copy the working memory a measured profile has into another profile of the same model.

`pipeplan profile --backend cuda` measures each pass's working memory (forward_work_bytes,
p1_work_bytes, p2_work_bytes: the allocator's peak during the pass above the larger of its level
before and after; docs/profile-format.md). A calibrated profile (tools/fit_contention.py) made
from an earlier measurement has the times and the contention model the runs were predicted
from, but no working memory. This writes a copy of PROFILE with the three fields of every
layer kind and micro-batch size taken from MEASURED, so that the plans keep their times and gain
the memory the ops hold while they run. The two must describe the same model, sequence length
and attention; every (kind, mbs) of PROFILE must be in MEASURED. Its provenance notes say where
the working memory came from.

  python3 tools/add_working_memory.py --from MEASURED.json PROFILE.json -o OUT.json
"""
import argparse
import json
import os
import sys
import tempfile

FIELDS = ("forward_work_bytes", "p1_work_bytes", "p2_work_bytes")


class MergeError(Exception):
    pass


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            profile = json.load(f)
    except OSError as e:
        raise MergeError(f"{path}: cannot read ({e.strerror})") from e
    except json.JSONDecodeError as e:
        raise MergeError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from e
    if not isinstance(profile, dict) or profile.get("format") != "pipeplan-profile":
        raise MergeError(f"{path}: not a pipeplan profile (field 'format')")
    return profile


def merge(measured, measured_path, profile, profile_path):
    for field in ("model", "seq", "attention"):
        if measured.get(field) != profile.get(field):
            raise MergeError(f"{measured_path}: field '{field}' differs from {profile_path}'s")
    merged = json.loads(json.dumps(profile))
    for kind, by_mbs in merged["layers"].items():
        for mbs, cost in by_mbs.items():
            source = measured["layers"].get(kind, {}).get(mbs)
            if source is None:
                raise MergeError(f"{measured_path}: no layers.{kind}.{mbs} for {profile_path}")
            missing = [f for f in FIELDS if f not in source]
            if missing:
                raise MergeError(f"{measured_path}: field 'layers.{kind}.{mbs}.{missing[0]}' is "
                                 "missing (measured before working memory was)")
            for field in FIELDS:
                cost[field] = source[field]
    origin = measured.get("provenance", {})
    note = (f" Working memory (forward/p1/p2_work_bytes) from {os.path.basename(measured_path)}"
            f" ({origin.get('gpu', '?')}, {origin.get('date', '?')}: {origin.get('command', '?')})"
            " by tools/add_working_memory.py.")
    merged.setdefault("provenance", {})
    merged["provenance"]["notes"] = merged["provenance"].get("notes", "") + note
    return merged


def write_atomic(path, data):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".add_working_memory.", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--from", dest="measured", required=True,
                        help="the measured profile with working memory")
    parser.add_argument("profile", help="the profile to copy it into")
    parser.add_argument("-o", "--output", required=True, help="the profile to write")
    args = parser.parse_args()
    try:
        merged = merge(load(args.measured), args.measured, load(args.profile), args.profile)
        write_atomic(args.output, merged)
    except MergeError as err:
        print(f"add_working_memory: {err}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
