#!/usr/bin/env python3
"""Measured/profiled time of every compute op of each run, by op kind and by how much of the op
other stages' compute overlapped (time-weighted number of other compute ops running, rounded),
for runs given as path prefixes (RUN.plan.json + RUN.trace.json, the last step's trace). Shows
whether ops at the same concurrency run slower in longer pipelines (the contention model counts
only concurrency).

  python3 bench/analysis/slowdown_by_m.py RESULTS RUN...

RESULTS is a results folder (e.g. bench/results/h200), each RUN a run's path prefix under it.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                                "calibrate"))
import plan_json  # noqa: E402  pylint: disable=wrong-import-position


def ops(prefix):
    with open(prefix + ".trace.json", encoding="utf-8") as f:
        events = [e for e in json.load(f)["traceEvents"]
                  if e.get("ph") == "X" and e.get("cat") in ("F", "B", "P1", "P2")]
    with open(prefix + ".plan.json", encoding="utf-8") as f:
        profiled = {n["id"]: n["duration_us"] for n in plan_json.as_rows(json.load(f))["nodes"]
                    if n.get("kind") == "compute"}
    for e in events:
        start, end = e["ts"], e["ts"] + e["dur"]
        overlap = sum(max(0.0, min(end, o["ts"] + o["dur"]) - max(start, o["ts"]))
                      for o in events if o["pid"] != e["pid"])
        yield e["cat"], round(overlap / e["dur"]), e["dur"] / profiled[e["args"]["node"]]


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    print(f"{'run':<18} {'op':<3} " + " ".join(f"{f'x{c} (n)':>12}" for c in range(4)))
    for prefix in (os.path.join(sys.argv[1], run) for run in sys.argv[2:]):
        by = {}
        for kind, concurrency, ratio in ops(prefix):
            by.setdefault((kind, concurrency), []).append(ratio)
            by.setdefault(("all", concurrency), []).append(ratio)
        for kind in ("all", "F", "B", "P1", "P2"):
            cells = [by.get((kind, c)) for c in range(4)]
            if any(cells):
                print(f"{prefix.rsplit('/', 1)[-1]:<18} {kind:<3} " + " ".join(
                    f"{statistics.median(c):>7.3f} ({len(c):>2})" if c else f"{'':>12}"
                    for c in cells))


if __name__ == "__main__":
    sys.exit(main())
