#!/usr/bin/env python3
"""Markdown tables from the raw outputs bench/gpu/run.sh wrote into one folder.

Usage: summary.py RESULTS_DIR   (prints Markdown on stdout)

- GPU tests: every tests-*.json (gtest's JSON output), passed / failed / skipped per suite, and
  the failures' first lines.
- Block MFU: bench_block.json (pipeplan's CUDA backend, flash), bench_block-recompute.json (the
  same with the unfused attention) and torch_block.json (PyTorch's block), one JSON line each,
  side by side per micro-batch size; then bench_block's --breakdown, where present: each GEMM,
  the attention core and each memory-bound kernel per micro-batch size (ms per step, TFLOP/s or
  GB/s beside the device-to-device copy's, share of the step) and the time no op mark covers.
- Emulated pipelines: every NAME.run.json (`pipeplan run --json` report) with its NAME.plan.json
  beside it, but the whole-GPU ones of the `step` WHAT (step-*, or one device not emulated; the
  whole steps' table has them): predicted vs measured step time and the error, per-stage peak memory measured vs
  predicted (for the worst stage also the runtime's account of the plan's tensors, where the
  report has it), and the measured vs predicted speedup of 2bp over fused for each schedule and m.
  Rows whose step error exceeds 5 % or memory error 10 % are flagged.
- Predicted, then calibrated (the `predict` WHAT): each predict-*.run.json's median of steps 2..N
  against the plan from the stages' profile as measured (flagged beyond 5 %) and against
  `calibrate eval`'s re-plan from the profile `calibrate fit` wrote from other schedules' runs
  (predict-calibrate-eval-<run>.txt's "after ms", or one predict-calibrate-eval.txt's; flagged
  beyond 2 %, or where it is missing).
- Whole steps: the runs whose plan has optimizer nodes, the step the run reports (task graph and
  optimizer; the median of steps 2..N) against the planned one. Runs on a whole GPU (the report's
  hardware.emulated false) with each device's peak memory, step or memory beyond 3 % flagged, and
  a whole-GPU step-* run that failed listed; emulated runs in a table of their own, the step
  beyond 5 % flagged.
- BPipe's verdict (bpipe-estimate.json, `pipeplan bpipe --json` from the whole-GPU profile): the
  best plan without BPipe and the best that fits only with it, the gain, the verdict.
- Profiles under load: every profile with a `sustained_load` record, the sustained-load model
  the profiler fitted (factor, time constant), the op-time spread it explains, each op's cold
  and steady time, and the SM clock, power-cap share and power it sampled.
- GPU clock and power: every NAME.clocks.csv (nvidia-smi sampled while the emulated run or the
  SM-share profile NAME ran): of the samples under load (GPU utilization at least 90 %), the SM
  clock's median and minimum, the power's median and maximum, the hottest temperature, and the
  share of those samples in which the driver named each clock-event (throttle) reason. Beside
  each run with a trace: its mean share of stages computing, the sustained-load model's
  slowdown from it against the profile's (where the plan has the model), and the SM-share
  profile's loaded clock over the run's (does the model stand for the clock?).
- Overlapped pairs: per run whose diff has them, the median pair time predicted and measured, and
  the overlap efficiency planned beside the one the run shows.
- NCCL on one GPU: per plan, the losses of its device-local run (NAME.local.json), its run over
  NCCL between the emulated stages (NAME.nccl.json) and its torchrun run (NAME.torchrun.json):
  step 1 bit for bit and the later steps within a relative 1e-3 of the device-local run's, or how
  far apart (a run missing or not run is a failure); each way's step time
  against the plan's; per link, the transfers' time predicted and measured each way
  (NAME.<way>.diff.json, `pipeplan diff --json --all`); and the rank killed mid-step
  (nccl-rank-killed.txt): per rank, pass or fail.
- The machine: the NCCL pipeplan loads (nccl-env.json, else env.json) and whether MPS runs
  (env-mps.txt).
Missing or failed runs are listed, not hidden.

Usage: summary.py --losses RUN.json...   (the NCCL losses table of those runs alone; exit 1 when
a loss differs beyond that or a run is missing or was not run)
       summary.py --rank-killed nccl-rank-killed.txt   (the killed-rank table; exit 1 unless
every rank passes)
"""
import glob
import json
import math
import os
import re
import statistics
import sys

# tools/calibrate/plan_json.py: a plan's nodes as rows, whatever its version.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "calibrate"))
import plan_json  # noqa: E402  pylint: disable=wrong-import-position

GIB = float(1 << 30)
STEP_TOLERANCE_PCT = 5.0
WHOLE_STEP_TOLERANCE_PCT = 3.0  # a whole step with its optimizer, one stage on the whole GPU
WHOLE_STEP_MEMORY_TOLERANCE_PCT = 3.0  # each device's peak memory there
MEMORY_TOLERANCE_PCT = 10.0
UNCALIBRATED_TOLERANCE_PCT = 5.0  # predicted from the profile as measured
CALIBRATED_TOLERANCE_PCT = 2.0  # predicted after `pipeplan calibrate fit` on other schedules
# The NCCL ways' losses against the device-local run's: step 1 bit for bit (the same weights,
# inputs and kernels), the later steps within this relative difference. cuDNN's fused attention
# backward accumulates dQ in no fixed order and some gradients are summed with atomicAdd
# (docs/design/cuda-backend.md), so the weights after step 1, and the losses from them, may
# differ in their last bits.
LOSS_RELATIVE_TOLERANCE = 1e-3
SIGKILL_STATUS = 128 + 9  # a process killed by SIGKILL, as the shell reports it
LOADED_UTILIZATION_PCT = 90.0
# NVML's clock-event reasons (nvmlClocksEventReason*), the bits nvidia-smi prints in hex.
CLOCK_EVENT_REASONS = [(0x1, "idle"), (0x2, "application clocks"), (0x4, "SW power cap"),
                       (0x8, "HW slowdown"), (0x10, "sync boost"), (0x20, "SW thermal"),
                       (0x40, "HW thermal"), (0x80, "HW power brake"), (0x100, "display clocks")]


def load_json_line(path):
    """The last line of `path` that parses as a JSON object, or None."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        lines = [line for line in f.read().splitlines() if line.strip().startswith("{")]
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def load_json(path):
    """A whole JSON document after any '#' header lines, or None."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = "".join(line for line in f if not line.startswith("#"))
    start = text.find("{")
    if start < 0:
        return None
    try:
        return json.JSONDecoder().raw_decode(text[start:])[0]
    except ValueError:
        return None


