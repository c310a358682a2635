#!/usr/bin/env python3
"""Fit the simulator's contention model (emulated stages sharing one GPU) from measured runs.

`pipeplan run --emulate P` runs P stages in green contexts of one GPU. Each op was profiled alone
in its SM share (`profile --sm-partition`), but while the other stages compute it runs slower:
they share HBM, L2 and the power budget. The simulator models this as processor sharing: an op
advances through its profiled time at rate 1 / slowdown[k - 1] while k compute ops run at once
(planner/graph/simulator.h). This script measures those factors from runs of plans made from
that profile:

  fit   For every compute op of every (plan, measured trace) pair: its profiled time d (the
        plan's duration_us) and, from the trace, the time T_k it spent while k compute ops ran
        on the GPU (itself included). Processor sharing says d = sum_k T_k / slowdown_k, linear
        in 1 / slowdown_k: least squares over all ops, each row scaled by 1 / d (relative
        error). Levels with under 1 % of the time get the nearest fitted level's factor.
        Writes a copy of the profile with its "contention" object set (-o), and prints the
        factors and each run's op error before and after.
        Transfers between the stages are copy kernels on the sender's SMs: for each send of
        link time d (the plan's duration_us), the trace's time T_idle while its sender ran no
        compute op and T_busy while it ran one give d = T_idle / sender_idle + T_busy /
        sender_computing, fitted the same way ("copy"; left out with too few transfers or
        where either case has under 1 % of the time). --copy-only keeps the profile's compute
        curves and sets the copy factors alone.
        --sustained also fits the sustained-load model ("sustained": every op further slowed
        by 1 + factor * H, H the share of devices computing averaged over a time constant,
        profiles/contention.h): for each factor and time constant of a grid, H's course in
        each trace (the step repeating, as the simulator takes it) divides each piece of an
        op's time, the curves are fitted as above, and the pair with the least mean op error
        is kept (factor 0 is the model without it). --min-factor and --max-factor bound the
        factors tried; equal, with one time constant, they fix the term and fit the curves alone
        (another profile's term carried over, e.g. from 4 emulated stages to 8).

  eval  For each run: re-plans it with the profile given (the plan command recorded in
        NAME.plan.txt, its --profile and -o replaced), checks that the schedule is the one that
        ran, and prints the predicted step time against the measured one, before (the recorded
        plan) and after (the new plan), via `pipeplan diff`; where NAME.run.json (the run
        report) is there, also the worst error of the allocator's peak per device against the
        predicted peak, before and after (a profile with working memory changes the latter).
        A re-plan the memory limit refuses (the new model predicts more than the recorded
        --memory) is made again without a limit and marked "over --memory".

  copy  Writes a copy of PROFILE with the contention model of another profile (--from) of the
        same model, sequence, attention, GPU and SM share: a new measurement of the ops keeps
        the slowdowns fitted to earlier runs, so plans made from it predict before they run.

A RUN is a path prefix: RUN.plan.json and RUN.trace.json (and, for eval, RUN.plan.txt, as
bench/gpu/run.sh writes them). Format: docs/reference/profile-format.md ("contention").

  python3 tools/calibrate/fit_contention.py fit --profile P.json -o P.fit.json DIR/1f1b-m4-2bp ...
  python3 tools/calibrate/fit_contention.py eval --pipeplan build/tools/pipeplan --profile P.fit.json \\
      DIR/1f1b-m8-2bp ...
  python3 tools/calibrate/fit_contention.py copy --from P.fit.json -o NEW.next.json NEW.measured.json
"""
import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_json import ProfileError, load_json, load_profile, write_json_atomic  # noqa: E402
import plan_json  # noqa: E402  pylint: disable=wrong-import-position


class FitError(ProfileError):
    pass


