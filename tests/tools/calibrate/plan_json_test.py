#!/usr/bin/env python3
"""tools/calibrate/plan_json.py turns a version 3 plan (nodes as columns) into the version 2 plan
with the same content: on the committed pair of files its result is the committed version 2 file,
and on plans pipeplan writes now (BPipe, 2bp with P2 over two micro-batches, interleaved,
DualPipe) pipeplan
reads the result as the same plan (export gives the same CSV, show the same summary).
Usage: plan_json_test.py PIPEPLAN SOURCE_DIR
"""
import json
import os
import sys
import tempfile

from script_checks import check, finish, run

PIPEPLAN, SOURCE = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SOURCE, "tools", "calibrate"))
import plan_json  # noqa: E402  pylint: disable=wrong-import-position

FIXTURES = os.path.join(SOURCE, "tests", "planner", "graph", "fixtures")
with open(os.path.join(FIXTURES, "bpipe-2bp.v3.json"), encoding="utf-8") as f:
    v3 = json.load(f)
with open(os.path.join(FIXTURES, "bpipe-2bp.v2.json"), encoding="utf-8") as f:
    v2 = json.load(f)
check(plan_json.as_rows(v3) == v2,
      "the committed version 3 plan does not convert to the committed version 2 one")
check(plan_json.as_rows(v2) is v2, "a version 2 plan is not returned as it is")

PLANS = {
    "bpipe": "--uniform 1:1:1:0.1 --uniform-mem 1:-0.5:-0.5 --stages 4 -m 8 --backward 2bp "
             "--p2-concat 2 --bpipe on",
    "interleaved": "--model tiny --stages 2 -m 4 --chunks 2 --schedule interleaved --backward 2bp",
    # The two copies' weight-gradient exchange (transfer grads, labels "grads ...").
    "dualpipe": "--model tiny --stages 2 -m 4 --schedule dualpipe",
}
with tempfile.TemporaryDirectory() as tmp:
    for name, args in PLANS.items():
        new = os.path.join(tmp, name + ".json")
        old = os.path.join(tmp, name + ".v2.json")
        run([PIPEPLAN, "plan", *args.split(), "-o", new])
        run([sys.executable, os.path.join(SOURCE, "tools", "calibrate", "plan_json.py"), new, old])
        with open(old, encoding="utf-8") as f:
            check(json.load(f)["version"] == 2, f"{name}: not written as version 2")
        outputs = []
        for path in (new, old):
            csv_text = ""
            if name != "dualpipe":  # PyTorch has no schedule of two copies: export refuses it
                csv = path + ".csv"
                run([PIPEPLAN, "export", path, "-o", csv])
                with open(csv, encoding="utf-8") as f:
                    csv_text = f.read()
            outputs.append((csv_text, run([PIPEPLAN, "show", path, "--json"]).stdout,
                            run([PIPEPLAN, "validate", path]).returncode))
        check(outputs[0] == outputs[1], f"{name}: pipeplan reads the version 2 file as another plan")
finish("plan_json_test")