def exit_status_line(path):
    """The "# exit status: ..." line run.sh appends to a command's output, or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.startswith("# exit status:")]
    except OSError:
        return None
    return lines[-1][len("# exit status:"):].strip() if lines else None


def tests_table(results):
    paths = sorted(glob.glob(os.path.join(results, "tests-*.json")))
    out = ["## GPU tests (pipeplan_cuda_tests)", ""]
    # A suite that crashed or ran out of time wrote its output but no JSON (gtest writes it last).
    without_json = [path for path in sorted(glob.glob(os.path.join(results, "tests-*.txt")))
                    if not os.path.exists(path[: -len(".txt")] + ".json")]
    if not paths and not without_json:
        return out + ["(no tests-*.json)", ""]
    out += ["| run | suite | passed | failed | skipped |", "|---|---|---|---|---|"]
    failed_lines = []
    for path in paths:
        report = load_json(path)
        run = os.path.basename(path)[: -len(".json")]
        if report is None:
            out.append(f"| {run} | (no JSON: did the binary crash? see {run}.txt) | | | |")
            continue
        for suite in report.get("testsuites", []):
            counts = {"passed": 0, "failed": 0, "skipped": 0}
            for test in suite.get("testsuite", []):
                if test.get("failures"):
                    counts["failed"] += 1
                    first = test["failures"][0].get("failure", "").splitlines()
                    failed_lines.append(f"- {suite['name']}.{test['name']}: "
                                        f"{' / '.join(first[:2])}")
                elif test.get("result") == "SKIPPED":
                    counts["skipped"] += 1
                else:
                    counts["passed"] += 1
            out.append(f"| {run} | {suite['name']} | {counts['passed']} | {counts['failed']} | "
                       f"{counts['skipped']} |")
    for path in without_json:
        run = os.path.basename(path)[: -len(".txt")]
        status = exit_status_line(path) or "unknown"
        out.append(f"| {run} | **no JSON** (exit status {status}; see {run}.txt) | | | |")
    return out + [""] + failed_lines + ([""] if failed_lines else [])


def gemm_choice_line(result):
    """One line on bench_block --gemm-candidates' choices at one micro-batch size."""
    choices = result.get("gemm_choices", [])
    changed = [c for c in choices if c["chosen"] != 0]

    def us(value):
        return "failed" if value is None else f"{value:.1f} us"

    line = (f"GEMM answers timed at mbs {result['mbs']}: {len(choices)} shapes, "
            f"{len(changed)} not on the heuristic's first")
    for c in changed:
        line += (f"; {c['shape']}: answer {c['chosen']} {us(c['answer_us'][c['chosen']])} "
                 f"vs {us(c['answer_us'][0])}")
    return line