def load_run(prefix):
    """(plan, compute events [(start, end, node)], send events [(start, end, node)]) of one
    run."""
    plan_path, trace_path = prefix + ".plan.json", prefix + ".trace.json"
    plan, trace = load_json(plan_path), load_json(trace_path)
    if not isinstance(plan, dict) or plan.get("format") != "pipeplan-plan":
        raise FitError(f"{plan_path}: not a pipeplan plan (field 'format')")
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise FitError(f"{trace_path}: not a pipeplan trace (field 'traceEvents')")
    nodes = {n["id"]: n for n in plan_json.as_rows(plan)["nodes"]}
    events, sends = [], []
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        node = nodes.get(e.get("args", {}).get("node"))
        if node is None:
            raise FitError(f"{trace_path}: event '{e.get('name')}' names no node of {plan_path}")
        if node["kind"] in ("compute", "send"):
            interval = (float(e["ts"]), float(e["ts"]) + float(e["dur"]), node)
            (events if node["kind"] == "compute" else sends).append(interval)
    if not events:
        raise FitError(f"{trace_path}: no compute op")
    return plan, events, sends


def copy_samples(events, sends):
    """Per send with link time: (d, T_idle, T_busy), T_busy being the part of the copy during
    which its sending device ran a compute op."""
    busy = {}
    for start, end, node in events:
        busy.setdefault(node["device"], []).append((start, end))
    samples = []
    for start, end, node in sends:
        d = float(node.get("duration_us", 0))
        if d <= 0:
            continue
        # A device's compute ops do not overlap (one compute stream), so the overlaps add up.
        overlap = sum(max(0.0, min(end, e) - max(start, s))
                      for s, e in busy.get(node["device"], []))
        overlap = min(overlap, end - start)
        samples.append((d, end - start - overlap, overlap))
    return samples


def fit_copy(samples, min_copies):
    """(sender_idle, sender_computing) by least squares in their inverses, in microseconds; None
    with fewer than `min_copies` sends or where either case has under 1 % of the time."""
    if len(samples) < min_copies:
        return None
    idle = sum(ti for _, ti, _ in samples)
    computing = sum(tb for _, _, tb in samples)
    if min(idle, computing) < 0.01 * (idle + computing):
        return None
    # Rows in microseconds (d = T_idle * r_idle + T_busy * r_busy): the long copies, BPipe's
    # stash moves, weigh most; they are the ones whose length decides what memory is held.
    rates = least_squares(((ti, tb), d) for d, ti, tb in samples)
    if rates is None or any(r <= 0 for r in rates):
        return None
    return 1.0 / rates[0], 1.0 / rates[1]


