#!/usr/bin/env python3
"""tools/calibrate/add_working_memory.py copies a measured profile's working memory into another profile of
the same model, and tools/calibrate/fit_contention.py eval reports the memory error it removes.

A "measured" profile is the shipped analytic one with working memory added to every pass; merged
into the plain profile, a plan holds it while its ops run. A run report whose allocator peaks are
that plan's peaks stands for a measurement: eval must show the plain plan under-predicting it
and the merged one matching. Usage: add_working_memory_test.py PIPEPLAN SOURCE_DIR
"""
import json
import os
import shlex
import sys
import tempfile

from script_checks import check, eval_percentages, finish, run, write_json

PIPEPLAN, SOURCE = sys.argv[1], sys.argv[2]
MERGE = os.path.join(SOURCE, "tools", "calibrate", "add_working_memory.py")
FIT = os.path.join(SOURCE, "tools", "calibrate", "fit_contention.py")
PROFILE = os.path.join(SOURCE, "profiles", "h100-sxm-llama-7b.analytic.json")
MIB = 1 << 20
with tempfile.TemporaryDirectory() as tmp:
    with open(PROFILE, encoding="utf-8") as f:
        plain = json.load(f)
    measured = json.loads(json.dumps(plain))
    measured["provenance"] = {"source": "measured", "gpu": "TEST GPU", "date": "2026-11-26",
                              "command": "pipeplan profile --test", "notes": ""}
    for kind, by_mbs in measured["layers"].items():
        for mbs, cost in by_mbs.items():
            scale = int(mbs) * (1 if kind == "block" else 0)
            cost["forward_work_bytes"] = 16 * MIB * scale
            cost["p1_work_bytes"] = 1500 * MIB * scale  # large enough to see beside 7B's stashes
            cost["p2_work_bytes"] = {str(k): 64 * MIB * k * scale if k > 1 else 0
                                     for k in range(1, 5)}
    measured_path = os.path.join(tmp, "measured.json")
    write_json(measured_path, measured)
    merged_path = os.path.join(tmp, "merged.json")
    run([sys.executable, MERGE, "--from", measured_path, PROFILE, "-o", merged_path])
    with open(merged_path, encoding="utf-8") as f:
        merged = json.load(f)
    block = merged["layers"]["block"]["1"]
    check(block["p1_work_bytes"] == 1500 * MIB and block["p2_work_bytes"]["3"] == 192 * MIB,
          f"working memory not copied: {block.get('p1_work_bytes')}")
    check(block["forward_us"] == plain["layers"]["block"]["1"]["forward_us"],
          "the times must stay the profile's")
    check("measured.json (TEST GPU, 2026-11-26" in merged["provenance"]["notes"],
          f"provenance note: {merged['provenance']['notes']!r}")

    # A run planned from the plain profile; its "allocator" saw the working memory.
    args = ["plan", "--stages", "4", "--microbatches", "8", "--schedule", "1f1b", "--backward",
            "2bp", "--seq", "2048", "--p2-concat", "4"]
    prefix = os.path.join(tmp, "run")
    plan_cmd = [PIPEPLAN] + args + ["--profile", PROFILE, "-o", prefix + ".plan.json"]
    out = run(plan_cmd + ["--json"])
    with open(prefix + ".plan.txt", "w", encoding="utf-8") as f:
        f.write("# command: " + shlex.join(plan_cmd) + "\n")
    predicted = json.loads(out.stdout)["peak_memory_bytes"]
    with_work = json.loads(run([PIPEPLAN] + args + ["--profile", merged_path, "--json"])
                           .stdout)["peak_memory_bytes"]
    check(all(w > p for w, p in zip(with_work, predicted)),
          f"working memory should raise every stage's peak: {predicted} -> {with_work}")
    run([PIPEPLAN, "show", prefix + ".plan.json", "--trace", prefix + ".trace.json"])
    report = {"peak_memory": [{"device": d, "measured_bytes": w, "predicted_bytes": p}
                              for d, (w, p) in enumerate(zip(with_work, predicted))]}
    with open(prefix + ".run.json", "w", encoding="utf-8") as f:
        f.write("# command: pipeplan run (test)\n" + json.dumps(report) + "\n# exit status: 0\n")
    before, after = eval_percentages(FIT, PIPEPLAN, merged_path, prefix, (6, 7))
    check(before > 1, f"the plain plan should under-predict the allocator: {before} %")
    check(abs(after) < 0.05, f"with the working memory the peaks should match: {after} %")

    # Bad input: one line naming the field, exit 1, nothing written.
    other = json.loads(json.dumps(measured))
    other["seq"] = 4096
    other_path = os.path.join(tmp, "other.json")
    write_json(other_path, other)
    bad_out = os.path.join(tmp, "none.json")
    out = run([sys.executable, MERGE, "--from", other_path, PROFILE, "-o", bad_out], expect=1)
    check(out.stderr.count("\n") == 1 and "field 'seq'" in out.stderr,
          f"error should be one line naming the field: {out.stderr!r}")
    check(not os.path.exists(bad_out), "a failed merge wrote its output")
    out = run([sys.executable, MERGE, "--from", PROFILE, PROFILE, "-o", bad_out], expect=1)
    check("forward_work_bytes' is missing" in out.stderr,
          f"a profile without working memory is refused, naming the field: {out.stderr!r}")
    check(not os.path.exists(bad_out), "a failed merge wrote its output")

finish("add_working_memory_test")
