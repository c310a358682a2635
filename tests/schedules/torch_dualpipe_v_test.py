#!/usr/bin/env python3
"""`pipeplan plan --schedule dualpipe-v`, exported, against PyTorch itself: the CSV is the one
torch.distributed.pipelining's own ScheduleDualPipeV dumps (`_dump_csv`, compute only), and
torch's loader (`_load_csv`) reads it, at several sizes (2 to 16 ranks, m from 2P to 4P and an
odd m). Needs a Python with torch (2.9 or later, which ships ScheduleDualPipeV): the one running
this test, or PIPEPLAN_TORCH_PYTHON; skipped (exit 77) without one.

  torch_dualpipe_v_test.py PIPEPLAN SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile

SIZES = [(2, 4), (4, 8), (4, 16), (5, 13), (8, 16), (8, 32), (16, 32), (16, 64)]
SKIP = 77

CHECK = r'''
import sys, types
import torch
from torch.distributed.pipelining import schedules
sys.path.insert(0, sys.argv[1])
from dump_torch_schedules import stages
folder = sys.argv[2]
for item in sys.argv[3:]:
    ranks, mbs = map(int, item.split("x"))
    made = lambda: schedules.ScheduleDualPipeV(stages("ScheduleDualPipeV", 0, ranks),
                                               n_microbatches=mbs, loss_fn=lambda o, t: o)
    theirs_path = f"{folder}/torch-{item}.csv"
    made()._dump_csv(theirs_path, format="compute_only")
    ours_path = f"{folder}/ours-{item}.csv"
    made()._load_csv(ours_path, format="compute_only")  # raises on anything it refuses
    ours = open(ours_path, encoding="utf-8").read()
    theirs = open(theirs_path, encoding="utf-8", newline="").read().replace("\r\n", "\n")
    if ours != theirs:
        sys.exit(f"{item}: pipeplan's dualpipe-v differs from ScheduleDualPipeV")
print(f"torch {torch.__version__}: {len(sys.argv) - 3} sizes identical and loaded")
'''


def main():
    pipeplan, source = sys.argv[1], sys.argv[2]
    python = os.environ.get("PIPEPLAN_TORCH_PYTHON", sys.executable)
    probe = subprocess.run([python, "-c", "from torch.distributed.pipelining import schedules;"
                            "schedules.ScheduleDualPipeV"], capture_output=True)
    if probe.returncode != 0:
        print(f"skipped: no torch with ScheduleDualPipeV in {python} "
              "(set PIPEPLAN_TORCH_PYTHON to a Python that has it)")
        return SKIP
    with tempfile.TemporaryDirectory() as folder:
        for ranks, mbs in SIZES:
            plan = os.path.join(folder, f"ours-{ranks}x{mbs}.json")
            subprocess.run([pipeplan, "plan", "--uniform", "1:1:1:0", "--stages", str(ranks),
                            "--microbatches", str(mbs), "--schedule", "dualpipe-v", "-o", plan],
                           check=True, capture_output=True)
            subprocess.run([pipeplan, "export", plan, "-o", plan[:-len(".json")] + ".csv"],
                           check=True, capture_output=True)
        fixtures = os.path.join(source, "tests/schedules/fixtures/torch")
        result = subprocess.run([python, "-c", CHECK, fixtures, folder] +
                                [f"{r}x{m}" for r, m in SIZES], capture_output=True, text=True)
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        return result.returncode


if __name__ == "__main__":
    sys.exit(main())
