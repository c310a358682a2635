#!/usr/bin/env python3
"""tools/calibrate/fit_contention.py recovers a contention model that made a trace.

The simulator predicts a plan's step under a known model (a profile with "contention"); that
predicted trace stands for a measurement of the same plan made without the model. Fitting the
pair must give the model's factors back, and re-planning with the fitted profile must predict
the "measured" step. Usage: fit_contention_test.py PIPEPLAN SOURCE_DIR
"""
import json
import math
import os
import shlex
import sys
import tempfile

from script_checks import check, eval_percentages, finish, run, write_json

PIPEPLAN, SOURCE = sys.argv[1], sys.argv[2]
SCRIPT = os.path.join(SOURCE, "tools", "calibrate", "fit_contention.py")
PROFILE = os.path.join(SOURCE, "profiles", "h100-sxm-llama-7b.analytic.json")
TRUTH = [1.1, 1.2, 1.3, 1.45]
COPY = {"sender_idle": 1.3, "sender_computing": 6.0}  # transfers on the sender's SMs
with tempfile.TemporaryDirectory() as tmp:
    truth_profile = os.path.join(tmp, "truth.json")
    with open(PROFILE, encoding="utf-8") as f:
        profile = json.load(f)
    profile["contention"] = {"slowdown": TRUTH, "copy": COPY, "source": "test"}
    write_json(truth_profile, profile)

    args = ["plan", "--stages", "4", "--microbatches", "8", "--schedule", "1f1b", "--backward",
            "2bp", "--seq", "2048"]
    run_prefix = os.path.join(tmp, "run")
    plan_cmd = [PIPEPLAN] + args + ["--profile", PROFILE, "-o", run_prefix + ".plan.json"]
    out = run(plan_cmd)
    with open(run_prefix + ".plan.txt", "w", encoding="utf-8") as f:
        f.write("# command: " + shlex.join(plan_cmd) + "\n" + out.stdout)
    truth_plan = os.path.join(tmp, "truth.plan.json")
    run([PIPEPLAN] + args + ["--profile", truth_profile, "-o", truth_plan])
    run([PIPEPLAN, "show", truth_plan, "--trace", run_prefix + ".trace.json"])

    fitted = os.path.join(tmp, "fitted.json")
    out = run([sys.executable, SCRIPT, "fit", "--profile", PROFILE, "-o", fitted, run_prefix])
    print(out.stdout)
    with open(fitted, encoding="utf-8") as f:
        model = json.load(f)["contention"]
    got = model["slowdown"]
    check(len(got) == 4 and all(abs(g - t) < 2e-3 for g, t in zip(got, TRUTH)),
          f"fitted slowdown {got}, made with {TRUTH}")
    for op, curve in model.get("by_op", {}).items():
        check(all(abs(g - t) < 2e-3 for g, t in zip(curve, TRUTH)), f"by_op {op}: {curve}")
    got = model.get("copy", {})
    check(all(abs(got.get(k, 0) - v) < 2e-3 * v for k, v in COPY.items()),
          f"fitted copy factors {got}, made with {COPY}")

    # --copy-only keeps the profile's compute curves and fits the copy factors alone.
    kept = os.path.join(tmp, "kept.json")
    profile["contention"] = {"slowdown": [1.5], "source": "given"}
    write_json(kept, profile)
    copy_only = os.path.join(tmp, "copy_only.json")
    run([sys.executable, SCRIPT, "fit", "--copy-only", "--profile", kept, "-o", copy_only,
         run_prefix])
    with open(copy_only, encoding="utf-8") as f:
        model = json.load(f)["contention"]
    check(model["slowdown"] == [1.5] and model["source"].startswith("given; copy fitted"),
          f"--copy-only changed the compute curves: {model}")
    check(abs(model["copy"]["sender_computing"] - 6.0) < 0.012, f"--copy-only: {model['copy']}")
    del profile["contention"]
    write_json(kept, profile)
    out = run([sys.executable, SCRIPT, "fit", "--copy-only", "--profile", kept, "-o", copy_only,
               run_prefix], expect=1)
    check(out.stderr.count("\n") == 1 and "kept.json" in out.stderr,
          f"--copy-only without contention: {out.stderr!r}")

    before, after = eval_percentages(SCRIPT, PIPEPLAN, fitted, run_prefix, (3, 5))
    check(before > 5, f"the plain plan should under-predict the slowed trace: {before} %")
    check(abs(after) < 0.2, f"re-planned with the fit, the step should match: {after} %")

    # copy: the fitted contention into a new measurement of the same model (the profile itself
    # stands for it); a profile of another sequence length is refused naming the field.
    copied = os.path.join(tmp, "copied.json")
    run([sys.executable, SCRIPT, "copy", "--from", fitted, "-o", copied, PROFILE])
    with open(copied, encoding="utf-8") as f:
        got = json.load(f)
    with open(fitted, encoding="utf-8") as f:
        want = json.load(f)["contention"]
    check(got["contention"]["slowdown"] == want["slowdown"] and
          got["contention"].get("copy") == want.get("copy") and
          got["contention"]["source"].startswith("copied from fitted.json"),
          f"copy: {got['contention']}")
    with open(PROFILE, encoding="utf-8") as f:
        original = json.load(f)
    check(got["layers"] == original["layers"], "copy changed the ops' times")
    other = dict(original, seq=4096)
    write_json(os.path.join(tmp, "other.json"), other)
    out = run([sys.executable, SCRIPT, "copy", "--from", fitted, "-o",
               os.path.join(tmp, "none.json"), os.path.join(tmp, "other.json")], expect=1)
    check(out.stderr.count("\n") == 1 and "'seq'" in out.stderr and "other.json" in out.stderr,
          f"copy across sequence lengths: {out.stderr!r}")
    out = run([sys.executable, SCRIPT, "copy", "--from", PROFILE, "-o",
               os.path.join(tmp, "none.json"), PROFILE], expect=1)
    check(out.stderr.count("\n") == 1 and "no 'contention'" in out.stderr,
          f"copy from a profile without contention: {out.stderr!r}")

    # --sustained: a trace made under a sustained-load model (every op further slowed by
    # 1 + factor * H, H the share of stages computing averaged over a time constant) gives the
    # factor, the time constant and the curves back, and the re-planned step matches.
    sustained_truth = {"factor": 0.6, "time_constant_us": 20000.0}
    curves = [1.0, 1.05, 1.1, 1.15]
    profile["contention"] = {"slowdown": curves, "sustained": sustained_truth, "source": "test"}
    write_json(truth_profile, profile)
    run([PIPEPLAN] + args + ["--profile", truth_profile, "-o", truth_plan])
    run([PIPEPLAN, "show", truth_plan, "--trace", run_prefix + ".trace.json"])
    sustained_fit = os.path.join(tmp, "sustained.json")
    out = run([sys.executable, SCRIPT, "fit", "--sustained", "--profile", PROFILE, "-o",
               sustained_fit, run_prefix])
    print(out.stdout)
    with open(sustained_fit, encoding="utf-8") as f:
        model = json.load(f)["contention"]
    check(model.get("sustained") == sustained_truth,
          f"fitted sustained load {model.get('sustained')}, made with {sustained_truth}")
    got = model["slowdown"]
    check(all(abs(g - t) < 2e-3 for g, t in zip(got, curves)),
          f"fitted slowdown under --sustained {got}, made with {curves}")
    before, after = eval_percentages(SCRIPT, PIPEPLAN, sustained_fit, run_prefix, (3, 5))
    check(abs(after) < 0.2, f"re-planned with the sustained fit, the step should match: {after} %")
    # The term fixed (--min-factor = --max-factor, one time constant): kept as given, the curves
    # fitted under it; the true term fixed gives the true curves back.
    for factor, tau_ms in ((0.6, "20"), (1.2, "50")):
        fixed = os.path.join(tmp, "fixed.json")
        run([sys.executable, SCRIPT, "fit", "--sustained", "--min-factor", str(factor),
             "--max-factor", str(factor), "--time-constants-ms", tau_ms, "--profile", PROFILE,
             "-o", fixed, run_prefix])
        with open(fixed, encoding="utf-8") as f:
            fixed_model = json.load(f)["contention"]
        want = {"factor": factor, "time_constant_us": float(tau_ms) * 1e3}
        check(fixed_model.get("sustained") == want,
              f"fixed term {want}: fitted {fixed_model.get('sustained')}")
        if factor == 0.6:
            check(all(abs(g - t) < 2e-3 for g, t in zip(fixed_model["slowdown"], curves)),
                  f"the curves under the true term fixed {fixed_model['slowdown']}, made with "
                  f"{curves}")
    # Without it the same trace is fitted worse (the model that made it is not in reach).
    plain = os.path.join(tmp, "plain.json")
    run([sys.executable, SCRIPT, "fit", "--profile", PROFILE, "-o", plain, run_prefix])
    _, plain_after = eval_percentages(SCRIPT, PIPEPLAN, plain, run_prefix, (3, 5))
    check(abs(plain_after) > abs(after), f"count-only {plain_after} %, sustained {after} %")
    out = run([sys.executable, SCRIPT, "fit", "--sustained", "--copy-only", "--profile",
               sustained_fit, "-o", os.path.join(tmp, "none.json"), run_prefix], expect=1)
    check(out.stderr.count("\n") == 1 and "--copy-only" in out.stderr,
          f"--sustained with --copy-only: {out.stderr!r}")
    for bad in (["--max-factor", "-1"], ["--time-constants-ms", "30,0"],
                ["--min-factor", "0.5", "--max-factor", "0.4"]):
        out = run([sys.executable, SCRIPT, "fit", "--sustained", *bad, "--profile", PROFILE, "-o",
                   os.path.join(tmp, "none.json"), run_prefix], expect=1)
        check(out.stderr.count("\n") == 1 and bad[0] in out.stderr, f"{bad}: {out.stderr!r}")
    check(not os.path.exists(os.path.join(tmp, "none.json")), "a refused fit wrote its output")

    # Bad input: one line naming the file, exit 1, nothing written.
    out = run([sys.executable, SCRIPT, "fit", "--profile", PROFILE, "-o",
               os.path.join(tmp, "none.json"), os.path.join(tmp, "missing")], expect=1)
    check(out.stderr.count("\n") == 1 and "missing.plan.json" in out.stderr,
          f"error should be one line naming the file: {out.stderr!r}")
    check(not os.path.exists(os.path.join(tmp, "none.json")), "a failed fit wrote its output")

