#!/usr/bin/env python3
"""BPipe's copies and the evictor's host, from measured traces (pipeplan run --trace).

For each RUN (a path prefix under RESULTS: RUN.trace.json): every evict/load send, split by whether its sender's compute ran during more
than half of the copy (count, median and max duration in ms), then, for device DEVICE (default
0), each forward and evict of the first WINDOW ms of GPU time: when its host thread queued it
(host_start..host_end) against when it ran on the GPU (ts..ts+dur).

  python3 bench/analysis/bpipe_copies.py [--device 0] [--window 400] RESULTS RUN...

RESULTS is a results folder (e.g. bench/results/h200), each RUN a run's path under it without
.trace.json (e.g. 2026-11-27-tests-block-copies-gemm-bpipe/tests-block-copies-gemm/copies-priority-bpipe-mbs2).
"""
import argparse
import json
import os
import statistics


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--window", type=float, default=400.0, help="ms of GPU time listed")
    parser.add_argument("results", help="a results folder")
    parser.add_argument("runs", nargs="+", help="runs under it (path prefixes of .trace.json)")
    args = parser.parse_args()
    for run in args.runs:
        if not run.endswith(".trace.json"):
            run += ".trace.json"
        path = os.path.join(args.results, run)
        with open(path, encoding="utf-8") as f:
            events = json.load(f)["traceEvents"]
        compute = {}
        for e in events:
            if e.get("cat") in ("F", "B", "P1", "P2"):
                compute.setdefault(e["pid"], []).append((e["ts"], e["ts"] + e["dur"]))
        busy, idle = [], []
        for e in events:
            if e.get("cat") != "send" or e["args"].get("transfer") not in ("evict", "load"):
                continue
            start, end = e["ts"], e["ts"] + e["dur"]
            overlap = sum(max(0.0, min(end, b) - max(start, a)) for a, b in compute.get(e["pid"], []))
            (busy if overlap > 0.5 * e["dur"] else idle).append(e["dur"] / 1e3)
        print(f"{path}")
        for name, values in (("sender computing", busy), ("sender idle", idle)):
            if values:
                print(f"  copies, {name}: {len(values)}, median {statistics.median(values):.2f} ms,"
                      f" max {max(values):.2f} ms")
        pid = args.device + 1
        print(f"  device {args.device}, first {args.window:g} ms: node, GPU ms, host-queued ms")
        rows = [e for e in events
                if e.get("pid") == pid and e.get("ph") == "X" and e["ts"] < args.window * 1e3
                and (e.get("cat") == "F" or (e.get("cat") == "send"
                                             and e["args"].get("transfer") == "evict"))]
        for e in sorted(rows, key=lambda e: e["ts"]):
            a = e["args"]
            print(f"    {e['name']:<20} GPU {e['ts'] / 1e3:8.1f}..{(e['ts'] + e['dur']) / 1e3:8.1f}"
                  f"  host {a.get('host_start_us', 0) / 1e3:8.1f}..{a.get('host_end_us', 0) / 1e3:8.1f}")


if __name__ == "__main__":
    main()