def block_table(results):
    ours = load_json_line(os.path.join(results, "bench_block.json"))
    unfused = load_json_line(os.path.join(results, "bench_block-recompute.json"))
    tuned = load_json_line(os.path.join(results, "bench_block-tuned.json"))
    theirs = load_json_line(os.path.join(results, "torch_block.json"))
    out = ["## Block MFU (one LLaMA-7B block, F + p1 + p2, PaLM FLOPs, dense bf16 peak)", ""]
    if ours is None and theirs is None and tuned is None:
        return out + ["(no bench_block.json or torch_block.json)", ""]
    gpu = (ours or tuned or theirs).get("gpu", "?")
    peak = (ours or tuned or theirs).get("peak_bf16_tflops", 0)
    out.append(f"GPU {gpu}, peak {peak} TFLOP/s; pipeplan attention: "
               f"{(ours or {}).get('attention', '?')}; torch {(theirs or {}).get('torch', '?')}")
    out.append("")
    out.append("| implementation | mbs | F ms | p1 ms | p2 ms | bwd ms | step ms | TFLOP/s | MFU |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    tuned_label = f"pipeplan, best of {(tuned or {}).get('gemm_candidates', '?')} GEMM answers"
    for label, line in (("pipeplan (CUDA backend)", ours), (tuned_label, tuned),
                        ("pipeplan, unfused", unfused)):
        for r in (line or {}).get("results", []):
            out.append(f"| {label}: {line.get('attention', '?')} | {r['mbs']} | "
                       f"{r['forward_ms']:.2f} | {r['p1_ms']:.2f} | {r['p2_ms']:.2f} | "
                       f"{r['p1_ms'] + r['p2_ms']:.2f} | {r['step_ms']:.2f} | "
                       f"{r['tflops']['step']:.0f} | {100 * r.get('mfu', 0):.1f} % |")
    for r in (theirs or {}).get("results", []):
        name = f"PyTorch eager, SDPA {r['sdpa']}"
        if "error" in r:
            out.append(f"| {name} | {r['mbs']} | {r['error']} |||||||")
            continue
        out.append(f"| {name} | {r['mbs']} | {r['forward_ms']:.2f} | | | {r['backward_ms']:.2f} | "
                   f"{r['step_ms']:.2f} | {r['tflops']['step']:.0f} | "
                   f"{100 * r.get('mfu', 0):.1f} % |")
    out.append("")
    for r in (tuned or {}).get("results", []):
        out.append(gemm_choice_line(r))
    if tuned:
        out.append("")
    for r in (ours or {}).get("results", []):
        breakdown = r.get("breakdown")
        if not breakdown:
            continue
        out.append(f"pipeplan ops at mbs {r['mbs']} ({breakdown['steps']} steps with op marks, "
                   f"step {breakdown['step_ms']:.2f} ms):")
        out.append("")
        ops = breakdown.get("ops", [])
        copy_gbps = (ours.get("copy_bandwidth") or {}).get("gbps")
        out.append("| op | calls | ms per step | TFLOP/s | GB/s | share |")
        out.append("|---|---|---|---|---|---|")
        for op in ops:
            tflops = f"{op['tflops']:.0f}" if "tflops" in op else ""
            gbps = f"{op['gbps']:.0f}" if "gbps" in op else ""
            if gbps and copy_gbps:
                gbps += f" ({100 * op['gbps'] / copy_gbps:.0f} % of copy)"
            out.append(f"| {op['op']} | {op['calls_per_step']} | {op['ms']:.3f} | {tflops} | "
                       f"{gbps} | {100 * op['share_of_step']:.1f} % |")
        # Runs before the memory-bound kernels had marks of their own left them in this row.
        unmarked = ("launch gaps, events" if any("gbps" in op for op in ops)
                    else "norms, RoPE, SwiGLU, gaps")
        out.append(f"| (not marked: {unmarked}) | | {breakdown['unmarked_ms']:.3f} "
                   f"| | | {100 * breakdown['unmarked_share']:.1f} % |")
        out.append("")
        if copy_gbps:
            out.append(f"Device-to-device copy (the memory roofline): {copy_gbps:.0f} GB/s "
                       "(read + written).")
            out.append("")
    return out


def run_rows(results):
    rows = []
    for path in sorted(glob.glob(os.path.join(results, "*.run.json"))):
        name = os.path.basename(path)[: -len(".run.json")]
        report = load_json(path)
        plan = load_json(os.path.join(results, name + ".plan.json"))
        meta = (plan or {}).get("meta", {})
        rows.append({"name": name, "report": report, "meta": meta})
    return rows


def whole_gpu_step(row):
    """A run of run.sh's `step` (one stage on the whole GPU, step-*), or any run of one device the
    report says was not emulated: the whole steps' table has it, the pipelines' has not."""
    hardware = (row["report"] or {}).get("hardware") or {}
    return row["name"].startswith("step-") or (
        hardware.get("emulated") is False and int(row["meta"].get("devices", 0) or 0) == 1)


def max_stall_ms(results, name):
    """The largest per-device stall (compute waiting with its inputs ready) in NAME.diff.txt, in
    ms, and the part of it the host caused (its thread queued the op late; None where the diff
    has no host times); None where the diff is missing or has no stall column."""
    try:
        with open(os.path.join(results, name + ".diff.txt"), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    stalls, host, inside = [], None, False
    for line in lines:
        if line.startswith("devices (compute stream)"):
            inside = True
        elif inside and "meas stall" in line:
            continue
        elif inside:
            fields = line.split()
            if len(fields) != 9 or not fields[0].isdigit():
                inside = False
                continue
            stalls.append(float(fields[8]) / 1e3)
        elif "the host queued late:" in line:
            values = line.split(":", 1)[1].split()
            host = [float(v) / 1e3 for v in values if v != "us"]
    if not stalls:
        return None
    worst = max(range(len(stalls)), key=lambda d: stalls[d])
    return stalls[worst], (host[worst] if host and len(host) == len(stalls) else None)


def pipeline_table(results):
    out = ["## Emulated pipelines (stages emulated on one GPU, one peak per stage; plans from the "
           "SM-share profile)", ""]
    rows = [row for row in run_rows(results) if not whole_gpu_step(row)]
    if not rows:
        return out + ["(no *.run.json)", ""]
    out.append("| run | predicted ms | measured ms | steps | error | peak GiB per stage, measured "
               "(predicted) | worst memory error | max stall ms | flag |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    steps, stalls = {}, {}
    for row in rows:
        report = row["report"]
        if report is None or "measured" not in report:
            out.append(f"| {row['name']} | | | | | run failed or missing (see its .run.json and .run.err) | | "
                       "| |")
            continue
        predicted = report["predicted"]["makespan_us"] / 1e3
        # The median of the steps after the first where the report has it (pipeplan run's
        # "steady"), else the last step.
        steady = report["measured"].get("steady")
        if steady:
            measured = steady["makespan_us"] / 1e3
            error = report["error_pct"]["steady_makespan"]
            first, count = steady["first_step"], steady["steps"]
            steps_cell = f"{first}-{first + count - 1}" if count > 1 else f"{first}"
        else:
            measured = report["measured"]["makespan_us"] / 1e3
            error = report["error_pct"]["makespan"]
            steps_cell = "last"
        memory = report.get("peak_memory", [])
        cells = ", ".join(f"{m['measured_bytes'] / GIB:.2f} ({m['predicted_bytes'] / GIB:.2f})"
                          for m in memory)
        worst = max((abs(m["error_pct"]) for m in memory), default=0.0)
        worst_cell = f"{worst:.1f} %"
        worst_stage = max(memory, key=lambda m: abs(m["error_pct"]), default=None)
        if worst_stage is not None and "accounted_bytes" in worst_stage:
            # The runtime's account of the plan's tensors at their measured times on that stage:
            # near the prediction while the allocator is far above it, the excess is memory the
            # plan's timeline never held (docs/design/runtime.md, "What measurement on a GPU put into the runtime").
            worst_cell += (f" (stage {worst_stage.get('device', '?')}: plan's tensors "
                           f"{worst_stage['accounted_bytes'] / GIB:.2f})")
        flags = []
        if abs(error) > STEP_TOLERANCE_PCT:
            flags.append("step > 5 %")
        if worst > MEMORY_TOLERANCE_PCT:
            flags.append("memory > 10 %")
        stall = max_stall_ms(results, row["name"])
        stall_cell = ""
        if stall is not None:
            stall_cell = f"{stall[0]:.1f}"
            if stall[1] is not None:
                stall_cell += f" (host {stall[1]:.1f})"
        out.append(f"| {row['name']} | {predicted:.1f} | {measured:.1f} | {steps_cell} "
                   f"| {error:+.1f} % | {cells} "
                   f"| {worst_cell} | {stall_cell} | {', '.join(flags)} |")
        steps[row["name"]] = (predicted, measured)
        stalls[row["name"]] = stall_cell
    out.append("")
    speedups = []
    for name, (fused_pred, fused_meas) in sorted(steps.items()):
        if not name.endswith("-fused"):
            continue
        other = name[: -len("-fused")] + "-2bp"
        if other in steps:
            bp_pred, bp_meas = steps[other]
            speedups.append(f"| {name[: -len('-fused')]} | {fused_pred / bp_pred:.3f}x | "
                            f"{fused_meas / bp_meas:.3f}x |")
    if speedups:
        out += ["| schedule, m | predicted 2bp speedup | measured 2bp speedup |", "|---|---|---|"]
        out += speedups + [""]
    return out + copy_wait_rows(steps, stalls)


def copy_wait_rows(steps, stalls):
    """run.sh's waits: one plan run once per PIPEPLAN_COPY_WAIT mode (runs named
    waits-<mode>-<plan>), each beside the blocking wait's run of the same plan."""
    rows = []
    for name, (_, measured) in sorted(steps.items()):
        parts = name.split("-", 2)
        if len(parts) < 3 or parts[0] != "waits":
            continue
        base = steps.get(f"waits-blocking-{parts[2]}")
        ratio = f"{base[1] / measured:.3f}x" if base and measured > 0 else ""
        rows.append(f"| {parts[2]} | {parts[1]} | {measured:.1f} | {ratio} "
                    f"| {stalls.get(name, '')} |")
    if not rows:
        return []
    return ["| plan | copy wait | measured ms | blocking's over this | max stall ms |",
            "|---|---|---|---|---|"] + rows + [""]


def read_clocks(path):
    """The samples of one NAME.clocks.csv as dicts keyed util, sm_mhz, power_w, temp_c, reasons
    (a value None where nvidia-smi wrote N/A or the column is missing)."""
    keys = {"utilization.gpu": "util", "clocks.current.sm": "sm_mhz", "clocks.sm": "sm_mhz",
            "power.draw": "power_w", "power.draw.instant": "power_w",
            "temperature.gpu": "temp_c", "clocks_event_reasons.active": "reasons",
            "clocks_throttle_reasons.active": "reasons"}
    columns, samples = None, []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = [field.strip() for field in line.split(",")]
            if fields and fields[0] == "timestamp":
                columns = [keys.get(field.split(" [")[0]) for field in fields]
                continue
            if columns is None or len(fields) != len(columns):
                continue
            sample = {}
            for key, value in zip(columns, fields):
                if key is None:
                    continue
                try:
                    sample[key] = int(value, 16) if key == "reasons" else float(value)
                except ValueError:
                    sample[key] = None
            samples.append(sample)
    return samples


def loaded_samples(path):
    """(every sample of a NAME.clocks.csv, those taken under load: GPU utilization at least
    LOADED_UTILIZATION_PCT)."""
    samples = read_clocks(path)
    return samples, [s for s in samples if (s.get("util") or 0) >= LOADED_UTILIZATION_PCT]


def clocks_table(results):
    paths = sorted(glob.glob(os.path.join(results, "*.clocks.csv")))
    if not paths:
        return []
    out = [f"## GPU clock and power (nvidia-smi samples at >= {LOADED_UTILIZATION_PCT:.0f} % "
           "utilization)", "",
           "| command | samples (loaded) | SM clock MHz median (min) | power W median (max) "
           "| max temp C | clock-event reasons (share of loaded samples) |",
           "|---|---|---|---|---|---|"]
    for path in paths:
        name = os.path.basename(path)[: -len(".clocks.csv")]
        samples, loaded = loaded_samples(path)
        if not loaded:
            out.append(f"| {name} | {len(samples)} (0) | | | | |")
            continue

        def present(key):
            return [s[key] for s in loaded if s.get(key) is not None]

        clock, power, temps = present("sm_mhz"), present("power_w"), present("temp_c")
        reasons = present("reasons")
        named = [f"{label} {100 * sum(1 for r in reasons if r & bit) / len(reasons):.0f} %"
                 for bit, label in CLOCK_EVENT_REASONS if any(r & bit for r in reasons)]
        out.append(f"| {name} | {len(samples)} ({len(loaded)}) "
                   f"| {f'{statistics.median(clock):.0f} ({min(clock):.0f})' if clock else ''} "
                   f"| {f'{statistics.median(power):.0f} ({max(power):.0f})' if power else ''} "
                   f"| {f'{max(temps):.0f}' if temps else ''} | {', '.join(named)} |")
    return out + [""]


def concurrency(events):
    """(points, running): the compute events' start and end points in order, and how many ops
    ran between each point and the next, as `pipeplan calibrate fit` counts them."""
    points = sorted({t for s, e, _ in events for t in (s, e)})
    delta = {}
    for s, e, _ in events:
        delta[s] = delta.get(s, 0) + 1
        delta[e] = delta.get(e, 0) - 1
    running, k = [], 0
    for a in points[:-1]:
        k += delta[a]
        running.append(k)
    return points, running


def mean_share_computing(plan, trace):
    """The share of the plan's devices running a compute op, averaged over the traced step (from
    its first op's start to its last op's end), or None where the trace has no compute op. Under
    the sustained-load model (contention.sustained) it is also the step's mean load H: H follows
    the share with a lag, and the step repeats."""
    devices = int(plan.get("meta", {}).get("devices", 0))
    compute = {n.get("id") for n in plan_json.as_rows(plan).get("nodes", [])
               if n.get("kind") == "compute"}
    events = [(float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["args"]["node"])
              for e in trace.get("traceEvents", [])
              if e.get("ph") == "X" and e.get("args", {}).get("node") in compute]
    if devices <= 0 or not events:
        return None
    points, running = concurrency(events)
    if points[-1] <= points[0]:
        return None
    busy = sum((b - a) * min(1.0, k / devices) for a, b, k in zip(points, points[1:], running))
    return busy / (points[-1] - points[0])


def loaded_median_clock(path):
    """The median SM clock (MHz) of a NAME.clocks.csv's loaded samples, or None."""
    if not os.path.exists(path):
        return None
    clock = [s["sm_mhz"] for s in loaded_samples(path)[1] if s.get("sm_mhz") is not None]
    return statistics.median(clock) if clock else None


def clock_model_table(results):
    """Per emulated run with clock samples: the sustained-load model's slowdown against the
    profile's (1 + factor H over 1 + factor / P: the profile ran one stage of P at a time) beside
    the SM clock the SM-share profile ran at over the run's. If the model stands for the clock,
    the two columns agree."""
    profile_clock = loaded_median_clock(os.path.join(results, "profile-sm.clocks.csv"))
    rows = []
    for path in sorted(glob.glob(os.path.join(results, "*.clocks.csv"))):
        name = os.path.basename(path)[: -len(".clocks.csv")]
        plan = load_json(os.path.join(results, f"{name}.plan.json"))
        trace = load_json(os.path.join(results, f"{name}.trace.json"))
        if plan is None or trace is None:
            continue
        share = mean_share_computing(plan, trace)
        if share is None:
            continue
        devices = int(plan["meta"]["devices"])
        sustained = plan["meta"].get("contention", {}).get("sustained")
        model = ""
        if sustained:
            factor = float(sustained["factor"])
            model = f"{(1 + factor * share) / (1 + factor / devices):.3f}x"
        clock = loaded_median_clock(path)
        ratio = f"{profile_clock / clock:.3f}x" if profile_clock and clock else ""
        rows.append(f"| {name} | {share:.2f} | {model} | {ratio} |")
    if not rows:
        return []
    return (["## Clock against the sustained-load model", "",
             "Share computing: the traced step's mean share of stages running an op (its mean "
             "load H). Model: the step's slowdown from the load against the profile's, (1 + "
             "factor H) / (1 + factor / P), the factor the plan's (`contention.sustained`). "
             "Clock: the SM-share profile's median loaded SM clock over the run's.", "",
             "| run | share computing | model | clock (profile-sm / run) |",
             "|---|---|---|---|"] + rows + [""])


def measured_step_time(report):
    """(the measured whole step in us, the steps it is from): the median of steps 2..N of the
    report's per-step rows (`pipeplan run --json` "steps"), else its last step."""
    times = [step["step_time_us"] for step in report.get("steps") or [] if "step_time_us" in step]
    if len(times) > 1:
        steady = times[1:]
        cell = f"2-{len(times)}" if len(steady) > 1 else "2"
        return statistics.median(steady), cell
    return report["measured"]["step_time_us"], "last"


def step_table(results):
    """Runs whose plan has optimizer nodes: the whole step (task graph and optimizer) the run
    reports beside the planned one, the same quantity (run_report_json's step_time_us). Runs on
    a whole GPU (hardware.emulated false) with each device's peak memory, bounded by 3 % each;
    emulated runs apart, bounded by 5 % as the pipelines are."""
    whole, emulated = [], []
    for row in run_rows(results):
        report = row["report"] or {}
        predicted = (report.get("predicted") or {}).get("step_time_us")
        if whole_gpu_step(row) and "measured" not in report:
            # The pipelines' table leaves these out: a failed one is listed here.
            whole.append(f"| {row['name']} | | | | | run failed or missing (see its .run.json and .run.err) "
                         "| | |")
            continue
        if not predicted or "measured" not in report:
            continue
        measured, steps_cell = measured_step_time(report)
        error = 100 * (measured - predicted) / predicted
        if (report.get("hardware") or {}).get("emulated") is False:
            memory = report.get("peak_memory", [])
            cells = ", ".join(f"{m['measured_bytes'] / GIB:.2f} ({m['predicted_bytes'] / GIB:.2f})"
                              for m in memory)
            worst = max((abs(m["error_pct"]) for m in memory), default=None)
            flags = []
            if abs(error) > WHOLE_STEP_TOLERANCE_PCT:
                flags.append(f"step > {WHOLE_STEP_TOLERANCE_PCT:.0f} %")
            if worst is None:
                flags.append("no peak memory")
            elif worst > WHOLE_STEP_MEMORY_TOLERANCE_PCT:
                flags.append(f"memory > {WHOLE_STEP_MEMORY_TOLERANCE_PCT:.0f} %")
            worst_cell = "" if worst is None else f"{worst:.1f} %"
            whole.append(f"| {row['name']} | {steps_cell} | {predicted / 1e3:.1f} "
                         f"| {measured / 1e3:.1f} | {error:+.1f} % | {cells} | {worst_cell} "
                         f"| {', '.join(flags)} |")
        else:
            flag = f"step > {STEP_TOLERANCE_PCT:.0f} %" if abs(error) > STEP_TOLERANCE_PCT else ""
            emulated.append(f"| {row['name']} | {steps_cell} | {predicted / 1e3:.1f} "
                            f"| {measured / 1e3:.1f} | {error:+.1f} % | {flag} |")
    out = []
    if whole:
        out += ["## Whole steps on a whole GPU (task graph and optimizer; not emulated)", "",
                "Measured: the median of the steps after the first. Bounds: "
                f"{WHOLE_STEP_TOLERANCE_PCT:.0f} % on the step, "
                f"{WHOLE_STEP_MEMORY_TOLERANCE_PCT:.0f} % on each device's peak memory.", "",
                "| run | steps | predicted ms | measured ms | error | peak GiB per device, "
                "measured (predicted) | worst memory error | flag |",
                "|---|---|---|---|---|---|---|---|"] + whole + [""]
    if emulated:
        out += ["## Whole steps, emulated stages (task graph and optimizer)", "",
                "Measured: the median of the steps after the first. Bound: "
                f"{STEP_TOLERANCE_PCT:.0f} % on the step (peak memory: the pipelines' table).", "",
                "| run | steps | predicted ms | measured ms | error | flag |",
                "|---|---|---|---|---|---|"] + emulated + [""]
    return out


EVAL_ROW = re.compile(r"^(\S+)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+[+-]?\d+(?:\.\d+)?%"
                      r"\s+(\d+(?:\.\d+)?)\s+[+-]?\d+(?:\.\d+)?%")


def read_eval(path):
    """`pipeplan calibrate eval`'s rows: {run: (measured ms, before ms, after ms)}; empty where
    the file is missing. Header lines ('#', 'run ...') and anything else are skipped."""
    rows = {}
    if not os.path.exists(path):
        return rows
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            match = EVAL_ROW.match(line)
            if match and not line.startswith("#"):
                name, measured, before, after = match.groups()
                rows[name] = (float(measured), float(before), float(after))
    return rows


def steady_makespan(report):
    """(measured makespan ms, the steps it is from): the run's median of steps 2..N where the
    report has it, else its last step."""
    steady = report["measured"].get("steady")
    if steady:
        first, count = steady["first_step"], steady["steps"]
        cell = f"{first}-{first + count - 1}" if count > 1 else f"{first}"
        return steady["makespan_us"] / 1e3, cell
    return report["measured"]["makespan_us"] / 1e3, "last"


def predict_table(results):
    """The `predict` WHAT: each predict-* run's measured step (the median of steps 2..N, one
    definition for both columns) against its plan from the stages' profile as measured, and
    against `calibrate eval`'s re-plan from the calibrated profile (its "after ms")."""
    names = sorted(os.path.basename(p)[: -len(".run.json")]
                   for p in glob.glob(os.path.join(results, "predict-*.run.json")))
    # One `calibrate eval` per run (predict-calibrate-eval-<run>.txt), or one of them all.
    eval_paths = sorted(glob.glob(os.path.join(results, "predict-calibrate-eval*.txt")))
    if not names and not eval_paths:
        return []
    evaluated = {}
    for eval_path in eval_paths:
        evaluated.update(read_eval(eval_path))
    # The runs `calibrate fit` was given: those with a trace.
    fits = sorted(os.path.basename(p)[: -len(".run.json")]
                  for p in glob.glob(os.path.join(results, "fit-*.run.json"))
                  if os.path.exists(p[: -len(".run.json")] + ".trace.json"))
    out = ["## Predicted before any run, then calibrated on other schedules", "",
           "Measured: the run's median of the steps after the first. Uncalibrated: the plan from "
           "the stages' profile as measured; calibrated: `calibrate eval`'s re-plan from the "
           f"profile `calibrate fit` wrote from {', '.join(fits) if fits else 'the fit-* runs'}. "
           f"Bounds: {UNCALIBRATED_TOLERANCE_PCT:.0f} % uncalibrated, "
           f"{CALIBRATED_TOLERANCE_PCT:.0f} % calibrated.", "",
           "| run | steps | measured ms | uncalibrated ms | error | calibrated ms | error | flag |",
           "|---|---|---|---|---|---|---|---|"]
    for name in names:
        report = load_json(os.path.join(results, name + ".run.json"))
        if report is None or "measured" not in report:
            out.append(f"| {name} | | | | | | | run failed or missing (see its .run.json and .run.err) |")
            continue
        measured, steps_cell = steady_makespan(report)
        uncalibrated = report["predicted"]["makespan_us"] / 1e3
        error = 100 * (measured - uncalibrated) / uncalibrated
        flags = []
        if abs(error) > UNCALIBRATED_TOLERANCE_PCT:
            flags.append(f"uncalibrated > {UNCALIBRATED_TOLERANCE_PCT:.0f} %")
        calibrated_cells = "| | |"
        if name in evaluated:
            calibrated = evaluated[name][2]
            calibrated_error = 100 * (measured - calibrated) / calibrated
            calibrated_cells = f"| {calibrated:.1f} | {calibrated_error:+.1f} % |"
            if abs(calibrated_error) > CALIBRATED_TOLERANCE_PCT:
                flags.append(f"calibrated > {CALIBRATED_TOLERANCE_PCT:.0f} %")
        else:
            flags.append("not calibrated (see predict-calibrate-fit.txt, -eval-*.txt)")
        out.append(f"| {name} | {steps_cell} | {measured:.1f} | {uncalibrated:.1f} "
                   f"| {error:+.1f} % {calibrated_cells} {', '.join(flags)} |")
    if not names:
        out.append("| (no predict-*.run.json) | | | | | | | |")
    return out + [""]


def bpipe_estimate_table(results):
    """`pipeplan bpipe --json` from the whole-GPU profile (the `step` WHAT): the best plan without
    BPipe and the best that fits only with it, the gain and the verdict."""
    path = os.path.join(results, "bpipe-estimate.json")
    if not os.path.exists(path):
        return []
    out = ["## BPipe's verdict from the whole-GPU profile", "",
           "Each plan's step has the optimizer step in it where the profile has `optimizer_us` "
           "(`pipeplan profile --backend cuda` measures it).", ""]
    estimate = load_json(path)
    if estimate is None or "verdict" not in estimate:
        return out + ["(no estimate: see bpipe-estimate.txt and bpipe-estimate.json)", ""]
    limit = estimate.get("memory_limit_bytes")
    out.append(f"{estimate.get('stages', '?')} stages, global batch "
               f"{estimate.get('global_batch', '?')}" +
               (f", {limit / GIB:.2f} GiB per GPU" if limit else "") + ".")
    out += ["", "| plan | mbs | m | backward | BPipe | step ms | stage MFU | peak GiB |",
            "|---|---|---|---|---|---|---|---|"]
    for label, key in (("without BPipe", "without"), ("with BPipe", "with")):
        c = estimate.get(key)
        if not c:
            out.append(f"| {label} | none needs it | | | | | | |")
            continue
        out.append(f"| {label} | {c['mbs']} | {c['microbatches']} | {c['backward']} "
                   f"| {'on' if c['bpipe'] else 'off'} | {c['step_time_ms']:.1f} "
                   f"| {100 * c['stage_mfu']:.1f} % | {c['peak_memory_bytes'] / GIB:.2f} |")
    out += ["", f"Verdict: {estimate['verdict']}",
            f"Second opinion: {estimate.get('second_opinion', '')}", ""]
    return out


def load_table(results):
    """Each profile's load run (`sustained_load`): the sustained-load model the profiler fitted,
    how much it explains, and the clock it saw."""
    rows = []
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        if path.endswith((".run.json", ".plan.json", ".trace.json")):
            continue
        profile = load_json(path)
        load = profile.get("sustained_load") if isinstance(profile, dict) else None
        if not load:
            continue
        model = load["model"]
        clock = load.get("clock")
        clock_cell = (f"{clock['start_mhz']:.0f} → {clock['steady_mhz']:.0f} MHz, "
                      f"{100 * clock['power_capped']:.0f} % capped, "
                      f"{clock['steady_power_w']:.0f} W") if clock else "not sampled"
        ops = ", ".join(f"{op} {t['burst_us'] / 1e3:.2f} → {t['steady_us'] / 1e3:.2f}"
                        for op, t in sorted(load["ops"].items()))
        rows.append(f"| {os.path.basename(path)} | {load['devices']} | {load['seconds']:.1f} "
                    f"| {model['factor']:.3f} | {model['time_constant_us'] / 1e3:.0f} "
                    f"| {load['error_pct']['constant']:.2f} → {load['error_pct']['model']:.2f} % "
                    f"| {ops} | {clock_cell} |")
    if not rows:
        return []
    return (["## Profiles under load (the sustained-load model measured at profile time)", "",
             "| profile | contexts | s | factor | τ ms | op spread, constant → model | ops ms, "
             "cold → steady | SM clock, start → steady |",
             "|---|---|---|---|---|---|---|---|"] + rows + [""])


PAIRS_LINE = re.compile(
    r"overlapped pairs: (\d+), median time predicted ([\d.]+) us, measured ([\d.]+) us; "
    r"overlap efficiency planned ([\d.]+), measured (?:([\d.]+) \(from (\d+) pairs|unknown)")


def pairs_table(results):
    """The overlapped pairs of each run whose diff has them (pipeplan diff's 'overlapped pairs'
    line): the median pair time predicted and measured, and the overlap efficiency planned (the
    profile's) beside the one the run shows."""
    rows = []
    for path in sorted(glob.glob(os.path.join(results, "*.diff.txt"))):
        with open(path, encoding="utf-8") as f:
            match = next((PAIRS_LINE.search(line) for line in f if PAIRS_LINE.search(line)), None)
        if match is None:
            continue
        name = os.path.basename(path)[: -len(".diff.txt")]
        pairs, predicted, measured, planned, efficiency, count = match.groups()
        measured_cell = f"{float(efficiency):.2f} ({count} pairs)" if efficiency else "unknown"
        rows.append(f"| {name} | {pairs} | {float(predicted) / 1e3:.2f} | "
                    f"{float(measured) / 1e3:.2f} | {float(planned):.2f} | {measured_cell} |")
    if not rows:
        return []
    return (["## Overlapped pairs (a forward beside another micro-batch's backward, on two "
             "streams)", "",
             "| run | pairs | median pair ms, predicted | measured | overlap efficiency, planned "
             "| measured (from pairs whose ops also ran alone) |",
             "|---|---|---|---|---|---|"] + rows + [""])


LOSS_RUNS = [("local", "device-local copies"), ("nccl", "over NCCL"), ("torchrun", "torchrun")]


def not_run_reason(path):
    """The reason run.sh wrote into a file for a command it could not run ("# not run: ..."),
    or None."""
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("# not run: "):
                return line[len("# not run: "):].strip()
    return None


def run_losses(path):
    """The per-step losses of a `pipeplan run --json` report, or None; a loss that is not a
    number (JSON writes NaN as null) is NaN, so that it differs from every loss."""
    report = load_json(path)
    if report is None or "steps" not in report:
        return None
    losses = []
    for step in report["steps"]:
        loss = step.get("loss") if isinstance(step, dict) else None
        number = isinstance(loss, (int, float)) and not isinstance(loss, bool)
        losses.append(float(loss) if number else math.nan)
    return losses


def nccl_plans(paths):
    """{plan: {kind: path}} of NAME.local.json, NAME.nccl.json, NAME.torchrun.json paths."""
    plans = {}
    for path in paths:
        base = os.path.basename(path)
        for kind, _ in LOSS_RUNS:
            if base.endswith(f".{kind}.json"):
                plans.setdefault(base[: -len(f".{kind}.json")], {})[kind] = path
    return plans


def relative_difference(a, b):
    """|a - b| over the larger magnitude; 0 where equal, infinite where either is not finite."""
    if a == b:
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


def compare_losses(losses, reference):
    """(cell, whether LOSSES agree with REFERENCE, the largest relative difference of the steps
    after the first): step 1 bit for bit, the later steps within LOSS_RELATIVE_TOLERANCE."""
    first = relative_difference(losses[0], reference[0])
    later = max((relative_difference(a, b) for a, b in zip(losses[1:], reference[1:])),
                default=0.0)
    if first != 0.0:
        return (f"**differs** at step 1 ({first:.3g} relative; step 1 must be bit for bit)",
                False, later)
    if later == 0.0:
        return "same", True, later
    if later <= LOSS_RELATIVE_TOLERANCE:
        return (f"step 1 same, then up to {later:.2g} relative (within "
                f"{LOSS_RELATIVE_TOLERANCE:g})", True, later)
    return (f"**differs** (up to {later:.3g} relative after step 1, beyond "
            f"{LOSS_RELATIVE_TOLERANCE:g})", False, later)


def losses_table(paths):
    """Per plan (NAME.local.json, NAME.nccl.json, NAME.torchrun.json), the device-local run's
    losses and whether the other ways agree with them (compare_losses: step 1 bit for bit, the
    later steps within LOSS_RELATIVE_TOLERANCE); with whether all agree. A run not given,
    missing, or recorded as not run is a failure."""
    plans = nccl_plans(paths)
    rows, same, largest = [], bool(plans), None
    for name, runs in sorted(plans.items()):
        reference = run_losses(runs["local"]) if "local" in runs else None
        cells = [" ".join(f"{x:.6f}" for x in reference) if reference else "missing"]
        same = same and bool(reference)
        for kind, _ in LOSS_RUNS[1:]:
            reason = not_run_reason(runs[kind]) if kind in runs else None
            if kind not in runs or not os.path.exists(runs[kind]):
                cells.append("**not run**")
                same = False
                continue
            if reason is not None:
                cells.append(f"**not run** ({reason})")
                same = False
                continue
            losses = run_losses(runs[kind])
            if not losses or reference is None or len(losses) != len(reference):
                cells.append("missing")
                same = False
                continue
            cell, agrees, later = compare_losses(losses, reference)
            cells.append(cell)
            same = same and agrees
            largest = later if largest is None else max(largest, later)
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    if not rows:
        return [], False
    largest_cell = ("" if largest is None else
                    "; the largest relative difference after step 1: " +
                    ("0 (bit for bit)" if largest == 0.0 else f"{largest:.2g}"))
    return (["## NCCL on one GPU: losses of each plan run three ways", "",
             "Each way against the device-local run: step 1 bit for bit, the later steps within a "
             f"relative {LOSS_RELATIVE_TOLERANCE:g} (cuDNN's fused attention backward and the "
             "atomicAdd gradients are not bit-reproducible).", "",
             "| plan | " + " | ".join(title for _, title in LOSS_RUNS) + " |",
             "|---|---|---|---|"] + rows + ["",
             f"All three ways agree{largest_cell}." if same else
             f"**Not every way ran and agreed** (a way missing or not run counts){largest_cell}.",
             ""]), same


def nccl_run_paths(results):
    """The NCCL runs run.sh meant for this folder: for every plan with a nccl-*.plan.txt or a run
    of any way, the path of each way's report (existing or not)."""
    names = {os.path.basename(p)[: -len(".plan.txt")]
             for p in glob.glob(os.path.join(results, "nccl-*.plan.txt"))}
    names |= set(nccl_plans(glob.glob(os.path.join(results, "nccl-*.json"))))
    return [os.path.join(results, f"{name}.{kind}.json")
            for name in sorted(names) for kind, _ in LOSS_RUNS]


def nccl_times_table(paths):
    """Per plan, each way's measured step (the median of steps 2..N) beside the plan's."""
    rows = []
    for name, runs in sorted(nccl_plans(paths).items()):
        predicted, cells = None, []
        for kind, _ in LOSS_RUNS:
            report = load_json(runs[kind]) if kind in runs else None
            if report is None or "measured" not in report:
                reason = not_run_reason(runs[kind]) if kind in runs else None
                cells.append("not run" if reason or kind not in runs or
                             not os.path.exists(runs[kind]) else "missing")
                continue
            predicted = report["predicted"]["makespan_us"] / 1e3
            measured, steps_cell = steady_makespan(report)
            cells.append(f"{measured:.1f} ({100 * (measured - predicted) / predicted:+.1f} %, "
                         f"steps {steps_cell})")
        predicted_cell = f"{predicted:.1f}" if predicted is not None else ""
        rows.append(f"| {name} | {predicted_cell} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return (["## NCCL on one GPU: step time of each way (ms; error against the plan)", "",
             "torchrun: P processes share the GPU (time-sliced unless MPS runs): reported, "
             "not bounded.", "",
             "| plan | predicted | " + " | ".join(title for _, title in LOSS_RUNS) + " |",
             "|---|---|---|---|---|"] + rows + [""])


def link_times(diff):
    """{(from device, to device): {"send"/"recv": [count, predicted us, measured us]}} from a
    `pipeplan diff --json --all`: the ops on each send>PEER and recv<PEER stream, summed."""
    links = {}
    for op in (diff or {}).get("ops", []):
        stream, device = str(op.get("stream", "")), int(op.get("device", -1))
        match = re.fullmatch(r"(send)>(\d+)|(recv)<(\d+)", stream)
        if match is None:
            continue
        if match.group(1):
            key, kind = (device, int(match.group(2))), "send"
        else:
            key, kind = (int(match.group(4)), device), "recv"
        entry = links.setdefault(key, {}).setdefault(kind, [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += float(op["predicted_us"])
        entry[2] += float(op["measured_us"])
    return links


def nccl_links_table(results, paths):
    """Per plan and link, the transfers' time in the traced step: predicted, and measured each
    way (NAME.<way>.diff.json)."""
    rows = []
    for name in sorted(nccl_plans(paths)):
        ways = {kind: link_times(load_json(os.path.join(results, f"{name}.{kind}.diff.json")))
                for kind, _ in LOSS_RUNS}
        keys = sorted(set().union(*(set(links) for links in ways.values())))
        for key in keys:
            cells, count = [], 0
            for kind in ("send", "recv"):
                predicted = next((links[key][kind][1] for links in ways.values()
                                  if kind in links.get(key, {})), None)
                cells.append(f"{predicted / 1e3:.2f}" if predicted is not None else "")
                for way, _ in LOSS_RUNS:
                    entry = ways[way].get(key, {}).get(kind)
                    cells.append(f"{entry[2] / 1e3:.2f}" if entry else "")
                    if entry:
                        count = max(count, entry[0])
            rows.append(f"| {name} | {key[0]}→{key[1]} | {count} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    titles = " | ".join(title for _, title in LOSS_RUNS)
    return (["## NCCL on one GPU: transfers per link (the traced step, ms summed over the "
             "link's transfers)", "",
             f"| plan | link | transfers | send predicted | {titles} | recv predicted | "
             f"{titles} |", "|---|---|---|---|---|---|---|---|---|---|---|"] + rows + [""])


def rank_killed_table(path):
    """The killed-rank check (bench/gpu/rank_killed.sh's output): (Markdown lines, whether every
    rank passed). Rank K must have been killed (SIGKILL); every other rank must exit non-zero
    (not at the harness's limit) with exactly one error line, "pipeplan: error: rank R: ..."
    naming rank K ("rank K closed its connection"), and end within --timeout-ms plus the slack of
    rank K's end."""
    facts = load_json_line(path)
    title = "## NCCL: a rank killed at its first node"
    if facts is None or "ranks" not in facts:
        return [title, "", f"(no result: see {os.path.basename(path)})", ""], False
    folder = os.path.dirname(path)
    killed, bound = facts["killed_rank"], facts["timeout_ms"] + facts["slack_ms"]
    ranks = {r["rank"]: r for r in facts["ranks"]}
    killed_end = ranks.get(killed, {}).get("end_ms", -1)
    rows, passed = [], True
    for rank in sorted(ranks):
        entry = ranks[rank]
        status, end = entry["status"], entry["end_ms"]
        try:
            with open(os.path.join(folder, entry["output"]), encoding="utf-8",
                      errors="replace") as f:
                errors = [line.rstrip("\n") for line in f
                          if line.startswith(("pipeplan: error", "pipeplan: internal error"))]
        except OSError:
            errors = None
        problems = []
        after = end - killed_end if killed_end >= 0 and end >= 0 else None
        if rank == killed:
            if status != SIGKILL_STATUS:
                problems.append(f"not killed (exit {status})")
        else:
            if status in (0, -1, 124):
                problems.append({0: "exit 0", -1: "no exit status",
                                 124: f"hit the limit of {facts.get('limit_s', '?')} s"}[status])
            if errors is None:
                problems.append("no output")
            elif len(errors) != 1:
                problems.append(f"{len(errors)} error lines")
            elif not (errors[0].startswith(f"pipeplan: error: rank {rank}: ") and
                      f"rank {killed} closed its connection" in errors[0]):
                problems.append(f"the error line does not name rank {killed}")
            if after is None or after > bound:
                problems.append(f"not ended within {bound / 1e3:.0f} s of rank {killed}")
        passed = passed and not problems
        line = (errors[0] if errors else "")[:160].replace("|", "\\|")
        verdict = "pass" if not problems else "**fail**: " + ", ".join(problems)
        rows.append(f"| {rank} | {status} | {end} | {'' if after is None else after} "
                    f"| {line} | {verdict} |")
    missing = [r for r in range(facts.get("world", len(ranks))) if r not in ranks]
    if missing or killed not in ranks:
        passed = False
    return ([f"{title} (PIPEPLAN_TEST_FAULT=die:{killed})", "",
             f"Rank {killed} killed (SIGKILL); every other rank must exit non-zero with one "
             f"error line naming rank {killed}, within --timeout-ms {facts['timeout_ms']} ms "
             f"plus {facts['slack_ms'] / 1e3:.0f} s of rank {killed}'s end.", "",
             "| rank | exit | ended ms after the start | ms after the killed rank | error line "
             "| verdict |", "|---|---|---|---|---|---|"] + rows +
            (["", f"Ranks without a result: {missing}"] if missing else []) +
            ["", "Every rank passed." if passed else "**Not every rank passed.**", ""]), passed


def machine_table(results):
    """The NCCL pipeplan loads (nccl-env.json, else env.json) and whether MPS runs
    (env-mps.txt's "MPS:" line)."""
    lines = []
    for name in ("nccl-env.json", "env.json"):
        env = load_json(os.path.join(results, name))
        if env is None:
            continue
        nccl = next((lib for lib in env.get("libraries") or [] if lib.get("name") == "libnccl"),
                    None)
        if nccl is None:
            continue
        version = nccl.get("version") or "unknown version"
        lines.append(f"- NCCL: {version} from {nccl.get('path') or '?'} ({name})" +
                     (f"; {nccl['error']}" if nccl.get("error") else ""))
        break
    mps_path = os.path.join(results, "env-mps.txt")
    if os.path.exists(mps_path):
        with open(mps_path, encoding="utf-8", errors="replace") as f:
            mps = [line.strip() for line in f if line.startswith("MPS: ")]
        lines.append(f"- {mps[-1]}" if mps else "- MPS: unknown (see env-mps.txt)")
    if not lines:
        return []
    return ["## Machine", ""] + lines + [""]


def nccl_tables(results):
    """The NCCL runs' losses, times and link times, and the killed-rank test where it ran."""
    paths = nccl_run_paths(results)
    out = losses_table(paths)[0] + nccl_times_table(paths) + nccl_links_table(results, paths)
    killed = os.path.join(results, "nccl-rank-killed.txt")
    if os.path.exists(killed):
        out += rank_killed_table(killed)[0]
    return out


def main(argv):
    if argv[:1] == ["--losses"]:
        lines, same = losses_table(argv[1:])
        print("\n".join(lines) if lines else "no NCCL runs given")
        return 0 if same else 1
    if argv[:1] == ["--rank-killed"] and len(argv) == 2:
        lines, passed = rank_killed_table(argv[1])
        print("\n".join(lines))
        return 0 if passed else 1
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    results = argv[0]
    lines = []
    for table in (machine_table, tests_table, block_table, pipeline_table, predict_table,
                  pairs_table, nccl_tables, step_table, bpipe_estimate_table, load_table,
                  clocks_table, clock_model_table):
        # One table that cannot read its files (a partial or unexpected output) says so; the
        # others are still written.
        try:
            lines += table(results)
        except Exception as error:  # pylint: disable=broad-except
            lines += [f"## {table.__name__}: the table failed ({type(error).__name__}: {error})",
                      ""]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
