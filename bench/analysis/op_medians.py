#!/usr/bin/env python3
"""Median measured time of each compute op kind per device, beside its profiled time (the plan's
duration_us, before contention), for runs given as path prefixes (RUN.plan.json + RUN.trace.json).

  python3 bench/analysis/op_medians.py RESULTS RUN...

RESULTS is a results folder (e.g. bench/results/h200), each RUN a run's path prefix under it.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                                "calibrate"))
import plan_json  # noqa: E402  pylint: disable=wrong-import-position


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    for prefix in (os.path.join(sys.argv[1], run) for run in sys.argv[2:]):
        with open(prefix + ".trace.json", encoding="utf-8") as f:
            events = json.load(f)["traceEvents"]
        with open(prefix + ".plan.json", encoding="utf-8") as f:
            plan = plan_json.as_rows(json.load(f))
        measured, planned = {}, {}
        for e in events:
            if e.get("ph") == "X" and e.get("cat") in ("F", "B", "P1", "P2"):
                measured.setdefault((e["cat"], e["pid"] - 1), []).append(e["dur"] / 1e3)
        for n in plan["nodes"]:
            if n.get("kind") == "compute":
                planned.setdefault((n["op"], n["device"]), []).append(n["duration_us"] / 1e3)
        print(prefix.rsplit("/", 1)[-1] + ": op dev  measured ms (profiled ms)")
        for key in sorted(measured):
            p = planned.get(key)
            print(f"  {key[0]:<2} {key[1]}  {statistics.median(measured[key]):8.2f}"
                  f" ({statistics.median(p):.2f})" if p else "")


if __name__ == "__main__":
    sys.exit(main())
