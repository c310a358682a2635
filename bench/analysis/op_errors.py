#!/usr/bin/env python3
"""Where the calibrated profile's step error lies, op kind by op kind, in the 4-stage runs at
m = 6 and 12 (held out from its fit): each run re-planned by its recorded `pipeplan plan`
command, whose profile, profiles/h200-llama-7b-blocks8-sm32.calibrated.json, is now the
sustained-load fit, lined up with its trace by `pipeplan diff --all --json`, and per op kind the
ops' count, mean predicted time, measured over predicted (sums), and the mean difference per op.

  python3 bench/analysis/op_errors.py RUNS-FOLDER [PIPEPLAN]   (from the repository root)

RUNS-FOLDER: a bench/gpu/run.sh output folder with the runs 1f1b-m6-fused, 1f1b-m12-fused,
1f1b-m6-2bp, 1f1b-m12-2bp, auto-m6, auto-m12; PIPEPLAN: default build/tools/pipeplan.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

CALL = ""  # RUNS-FOLDER
RUNS = ["1f1b-m6-fused", "1f1b-m12-fused", "1f1b-m6-2bp", "1f1b-m12-2bp", "auto-m6", "auto-m12"]
COMPUTE = re.compile(r"\d+(F|B|P1|P2)[_\d+]*")


def recorded_plan_args(run):
    with open(os.path.join(CALL, run + ".plan.txt"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("# command: "):
                argv = shlex.split(line[len("# command: "):])
                out = argv.index("-o")
                return argv[1:out] + argv[out + 2:]
    raise SystemExit(f"{run}.plan.txt: no recorded command")


def main():
    global CALL  # pylint: disable=global-statement
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    CALL = sys.argv[1]
    pipeplan = sys.argv[2] if len(sys.argv) > 2 else "build/tools/pipeplan"
    print(__doc__.split("\n\n")[0])
    print()
    with tempfile.TemporaryDirectory() as tmp:
        for run in RUNS:
            plan = os.path.join(tmp, run + ".plan.json")
            subprocess.run([pipeplan] + recorded_plan_args(run) + ["-o", plan], check=True,
                           capture_output=True)
            diff = subprocess.run([pipeplan, "diff", plan, os.path.join(CALL, run + ".trace.json"),
                                   "--all", "--json"], check=True, capture_output=True, text=True)
            result = json.loads(diff.stdout)
            by_kind = {}
            for op in result["ops"]:
                match = COMPUTE.fullmatch(op["label"])
                if match:
                    by_kind.setdefault(match.group(1), []).append(op)
            parts = []
            for kind, ops in sorted(by_kind.items()):
                predicted = sum(o["predicted_us"] for o in ops)
                measured = sum(o["measured_us"] for o in ops)
                parts.append(f"{kind} n={len(ops)} {predicted / len(ops) / 1e3:.2f} ms "
                             f"{measured / predicted:.3f}x {(measured - predicted) / len(ops):+.0f} us")
            print(f"{run:<15} " + " | ".join(parts))


if __name__ == "__main__":
    sys.exit(main())
