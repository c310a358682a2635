#!/usr/bin/env python3
"""Where the stream-ordered copy wait's step went: for each run of the waits phase (blocking and
stream, calls 2 and 4), from its traced step (the last) and its plan: the step (first op start
to last op end), each device's compute time (sum of its F/B/P1/P2 ops) and idle time on its
compute stream, and the median of measured / profiled over all compute ops.

  python3 bench/results/issue12-h200-2026-11-27c/analysis/copy_waits.py   (from the repo root)
"""
import glob
import json
import os
import statistics

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPUTE = ("F", "B", "P1", "P2")


def summary(prefix):
    with open(prefix + ".trace.json", encoding="utf-8") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    with open(prefix + ".plan.json", encoding="utf-8") as f:
        profiled = {n["id"]: n["duration_us"] for n in json.load(f)["nodes"]
                    if n.get("kind") == "compute"}
    compute = [e for e in events if e.get("cat") in COMPUTE]
    start = min(e["ts"] for e in compute)
    end = max(e["ts"] + e["dur"] for e in compute)
    devices = sorted({e["pid"] for e in compute})
    busy = [sum(e["dur"] for e in compute if e["pid"] == d) / 1e3 for d in devices]
    ratio = statistics.median(e["dur"] / profiled[e["args"]["node"]] for e in compute)
    return (end - start) / 1e3, busy, ratio


def main():
    print("the last traced step of each run; compute and idle per device in ms (device 0..3)")
    print(f"{'run':<52} {'step ms':>8} {'op / profile':>12}  compute per device          "
          "idle per device")
    for trace in sorted(glob.glob(os.path.join(HERE, "call[24]-*", "waits-*.trace.json"))):
        prefix = trace[: -len(".trace.json")]
        step, busy, ratio = summary(prefix)
        name = os.path.relpath(prefix, HERE)
        print(f"{name:<52} {step:>8.1f} {ratio:>12.3f}  "
              + " ".join(f"{b:6.1f}" for b in busy) + "    "
              + " ".join(f"{step - b:6.1f}" for b in busy))


if __name__ == "__main__":
    main()
