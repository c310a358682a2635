#!/usr/bin/env python3
"""How far each device's clock was from its host clock in the committed H200 traces, and how much
of `pipeplan diff`'s "host queued late" that was.

  python3 bench/analysis/host_alignment.py RESULTS

RESULTS: a folder of run folders (bench/gpu/run.sh output folders); every trace in them, the
folders in the order they were measured.

Until 598f8e2 each device queued its gradient zeroing before the step's start event, so the
device clock's zero came after the host's by the zeroing's time, and every op's device start
(ts) read earlier than the host time it was queued at (args.host_start_us). No op can start
before it is queued, so per device the most negative lead (ts - host_start_us) bounds that
offset from below. Re-aligned by it, each stall's host part is recomputed as `pipeplan diff`
does (runtime/trace_diff.cpp): clamp(host start - ready, 0, stall), ready the latest end of the
op's predecessors in the plan (data edges and its stream's order), stall = start - ready.
Last column: for the stalls over 100 us that a recv ended, the median time from the copy's end
on the device to the recv's end on the host (re-aligned): the device-local transport's receiving
thread waits for the copy (a blocking-sync event) before the recv is done and the consumer's
thread may queue it.
"""
import statistics
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                                "calibrate"))
import plan_json  # noqa: E402  pylint: disable=wrong-import-position


def measured_order(results):
    """RESULTS's run folders in the order they were measured: by the UTC time on the first line of
    each one's index.txt (as bench/gpu/run.sh writes it), else its manifest.json's date, else its
    name."""
    def when(folder):
        try:
            with open(os.path.join(folder, "index.txt"), encoding="utf-8") as f:
                found = re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", f.readline())
                if found:
                    return found.group(0)
        except OSError:
            pass
        try:
            with open(os.path.join(folder, "manifest.json"), encoding="utf-8") as f:
                return str(json.load(f).get("date", ""))
        except (OSError, ValueError):
            return ""
    folders = [d for d in sorted(glob.glob(os.path.join(results, "*", ""))) if os.path.isdir(d)]
    return [d.rstrip(os.sep) for d in sorted(folders, key=lambda d: (when(d), d))]


def analyse(trace_path):
    plan = plan_json.as_rows(json.load(open(trace_path[: -len(".trace.json")] + ".plan.json")))
    trace = json.load(open(trace_path))
    nodes = {n["id"]: n for n in plan["nodes"]}
    preds = {}  # the data edges, and each node's predecessor on its stream (the order edges)
    for source, target in plan["edges"]:
        preds.setdefault(target, []).append(source)
    for stream in plan["streams"]:
        for before, after in zip(stream["order"], stream["order"][1:]):
            preds.setdefault(after, []).append(before)
    times, host, trace_host_end = {}, {}, {}
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        a = e.get("args", {})
        times[a["node"]] = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        if "host_start_us" in a:
            host[a["node"]] = float(a["host_start_us"])
            trace_host_end[a["node"]] = float(a["host_end_us"])
    devices = int(plan["meta"]["devices"])
    lead = [min((times[i][0] - host[i] for i in host if nodes[i]["kind"] == "compute"
                 and nodes[i]["device"] == d), default=0.0) for d in range(devices)]
    offset = [max(0.0, -x) for x in lead]  # the device's zero after the host's, at least
    stall = [0.0] * devices
    late = [0.0] * devices
    late_aligned = [0.0] * devices
    hops = []
    for i, n in nodes.items():
        if n["kind"] != "compute" or i not in times or not preds.get(i):
            continue
        last = max((p for p in preds[i] if p in times), key=lambda p: times[p][1])
        ready = times[last][1]
        waited = times[i][0] - ready
        if waited <= 0:
            continue
        d = n["device"]
        stall[d] += waited
        if i in host:
            late[d] += min(max(host[i] - ready, 0.0), waited)
            late_aligned[d] += min(max(host[i] - offset[d] - ready, 0.0), waited)
        if waited > 100 and nodes[last]["kind"] == "recv" and last in host:
            host_end = float(trace_host_end[last]) - offset[nodes[last]["device"]]
            hops.append(host_end - ready)
    return offset, stall, late, late_aligned, hops


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    results = sys.argv[1]
    print(__doc__.split("\n\n")[0])
    print()
    print(f"{'run':<58} {'device':>6} {'offset us':>10} {'stall us':>10} "
          f"{'host late us':>13} {'re-aligned':>11} {'copy end -> recv done us':>25}")
    paths = [p for folder in measured_order(results)
             for p in sorted(glob.glob(os.path.join(folder, "*.trace.json")))]
    for path in paths:
        name = os.path.relpath(path, results)[: -len(".trace.json")]
        offset, stall, late, aligned, hops = analyse(path)
        for d in range(len(offset)):
            print(f"{name:<58} {d:>6} {offset[d]:>10.0f} {stall[d]:>10.0f} {late[d]:>13.0f} "
                  f"{aligned[d]:>11.0f}")
        hop = f"{statistics.median(hops):.0f} (n = {len(hops)})" if hops else ""
        print(f"{name:<58} {'all':>6} {'':>10} {sum(stall):>10.0f} {sum(late):>13.0f} "
              f"{sum(aligned):>11.0f} {hop:>25}")


if __name__ == "__main__":
    sys.exit(main())