# Runs of one name from two calls are told apart by their folder's first word.
import importlib.util  # noqa: E402  (the script is loaded as a module for its helper)

spec = importlib.util.spec_from_file_location("fit_contention", SCRIPT)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
labels = module.run_labels(["r/call1-env-bpipe/bpipe-mbs2", "r/call3-env-bpipe/bpipe-mbs2",
                            "r/call3-env-bpipe/nobpipe-mbs1"])
check(labels == ["call1/bpipe-mbs2", "call3/bpipe-mbs2", "nobpipe-mbs1"], f"labels {labels}")
labels = module.run_labels(["a/s-27/call1-x/bpipe-mbs2", "a/s-27b/call1-y/bpipe-mbs2",
                            "a/s-27b/call2-y/bpipe-mbs2", "a/s-27b/call2-y/nobpipe-mbs1"])
check(labels == ["s-27/call1/bpipe-mbs2", "s-27b/call1/bpipe-mbs2", "call2/bpipe-mbs2",
                 "nobpipe-mbs1"], f"labels where the calls' names clash too {labels}")

# The load a step starts at is the load it ends at, also for a step shorter than the time
# constant: ops of 500 and 250 us on two devices, tau 1000 us.
course = module.load_course([(0.0, 500.0, "a"), (0.0, 250.0, "b")], 2, 1000.0)
segments = course[0][1]  # op a's: share 1 for 250 us, then 1/2 for 250 us
level, share, h, dt = segments[-1]
end = share + (h - share) * math.exp(-dt / 1000.0)
check(abs(end - segments[0][2]) < 1e-12, f"the step starts at {segments[0][2]}, ends at {end}")
check(0.5 < end < 1.0, f"the periodic load {end} lies between the shares")

# A trace whose compute ops all take no time has no load (it once divided by zero), nor has one
# without compute ops.
course = module.load_course([(5.0, 5.0, "a"), (5.0, 5.0, "b")], 2, 1000.0)
check(course == [("a", []), ("b", [])], f"zero-length ops: {course}")
check(module.load_course([], 2, 1000.0) == [], "no ops")

finish("fit_contention_test")
