#!/usr/bin/env python3
"""Where the stream-ordered copy wait's step went: for each run of bench/gpu/run.sh's `waits`
(waits-<mode>-<plan>, in every run folder of RESULTS, by name), from its traced step (the last) and its plan: the step (first op start to last op
end), each device's compute time (sum of its compute ops, as `pipeplan calibrate fit` counts
them) and idle time on its compute stream, and the median of measured / profiled over all
compute ops.

  python3 bench/analysis/copy_waits.py RESULTS
"""
import glob
import json
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# tools/calibrate/plan_json.py: a plan's nodes as rows, whatever its version.
sys.path.insert(0, os.path.join(REPO, "tools", "calibrate"))
import plan_json  # noqa: E402  pylint: disable=wrong-import-position


def compute_ops(prefix):
    """A run's compute ops as (start, end, node) from RUN.plan.json and RUN.trace.json."""
    with open(prefix + ".plan.json", encoding="utf-8") as f:
        nodes = {n["id"]: n for n in plan_json.as_rows(json.load(f))["nodes"]}
    with open(prefix + ".trace.json", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    compute = []
    for e in events:
        node = nodes.get(e.get("args", {}).get("node")) if e.get("ph") == "X" else None
        if node is not None and node["kind"] == "compute":
            compute.append((float(e["ts"]), float(e["ts"]) + float(e["dur"]), node))
    return compute


def summary(prefix):
    compute = compute_ops(prefix)
    start = min(s for s, _, _ in compute)
    end = max(e for _, e, _ in compute)
    devices = sorted({node["device"] for _, _, node in compute})
    busy = [sum(e - s for s, e, node in compute if node["device"] == d) / 1e3 for d in devices]
    ratio = statistics.median((e - s) / node["duration_us"] for s, e, node in compute)
    return (end - start) / 1e3, busy, ratio


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    results = sys.argv[1]
    print("the last traced step of each run; compute and idle per device in ms (device 0..3)")
    print(f"{'run':<52} {'step ms':>8} {'op / profile':>12}  compute per device          "
          "idle per device")
    traces = sorted(glob.glob(os.path.join(results, "*", "waits-*.trace.json")),
                    key=lambda t: (os.path.dirname(t), os.path.basename(t)))
    for trace in traces:
        prefix = trace[: -len(".trace.json")]
        step, busy, ratio = summary(prefix)
        name = os.path.relpath(prefix, results)
        print(f"{name:<52} {step:>8.1f} {ratio:>12.3f}  "
              + " ".join(f"{b:6.1f}" for b in busy) + "    "
              + " ".join(f"{step - b:6.1f}" for b in busy))


if __name__ == "__main__":
    sys.exit(main())