def copy_error(samples, factors):
    """Median absolute relative error between a copy's link time and the link time the model
    gets done in the copy's measured time, beside its sender's measured activity."""
    errors = sorted(abs((ti / factors[0] + tb / factors[1]) / d - 1) for d, ti, tb in samples)
    return errors[len(errors) // 2] if errors else float("nan")


def concurrency(events):
    """(points, running, index): the compute events' start and end points in order, how many
    ops ran between each point and the next (counted once per interval), and each point's
    position in `points`."""
    points = sorted({t for s, e, _ in events for t in (s, e)})
    running, delta = [], {}
    for s, e, _ in events:
        delta[s] = delta.get(s, 0) + 1
        delta[e] = delta.get(e, 0) - 1
    k = 0
    for a in points[:-1]:
        k += delta[a]
        running.append(k)
    return points, running, {t: i for i, t in enumerate(points)}


def time_at_levels(events, devices):
    """Per compute event: [T_1 .. T_devices], the time it spent while k compute ops ran."""
    points, running, index = concurrency(events)
    rows = []
    for s, e, node in events:
        levels = [0.0] * devices
        for i in range(index[s], index[e]):
            levels[min(max(running[i], 1), devices) - 1] += points[i + 1] - points[i]
        rows.append((node, levels))
    return rows


def load_course(events, devices, tau):
    """Per compute event: (node, [(level, share, h, dt)]), the segments of its run between
    consecutive start/end points: how many compute ops ran (level, 0-based), the share of the
    devices computing, the sustained load H at the segment's start and its length. H follows
    the share with time constant `tau` (dH/dt = (share - H) / tau) and the step repeats: it
    starts at the load its end leaves, as in the simulator (planner/graph/simulator.cpp). For
    these (measured) times the end is affine in the start with slope exp(-span / tau), so that
    load is exact: the end of a pass from an idle GPU over 1 - slope. A trace whose compute ops
    take no time (or none) has no load: it stays at the idle GPU's 0."""
    points, running, index = concurrency(events)
    if not points or points[-1] <= points[0]:
        return [(node, []) for _, _, node in events]
    shares = [min(1.0, r / devices) for r in running]

    def run_from(h):
        starts = []
        for i, share in enumerate(shares):
            starts.append(h)
            h = share + (h - share) * math.exp(-(points[i + 1] - points[i]) / tau)
        return starts, h

    _, end = run_from(0.0)
    starts, _ = run_from(end / (1 - math.exp(-(points[-1] - points[0]) / tau)))
    return [(node, [(min(max(running[i], 1), devices) - 1, shares[i], starts[i],
                     points[i + 1] - points[i]) for i in range(index[s], index[e])])
            for s, e, node in events]


def work_in(dt, share, h, factor, tau):
    """The profiled work an op of slowdown 1 gets done in `dt` while the load moves from `h`
    towards `share`: the integral of dt' / (1 + factor * H(t')), as the simulator computes it."""
    a = 1 + factor * share
    b = factor * (h - share)
    return (dt + tau * math.log((a + b * math.exp(-dt / tau)) / (a + b))) / a


def sustained_samples(course, devices, factor, tau):
    """(op, d, [T'_1 .. T'_devices]) per op with a profiled time: the time it spent at each
    concurrency level, each piece divided by the sustained load's factor over it."""
    samples = []
    for node, segments in course:
        d = float(node["duration_us"])
        if d <= 0:
            continue
        levels = [0.0] * devices
        for level, share, h, dt in segments:
            levels[level] += work_in(dt, share, h, factor, tau) if factor > 0 else dt
        samples.append((node["op"], d, levels))
    return samples


def fit_sustained(runs, devices, min_ops, time_constants_us, factors):
    """The sustained-load factor and time constant whose compute curves, fitted on the runs'
    ops, predict their times best (mean op error over the runs): a grid search. Returns
    (factor, tau, slowdown, by_op, samples_by_run, error)."""
    best = None
    for tau in time_constants_us:
        courses = {prefix: load_course(events, devices, tau) for prefix, events in runs}
        for factor in factors:
            samples_by_run = {prefix: sustained_samples(course, devices, factor, tau)
                              for prefix, course in courses.items()}
            try:
                slowdown, by_op = fit_compute(samples_by_run, devices, min_ops)
            except FitError:
                continue
            model = dict(by_op, **{"": slowdown})
            error = sum(op_error(samples, model) for samples in samples_by_run.values())
            error /= len(samples_by_run)
            if best is None or error < best[-1] - 1e-12:
                best = (factor, tau, slowdown, by_op, samples_by_run, error)
    if best is None:
        raise FitError("no sustained-load factor gives a fit")
    return best


def solve(matrix, vector):
    """Gaussian elimination with partial pivoting; None when singular."""
    n = len(vector)
    a = [row[:] + [vector[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col:
                factor = a[r][col] / a[col][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[col])]
    return [a[i][n] / a[i][i] for i in range(n)]


def least_squares(rows):
    """x minimising sum (row . x - target)^2 over (row, target) pairs, by the normal equations;
    None when singular."""
    rows = list(rows)
    n = len(rows[0][0]) if rows else 0
    normal = [[0.0] * n for _ in range(n)]
    right = [0.0] * n
    for row, target in rows:
        for i, x in enumerate(row):
            right[i] += x * target
            for j, y in enumerate(row):
                normal[i][j] += x * y
    return solve(normal, right)


def fit(samples, devices, fallback=None):
    """slowdown[0 .. devices-1] from (profiled d, [T_k]) samples (least squares in 1/slowdown).

    A level with under 1 % of the time takes `fallback`'s factor there, else the nearest
    fitted level's."""
    total = [0.0] * devices
    for _, levels in samples:
        total = [t + x for t, x in zip(total, levels)]
    grand = sum(total)
    used = [k for k in range(devices) if total[k] >= 0.01 * grand]
    if not used:
        raise FitError("no op time measured")
    # Each row scaled by 1 / d: relative error, target d / d = 1.
    rates = least_squares(([levels[k] / d for k in used], 1.0) for d, levels in samples)
    if rates is None or any(r <= 0 for r in rates):
        raise FitError("the fit is degenerate (too few distinct concurrency levels)")
    fitted = dict(zip(used, (1.0 / r for r in rates)))
    if fallback is not None:
        return [fitted.get(k, fallback[k]) for k in range(devices)]
    return [fitted[min(used, key=lambda u: (abs(u - k), u))] for k in range(devices)]


def op_error(samples, model):
    """Mean absolute relative error of op times predicted from the measured concurrency."""
    errors = []
    for op, d, levels in samples:
        slowdown = model.get(op, model[""])
        # The profiled time the op would get done in its measured time and concurrency; its
        # predicted duration at that concurrency is measured * d / done.
        done = sum(t / slowdown[k] for k, t in enumerate(levels))
        errors.append(abs(d / done - 1) if done > 0 else 0)
    return sum(errors) / len(errors)


def fit_compute(samples_by_run, devices, min_ops):
    """(slowdown, by_op) from every run's compute ops."""
    samples = [s for run in samples_by_run.values() for s in run]
    slowdown = fit([(d, levels) for _, d, levels in samples], devices)
    # Per op type where it has enough ops of its own (backward GEMMs suffer more than forward).
    by_op = {}
    for op in ("F", "B", "P1", "P2"):
        own = [(d, levels) for o, d, levels in samples if o == op]
        if len(own) >= min_ops:
            try:
                by_op[op] = fit(own, devices, fallback=slowdown)
            except FitError:
                pass
    return slowdown, by_op


def cmd_fit(args):
    runs = []
    devices = 0
    for prefix in args.runs:
        plan, events, sends = load_run(prefix)
        devices = max(devices, int(plan["meta"]["devices"]))
        runs.append((prefix, plan, events, sends))
    profile = load_profile(args.profile)
    if args.sustained and args.copy_only:
        raise FitError("--sustained fits the compute curves with it; --copy-only keeps them")
    if args.sustained and (not 0 <= args.min_factor <= args.max_factor
                           or min(args.time_constants_ms) <= 0):
        raise FitError("--min-factor and --max-factor must satisfy 0 <= min <= max, and "
                       "--time-constants-ms be > 0")
    if args.copy_only and not isinstance(profile.get("contention"), dict):
        raise FitError(f"{args.profile}: --copy-only needs a profile with 'contention'")
    samples_by_run, copies_by_run = {}, {}
    for prefix, plan, events, sends in runs:
        rows = time_at_levels(events, devices)
        samples_by_run[prefix] = [(n["op"], float(n["duration_us"]), levels)
                                  for n, levels in rows if float(n["duration_us"]) > 0]
        copies_by_run[prefix] = copy_samples(events, sends)
    names = ", ".join(os.path.basename(p) for p in args.runs)
    source = (f"fitted by tools/calibrate/fit_contention.py from {len(args.runs)} measured run(s) "
              f"({names}) on {runs[0][1]['meta'].get('gpu', '?')}")
    copy = fit_copy([s for run in copies_by_run.values() for s in run], args.min_ops)
    if args.copy_only:
        if copy is None:
            raise FitError("too few transfers, or none beside (or away from) its sender's "
                           "compute, to fit the copy factors")
        contention = profile["contention"]
        contention["source"] = contention.get("source", "") + "; copy " + source
    else:
        model_samples = samples_by_run
        sustained = None
        if args.sustained:
            # The grid by 0.05 between the bounds, the bounds themselves included.
            factors = sorted({args.min_factor, args.max_factor} | {
                round(0.05 * i, 2) for i in range(int(round(args.max_factor / 0.05)) + 1)
                if args.min_factor <= round(0.05 * i, 2) <= args.max_factor})
            factor, tau, slowdown, by_op, model_samples, _ = fit_sustained(
                [(prefix, events) for prefix, _, events, _ in runs], devices, args.min_ops,
                [ms * 1e3 for ms in args.time_constants_ms], factors)
            sustained = {"factor": factor, "time_constant_us": tau}
        else:
            slowdown, by_op = fit_compute(samples_by_run, devices, args.min_ops)
        contention = {"slowdown": [round(x, 4) for x in slowdown], "source": source}
        if by_op:
            contention["by_op"] = {op: [round(x, 4) for x in curve] for op, curve in by_op.items()}
        if sustained is not None:
            contention["sustained"] = sustained
        profile["contention"] = contention
    if copy is not None:
        contention["copy"] = {"sender_idle": round(copy[0], 4),
                              "sender_computing": round(copy[1], 4)}
    write_json_atomic(args.output, profile)
    if not args.copy_only:
        if sustained is not None:
            print(f"sustained load: x (1 + {sustained['factor']:.2f} H), H the share of devices "
                  f"computing over {sustained['time_constant_us'] / 1e3:g} ms (the curves below "
                  "are at H = 0)")
        print("slowdown by compute ops running at once (1 = alone):")
        for op, curve in [("all", slowdown)] + sorted(by_op.items()):
            print(f"  {op:<4}", " ".join(f"{k + 1}: {x:.3f}" for k, x in enumerate(curve)))
        print(f"{'run':<28} {'ops':>5} {'op error before':>16} {'after':>8}")
        flat = {"": [1.0] * devices}
        model = dict(by_op, **{"": slowdown})
        for prefix, run_samples in samples_by_run.items():
            print(f"{os.path.basename(prefix):<28} {len(run_samples):>5} "
                  f"{100 * op_error(run_samples, flat):>15.1f}% "
                  f"{100 * op_error(model_samples[prefix], model):>7.1f}%")
    if copy is None:
        print("copies: too few to fit (or none beside / away from the sender's compute); "
              "no copy factors")
    else:
        print(f"copies between stages: {copy[0]:.3f} x link time with the sender idle, "
              f"{copy[1]:.3f} x beside its compute")
        print(f"{'run':<28} {'sends':>5} {'copy error before':>18} {'after':>8}")
        for prefix, run_copies in copies_by_run.items():
            print(f"{os.path.basename(prefix):<28} {len(run_copies):>5} "
                  f"{100 * copy_error(run_copies, (1.0, 1.0)):>17.1f}% "
                  f"{100 * copy_error(run_copies, copy):>7.1f}%")
    print(f"wrote {args.output}")


def sm_partition(profile):
    """The --sm-partition its measuring command gave, or None (the whole GPU)."""
    command = profile.get("provenance", {}).get("command", "")
    match = re.search(r"--sm-partition[ =](\d+)", command)
    return int(match.group(1)) if match else None


def cmd_copy(args):
    source = load_profile(args.source)
    profile = load_profile(args.profile)
    if not isinstance(source.get("contention"), dict):
        raise FitError(f"{args.source}: no 'contention' to copy")
    for field in ("model", "seq", "attention", "gpu"):
        if source.get(field) != profile.get(field):
            raise FitError(f"{args.profile}: field '{field}' differs from {args.source}'s")
    if sm_partition(source) != sm_partition(profile):
        raise FitError(f"{args.profile}: measured at --sm-partition {sm_partition(profile)}, "
                       f"{args.source} at {sm_partition(source)}")
    contention = json.loads(json.dumps(source["contention"]))
    contention["source"] = (f"copied from {os.path.basename(args.source)} by "
                            f"tools/calibrate/fit_contention.py copy: {contention.get('source', '')}")
    profile["contention"] = contention
    write_json_atomic(args.output, profile)
    print(f"contention of {args.source} into {args.output}")


def recorded_command(path):
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("# command: "):
                    return shlex.split(line[len("# command: "):])
    except OSError as e:
        raise FitError(f"{path}: cannot read ({e.strerror})") from e
    raise FitError(f"{path}: no '# command:' line")


def diff_makespan(pipeplan, plan, trace):
    out = subprocess.run([pipeplan, "diff", plan, trace], capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise FitError(f"pipeplan diff {plan}: {out.stderr.strip()}")
    m = re.search(r"step time \(makespan\): predicted ([0-9.]+) us, measured ([0-9.]+) us",
                  out.stdout)
    if not m:
        raise FitError(f"pipeplan diff {plan}: no step time line")
    return float(m.group(1)), float(m.group(2))


def run_labels(prefixes):
    """Each run's name; where two runs share one, the first word of their folder's name too
    (call1/bpipe-mbs2, call3/bpipe-mbs2), and where that is shared as well, the folder above it
    (2026-11-27-pipelines/bpipe-mbs2, 2026-11-27b-pipelines/bpipe-mbs2)."""
    def folder(prefix, up):
        return os.path.basename(os.path.abspath(os.path.join(prefix, *[".."] * up)))

    labels = [os.path.basename(p) for p in prefixes]
    for add in (lambda p, label: f"{folder(p, 1).split('-')[0]}/{label}",
                lambda p, label: f"{folder(p, 2)}/{label}"):
        labels = [add(p, label) if labels.count(label) > 1 else label
                  for p, label in zip(prefixes, labels)]
    return labels


def load_recorded_json(path):
    """A JSON output as bench/gpu/run.sh records it: '#' header and footer lines around."""
    try:
        with open(path, encoding="utf-8") as f:
            text = "".join(line for line in f if not line.startswith("#"))
    except OSError as e:
        raise FitError(f"{path}: cannot read ({e.strerror})") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise FitError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from e


def measured_peaks(prefix):
    """Per device, the allocator's peak and the plan's predicted peak from RUN.run.json (the run
    report), or None without one."""
    path = prefix + ".run.json"
    if not os.path.exists(path):
        return None
    rows = sorted(load_recorded_json(path).get("peak_memory", []), key=lambda r: r["device"])
    if not rows:
        raise FitError(f"{path}: no 'peak_memory' rows")
    return [r["measured_bytes"] for r in rows], [r["predicted_bytes"] for r in rows]


def worst_memory_error(predicted, measured):
    """The largest relative error of the measured peaks over the predicted ones, signed, %."""
    errors = [100 * (m / p - 1) for p, m in zip(predicted, measured) if p > 0]
    return max(errors, key=abs) if errors else float("nan")


def cmd_eval(args):
    labels = run_labels(args.runs)
    width = max([28] + [len(label) for label in labels])
    print(f"{'run':<{width}} {'measured ms':>12} {'before ms':>10} {'error':>8} {'after ms':>10} "
          f"{'error':>8} {'memory before':>14} {'after':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for index, prefix in enumerate(args.runs):
            command = recorded_command(prefix + ".plan.txt")
            if "plan" not in command:
                raise FitError(f"{prefix}.plan.txt: the recorded command is not 'pipeplan plan'")
            replanned = os.path.join(tmp, f"{index}.plan.json")
            argv = [args.pipeplan] + command[1:]
            for flag, value in (("--profile", args.profile), ("-o", replanned)):
                if flag not in argv:
                    raise FitError(f"{prefix}.plan.txt: the recorded command has no {flag}")
                argv[argv.index(flag) + 1] = value
            out = subprocess.run(argv + ["--json"], capture_output=True, text=True, check=False)
            over = ""
            if out.returncode != 0 and "memory-limit" in out.stderr and "--memory" in argv:
                # The new model predicts more than the limit the run was planned for: say so,
                # and compare its prediction without the limit.
                argv[argv.index("--memory") + 1] = "0"
                out = subprocess.run(argv + ["--json"], capture_output=True, text=True,
                                     check=False)
                over = " over --memory"
            if out.returncode != 0:
                raise FitError(f"{prefix}: re-planning failed: {out.stderr.strip()}")
            old, new = load_json(prefix + ".plan.json"), load_json(replanned)
            if old["schedule"] != new["schedule"]:
                raise FitError(f"{prefix}: the re-planned schedule is not the one that ran")
            before, measured = diff_makespan(args.pipeplan, prefix + ".plan.json",
                                             prefix + ".trace.json")
            after, _ = diff_makespan(args.pipeplan, replanned, prefix + ".trace.json")
            memory = ""
            peaks = measured_peaks(prefix)
            if peaks is not None:
                allocator, recorded = peaks
                replanned_peaks = json.loads(out.stdout)["peak_memory_bytes"]
                memory = (f" {worst_memory_error(recorded, allocator):>+13.1f}%"
                          f" {worst_memory_error(replanned_peaks, allocator):>+7.1f}%")
            print(f"{labels[index]:<{width}} {measured / 1e3:>12.1f} "
                  f"{before / 1e3:>10.1f} {100 * (measured / before - 1):>+7.1f}% "
                  f"{after / 1e3:>10.1f} {100 * (measured / after - 1):>+7.1f}%{memory}{over}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fit", help="fit the slowdowns and write a profile with them")
    f.add_argument("--profile", required=True, help="the profile the runs were planned from")
    f.add_argument("-o", "--output", required=True, help="the profile to write")
    f.add_argument("--copy-only", action="store_true",
                   help="keep the profile's compute curves; fit the copy factors alone")
    f.add_argument("--min-ops", type=int, default=20,
                   help="ops of one type needed for a curve of its own, and transfers for the "
                        "copy factors (default 20)")
    f.add_argument("--sustained", action="store_true",
                   help="also fit the sustained-load model (contention.sustained): a factor in "
                        "[--min-factor, --max-factor] by 0.05 and a time constant of "
                        "--time-constants-ms")
    f.add_argument("--min-factor", type=float, default=0.0,
                   help="the smallest sustained-load factor tried (default 0)")
    f.add_argument("--max-factor", type=float, default=2.0,
                   help="the largest sustained-load factor tried (default 2)")
    f.add_argument("--time-constants-ms", type=lambda text: [float(x) for x in text.split(",")],
                   default=[10, 20, 30, 50, 70, 100, 150, 200, 300],
                   help="the time constants tried, ms, comma-separated (default "
                        "10,20,30,50,70,100,150,200,300)")
    f.add_argument("runs", nargs="+", metavar="RUN", help="RUN.plan.json + RUN.trace.json")
    e = sub.add_parser("eval", help="predicted vs measured step time, before and after")
    e.add_argument("--pipeplan", required=True, help="the pipeplan binary")
    e.add_argument("--profile", required=True, help="the profile to re-plan with")
    e.add_argument("runs", nargs="+", metavar="RUN", help="RUN.plan.{txt,json} + RUN.trace.json")
    c = sub.add_parser("copy", help="a profile with another profile's contention model")
    c.add_argument("--from", dest="source", required=True, metavar="PROFILE",
                   help="the profile whose contention to copy (a calibrated one)")
    c.add_argument("-o", "--output", required=True, help="the profile to write")
    c.add_argument("profile", help="the profile to copy it into (a new measurement)")
    args = parser.parse_args()
    try:
        {"fit": cmd_fit, "eval": cmd_eval, "copy": cmd_copy}[args.command](args)
    except ProfileError as err:
        print(f"fit_contention: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
