#!/usr/bin/env python3
"""Copy the working memory a measured profile has into another profile of the same model.

`pipeplan profile --backend cuda` measures each pass's working memory (forward_work_bytes,
p1_work_bytes, p2_work_bytes: the allocator's peak during the pass above the larger of its level
before and after; docs/reference/profile-format.md). A calibrated profile (tools/calibrate/fit_contention.py) made
from an earlier measurement has the times and the contention model the runs were predicted
from, but no working memory. This writes a copy of PROFILE with the three fields of every
layer kind and micro-batch size taken from MEASURED, so that the plans keep their times and gain
the memory the ops hold while they run. The two must describe the same model, sequence length
and attention; every (kind, mbs) of PROFILE must be in MEASURED. Its provenance notes say where
the working memory came from.

  python3 tools/calibrate/add_working_memory.py --from MEASURED.json PROFILE.json -o OUT.json
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_json import ProfileError, load_profile, write_json_atomic  # noqa: E402

FIELDS = ("forward_work_bytes", "p1_work_bytes", "p2_work_bytes")


class MergeError(ProfileError):
    pass


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
            " by tools/calibrate/add_working_memory.py.")
    merged.setdefault("provenance", {})
    merged["provenance"]["notes"] = merged["provenance"].get("notes", "") + note
    return merged


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--from", dest="measured", required=True,
                        help="the measured profile with working memory")
    parser.add_argument("profile", help="the profile to copy it into")
    parser.add_argument("-o", "--output", required=True, help="the profile to write")
    args = parser.parse_args()
    try:
        merged = merge(load_profile(args.measured), args.measured, load_profile(args.profile),
                       args.profile)
        write_json_atomic(args.output, merged)
    except ProfileError as err:
        print(f"add_working_memory: {err}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
