#!/usr/bin/env python3
"""bench/gpu/summary.py on raw outputs shaped like bench/gpu/run.sh's.

The fixtures follow the writers field for field: gtest's JSON (--gtest_output=json), the one
JSON line of bench/cuda/bench_block.cpp and of bench/gpu/torch_block.py, and `pipeplan run
--json`'s report (tools/run_report.cpp, run_report_json) behind run.sh's '# ...' header
lines. The tables must carry the numbers through, compute the errors and 2bp speedups, flag
what misses 5 % (step) and 10 % (memory), and list what failed or is missing.
"""
import importlib.util
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "..", "bench", "gpu", "summary.py")


def load_summary():
    spec = importlib.util.spec_from_file_location("gpu_bench_summary", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


summary = load_summary()
HEADER = "# gpu: NVIDIA H100 80GB HBM3, 580.65, 81559 MiB\n# date: 2026-11-25T10:00:00Z\n"
FOOTER = "# exit status: 0 (12 s)\n"


def write(folder, name, text):
    with open(os.path.join(folder, name), "w") as f:
        f.write(text)


def gtest_report(suite, passed, failed, skipped):
    tests = [{"name": f"Passes{i}", "result": "COMPLETED"} for i in range(passed)]
    tests += [{"name": f"Skips{i}", "result": "SKIPPED"} for i in range(skipped)]
    tests += [{"name": f"Fails{i}", "result": "COMPLETED",
               "failures": [{"failure": f"matmul_test.cpp:77\nExpected: error < 0.005\nactual {i}",
                             "type": ""}]} for i in range(failed)]
    return json.dumps({"tests": passed + failed + skipped, "failures": failed,
                       "testsuites": [{"name": suite, "tests": len(tests), "testsuite": tests}]})


def block_line(mbs_step_ms, breakdown=None):
    results = []
    for mbs, step_ms in mbs_step_ms:
        step_flops = 2.69e12 * mbs
        results.append({"mbs": mbs, "tokens": 2048 * mbs, "forward_ms": step_ms / 3,
                        "p1_ms": step_ms / 3, "p2_ms": step_ms / 3, "step_ms": step_ms,
                        "tflops": {"step": step_flops / (step_ms * 1e-3) / 1e12},
                        "mfu": step_flops / (step_ms * 1e-3) / 989.4e12})
        if breakdown is not None:
            results[-1]["breakdown"] = breakdown
    return json.dumps({"bench": "pipeplan_block", "gpu": "NVIDIA H100 80GB HBM3",
                       "peak_bf16_tflops": 989.4,
                       "attention": "attention flash: cuDNN SDPA, cuDNN 9.19.0",
                       "results": results})


def torch_line():
    return json.dumps({"bench": "torch_block", "torch": "2.11.0", "gpu": "NVIDIA H100 80GB HBM3",
                       "peak_bf16_tflops": 989.4, "results": [
                           {"sdpa": "default", "mbs": 1, "forward_ms": 1.5, "backward_ms": 3.0,
                            "step_ms": 4.5, "tflops": {"step": 597.8}, "mfu": 0.604},
                           {"sdpa": "flash", "mbs": 1,
                            "error": "RuntimeError: No available kernel. Aborting execution."}]})


def run_report(predicted_ms, measured_ms, predicted_gib, measured_gib, steady_ms=None):
    gib = float(1 << 30)
    memory = [{"device": d, "predicted_bytes": int(p * gib), "measured_bytes": int(m * gib),
               "error_pct": 100 * (m - p) / p}
              for d, (p, m) in enumerate(zip(predicted_gib, measured_gib))]
    measured = {"makespan_us": measured_ms * 1e3}
    errors = {"makespan": 100 * (measured_ms - predicted_ms) / predicted_ms}
    if steady_ms is not None:  # run_report_json with steps 2-5
        measured["steady"] = {"makespan_us": steady_ms * 1e3, "steps": 4, "first_step": 2}
        errors["steady_makespan"] = 100 * (steady_ms - predicted_ms) / predicted_ms
    return json.dumps({
        "hardware": {"device_name": "NVIDIA H100 80GB HBM3", "emulated": True},
        "predicted": {"makespan_us": predicted_ms * 1e3},
        "measured": measured,
        "error_pct": errors,
        "peak_memory": memory, "plan": "x.plan.json", "steps": []}, indent=2)


class Summary(unittest.TestCase):
    def setUp(self):
        self.folder_handle = tempfile.TemporaryDirectory()
        self.folder = self.folder_handle.name

    def tearDown(self):
        self.folder_handle.cleanup()

    def markdown(self):
        return "\n".join(summary.tests_table(self.folder) + summary.block_table(self.folder) +
                         summary.pipeline_table(self.folder))

    def test_empty_folder_says_what_is_missing(self):
        text = self.markdown()
        self.assertIn("(no tests-*.json)", text)
        self.assertIn("(no bench_block.json or torch_block.json)", text)
        self.assertIn("(no *.run.json)", text)

    def test_gpu_tests_counted_per_suite_with_failures_listed(self):
        write(self.folder, "tests-CudaBackend.json", gtest_report("CudaBackend", 9, 0, 1))
        write(self.folder, "tests-Llama7bShapes_CudaMatmul.json",
              gtest_report("Llama7bShapes/CudaMatmul", 8, 1, 0))
        write(self.folder, "tests-EmulatedRun.json", "")  # the binary crashed: no JSON
        lines = summary.tests_table(self.folder)
        self.assertIn("| tests-CudaBackend | CudaBackend | 9 | 0 | 1 |", lines)
        self.assertIn("| tests-Llama7bShapes_CudaMatmul | Llama7bShapes/CudaMatmul | 8 | 1 | 0 |",
                      lines)
        self.assertTrue(any("tests-EmulatedRun" in l and "crash" in l for l in lines))
        self.assertIn("- Llama7bShapes/CudaMatmul.Fails0: matmul_test.cpp:77 / "
                      "Expected: error < 0.005", lines)

    def test_block_mfu_side_by_side(self):
        write(self.folder, "bench_block.json", HEADER + block_line([(1, 4.4), (2, 8.6)]) + "\n" +
              FOOTER)
        write(self.folder, "torch_block.json", HEADER + torch_line() + "\n" + FOOTER)
        text = "\n".join(summary.block_table(self.folder))
        self.assertIn("GPU NVIDIA H100 80GB HBM3, peak 989.4 TFLOP/s", text)
        # 2.69 TFLOP in 4.4 ms: 611 TFLOP/s, 61.8 % of 989.4.
        self.assertIn("| 1 | 1.47 | 1.47 | 1.47 | 2.93 | 4.40 | 611 | 61.8 % |", text)
        self.assertIn("| PyTorch eager, SDPA default | 1 | 1.50 | | | 3.00 | 4.50 | 598 | 60.4 % |",
                      text)
        self.assertIn("| PyTorch eager, SDPA flash | 1 | RuntimeError: No available kernel.", text)

    def test_block_op_breakdown_when_present(self):
        # bench_block --breakdown's fields (bench/cuda/bench_block.cpp, op_breakdown).
        breakdown = {"steps": 20, "step_ms": 4.5, "unmarked_ms": 0.45, "unmarked_share": 0.1,
                     "ops": [{"op": "F gemm 4096->11008", "calls_per_step": 2, "ms": 0.52,
                              "share_of_step": 0.1156, "tflops": 355.2},
                             {"op": "p2 gather 4096x11008", "calls_per_step": 2, "ms": 0.1,
                              "share_of_step": 0.0222}]}
        write(self.folder, "bench_block.json", block_line([(1, 4.4)], breakdown) + "\n")
        text = "\n".join(summary.block_table(self.folder))
        self.assertIn("pipeplan ops at mbs 1 (20 steps with op marks, step 4.50 ms):", text)
        self.assertIn("| F gemm 4096->11008 | 2 | 0.520 | 355 |  | 11.6 % |", text)
        self.assertIn("| p2 gather 4096x11008 | 2 | 0.100 |  |  | 2.2 % |", text)
        self.assertIn("| (not marked: norms, RoPE, SwiGLU, gaps) | | 0.450 | | | 10.0 % |", text)
        self.assertNotIn("memory roofline", text)

    def test_block_with_gemm_answers_timed(self):
        # bench_block --gemm-candidates 8: a row of its own and which shapes changed algorithm.
        line = json.loads(block_line([(1, 4.4)]))
        line["gemm_candidates"] = 8
        line["results"][0]["gemm_choices"] = [
            {"shape": "NT 4096x11008x2048", "candidates": 8, "chosen": 3,
             "answer_us": [344.0, 350.0, None, 330.5]},
            {"shape": "TN 12288x2048x4096", "candidates": 8, "chosen": 0,
             "answer_us": [289.0, 300.0]}]
        write(self.folder, "bench_block-tuned.json", json.dumps(line) + "\n")
        text = "\n".join(summary.block_table(self.folder))
        self.assertIn("| pipeplan, best of 8 GEMM answers: attention flash: cuDNN SDPA, "
                      "cuDNN 9.19.0 | 1 | 1.47 |", text)
        self.assertIn("GEMM answers timed at mbs 1: 2 shapes, 1 not on the heuristic's first; "
                      "NT 4096x11008x2048: answer 3 330.5 us vs 344.0 us", text)

    def test_block_breakdown_reads_memory_bound_ops_against_the_copy(self):
        # Later bench_block runs mark the norms, RoPE and SwiGLU with the bytes they move, and
        # time a device-to-device copy.
        breakdown = {"steps": 20, "step_ms": 4.0, "unmarked_ms": 0.04, "unmarked_share": 0.01,
                     "ops": [{"op": "F rmsnorm", "calls_per_step": 2, "ms": 0.02,
                              "share_of_step": 0.005, "gbps": 3600.0}]}
        line = json.loads(block_line([(1, 4.0)], breakdown))
        line["copy_bandwidth"] = {"bytes": 268435456, "gbps": 4000.0}
        write(self.folder, "bench_block.json", json.dumps(line) + "\n")
        text = "\n".join(summary.block_table(self.folder))
        self.assertIn("| F rmsnorm | 2 | 0.020 |  | 3600 (90 % of copy) | 0.5 % |", text)
        self.assertIn("| (not marked: launch gaps, events) | | 0.040 | | | 1.0 % |", text)
        self.assertIn("Device-to-device copy (the memory roofline): 4000 GB/s", text)

    def test_pipelines_errors_flags_and_speedups(self):
        runs = {
            # name: predicted ms, measured ms, predicted GiB, measured GiB per stage
            "1f1b-m4-fused": (100.0, 103.0, [10.0, 9.0], [10.2, 9.1]),
            "1f1b-m4-2bp": (80.0, 88.0, [11.0, 9.5], [12.5, 9.6]),
            "1f1b-m8-2bp": (160.0, 170.0, [11.0, 9.5], [11.0, 9.5]),
        }
        for name, (pred, meas, pred_gib, meas_gib) in runs.items():
            steady = 164.0 if name == "1f1b-m8-2bp" else None  # last step 170, median 164
            write(self.folder, name + ".run.json",
                  HEADER + run_report(pred, meas, pred_gib, meas_gib, steady) + "\n" + FOOTER)
            write(self.folder, name + ".plan.json", json.dumps({"meta": {"devices": 2}}))
        write(self.folder, "gpipe-m4-2bp.run.json", HEADER + "pipeplan: error: out of memory\n" +
              "# exit status: 1 (3 s)\n")
        # pipeplan diff's devices table: the largest measured stall becomes a column.
        write(self.folder, "1f1b-m4-2bp.diff.txt", HEADER + "\n".join([
            "devices (compute stream)",
            "  dev    pred busy    meas busy     error    pred span    meas span     error"
            "   pred stall   meas stall",
            "    0     100.0     110.0    +10.0%     200.0    220.0    +10.0%     0.0     1500.0",
            "    1     100.0     110.0    +10.0%     200.0    220.0    +10.0%     0.0     4250.0",
            "  (stall: compute waited with every input ready; the simulator never waits)",
            "  of the measured stall, the host queued late: 1500.0 250.0 us",
            "step time (makespan): predicted 200.0 us, measured 220.0 us, error +10.0%"]) + "\n")
        text = "\n".join(summary.pipeline_table(self.folder))
        self.assertIn("| 1f1b-m4-fused | 100.0 | 103.0 | last | +3.0 % | 10.20 (10.00), "
                      "9.10 (9.00) | 2.0 % |  |  |", text)
        # +10 % step and +13.6 % memory on stage 0: both flagged; the worst device's stall (1)
        # with the host's part of it.
        self.assertIn("| 1f1b-m4-2bp | 80.0 | 88.0 | last | +10.0 % |", text)
        self.assertIn("| 13.6 % | 4.2 (host 0.2) | step > 5 %, memory > 10 % |", text)
        self.assertIn("| gpipe-m4-2bp | | | | | run failed or missing", text)
        # The steady median where the report has it: 164 vs 160, within 5 %.
        self.assertIn("| 1f1b-m8-2bp | 160.0 | 164.0 | 2-5 | +2.5 % |", text)
        # 2bp speedup: predicted 100/80, measured 103/88.
        self.assertIn("| 1f1b-m4 | 1.250x | 1.170x |", text)

    def test_overlapped_pairs_from_the_diff(self):
        write(self.folder, "pairs-dualpipev-m8-2bp.diff.txt", HEADER + "\n".join([
            "overlapped pairs: 44, median time predicted 30100.0 us, measured 33250.5 us; overlap "
            "efficiency planned 0.50, measured 0.31 (from 40 pairs beside their ops alone)",
            "step time (makespan): predicted 200.0 us, measured 220.0 us, error +10.0%"]) + "\n")
        write(self.folder, "pairs-dualpipe-m8-2bp.diff.txt", HEADER +
              "overlapped pairs: 8, median time predicted 1000.0 us, measured 2000.0 us; overlap "
              "efficiency planned 0.00, measured unknown (no pair's ops also ran alone)\n")
        write(self.folder, "1f1b-m4-2bp.diff.txt", HEADER + "step time (makespan): predicted "
              "200.0 us, measured 220.0 us, error +10.0%\n")
        text = "\n".join(summary.pairs_table(self.folder))
        self.assertIn("| pairs-dualpipev-m8-2bp | 44 | 30.10 | 33.25 | 0.50 | 0.31 (40 pairs) |",
                      text)
        self.assertIn("| pairs-dualpipe-m8-2bp | 8 | 1.00 | 2.00 | 0.00 | unknown |", text)
        self.assertNotIn("1f1b-m4-2bp", text)

    def test_no_pairs_no_section(self):
        self.assertEqual(summary.pairs_table(self.folder), [])

    def test_nccl_losses_side_by_side(self):
        def report(losses):
            return HEADER + json.dumps({"steps": [{"step": i + 1, "loss": loss}
                                                  for i, loss in enumerate(losses)]}) + "\n" + FOOTER
        write(self.folder, "nccl-1f1b-m8-2bp.local.json", report([5.25, 5.125]))
        write(self.folder, "nccl-1f1b-m8-2bp.nccl.json", report([5.25, 5.125]))
        write(self.folder, "nccl-1f1b-m8-2bp.torchrun.json", report([5.25, 5.1255]))
        write(self.folder, "nccl-gpipe-m8-fused.local.json", report([5.5]))
        write(self.folder, "nccl-gpipe-m8-fused.nccl.json", HEADER + "error\n")
        paths = sorted(os.path.join(self.folder, f) for f in os.listdir(self.folder))
        lines, same = summary.losses_table(paths)
        text = "\n".join(lines)
        self.assertFalse(same)
        self.assertIn("| nccl-1f1b-m8-2bp | 5.250000 5.125000 | same | **differs** (up to 0.0005) |",
                      text)
        self.assertIn("| nccl-gpipe-m8-fused | 5.500000 | missing | not run |", text)
        os.remove(os.path.join(self.folder, "nccl-gpipe-m8-fused.nccl.json"))
        os.remove(os.path.join(self.folder, "nccl-1f1b-m8-2bp.torchrun.json"))
        paths = sorted(os.path.join(self.folder, f) for f in os.listdir(self.folder))
        self.assertTrue(summary.losses_table(paths)[1])

    def test_no_nccl_runs_no_section(self):
        self.assertEqual(summary.losses_table([]), ([], False))

    def test_copy_waits_side_by_side(self):
        for mode, measured in (("blocking", 620.0), ("stream", 600.0), ("poll", 615.0)):
            name = f"waits-{mode}-1f1b-m12-2bp"
            write(self.folder, name + ".run.json",
                  HEADER + run_report(598.0, measured, [20.0], [20.5]) + "\n" + FOOTER)
            write(self.folder, name + ".plan.json", json.dumps({"meta": {"devices": 1}}))
        text = "\n".join(summary.pipeline_table(self.folder))
        self.assertIn("| plan | copy wait | measured ms | blocking's over this |", text)
        self.assertIn("| 1f1b-m12-2bp | blocking | 620.0 | 1.000x |  |", text)
        self.assertIn("| 1f1b-m12-2bp | stream | 600.0 | 1.033x |  |", text)
        self.assertIn("| 1f1b-m12-2bp | poll | 615.0 | 1.008x |  |", text)
        # No other run gets a row.
        self.assertEqual(text.count("| 1f1b-m12-2bp |"), 3)

    def test_the_worst_stage_shows_the_plans_tensors_where_the_report_has_them(self):
        report = json.loads(run_report(100.0, 101.0, [8.0, 6.0], [9.2, 6.1]))
        for stage, account in zip(report["peak_memory"], (7.5, 5.5)):
            stage["accounted_bytes"] = int(account * (1 << 30))
        write(self.folder, "bpipe-mbs2.run.json", HEADER + json.dumps(report) + "\n" + FOOTER)
        write(self.folder, "bpipe-mbs2.plan.json", json.dumps({"meta": {"devices": 2}}))
        text = "\n".join(summary.pipeline_table(self.folder))
        self.assertIn("| 15.0 % (stage 0: plan's tensors 7.50) |  | memory > 10 % |", text)

    def test_clocks_under_load_with_the_reasons_the_driver_named(self):
        # nvidia-smi --query-gpu=... --format=csv,nounits -lms 20, as run.sh samples it: the
        # idle sample is left out, N/A power is skipped, reasons are decoded from the hex mask.
        write(self.folder, "1f1b-m12-2bp.clocks.csv",
              "timestamp, utilization.gpu [%], clocks.current.sm [MHz], "
              "clocks.current.memory [MHz], power.draw.instant [W], temperature.gpu, "
              "clocks_event_reasons.active\n"
              "2026/11/27 09:00:00.000, 0, 1980, 3201, 120.5, 40, 0x0000000000000001\n"
              "2026/11/27 09:00:00.020, 100, 1755, 3201, 699.1, 55, 0x0000000000000004\n"
              "2026/11/27 09:00:00.040, 100, 1710, 3201, 701.3, 56, 0x0000000000000024\n"
              "2026/11/27 09:00:00.060, 95, 1980, 3201, [N/A], 57, 0x0000000000000000\n")
        # An older driver's columns, nothing under load: the row says so.
        write(self.folder, "profile-sm.clocks.csv",
              "timestamp, utilization.gpu, clocks.sm, power.draw\n"
              "2026/11/27 09:00:00.000, 10, 1980, 90.0\n")
        text = "\n".join(summary.clocks_table(self.folder))
        self.assertIn("| 1f1b-m12-2bp | 4 (3) | 1755 (1710) | 700 (701) | 57 "
                      "| SW power cap 67 %, SW thermal 33 % |", text)
        self.assertIn("| profile-sm | 1 (0) |", text)

    def test_the_clock_beside_the_sustained_load_model(self):
        # Two stages, ops at [0, 100] and [50, 150] us (a send between them does not count):
        # share computing 1/2, 1, 1/2 over thirds, mean 2/3; factor 0.5: (1 + 0.5 * 2/3) / (1 +
        # 0.5 / 2) = 1.067x. The profile's loaded clock 1920 MHz over the run's 1600: 1.200x.
        plan = {"meta": {"devices": 2, "contention": {"sustained": {
                    "factor": 0.5, "time_constant_us": 30000}}},
                "nodes": [{"id": 0, "kind": "compute"}, {"id": 1, "kind": "compute"},
                          {"id": 2, "kind": "send"}]}
        trace = {"traceEvents": [
            {"ph": "X", "ts": 0, "dur": 100, "args": {"node": 0}},
            {"ph": "X", "ts": 50, "dur": 100, "args": {"node": 1}},
            {"ph": "X", "ts": 100, "dur": 20, "args": {"node": 2}},
            {"ph": "M", "args": {"name": "stage 0"}}]}
        header = "timestamp, utilization.gpu [%], clocks.current.sm [MHz]\n"
        for name, clock in (("1f1b-m4-2bp", 1600), ("auto-m4", 1500)):
            write(self.folder, f"{name}.plan.json", json.dumps(plan))
            write(self.folder, f"{name}.trace.json", json.dumps(trace))
            write(self.folder, f"{name}.clocks.csv",
                  header + f"t, 100, {clock}\nt, 100, {clock}\nt, 0, 1980\n")
            plan["meta"].pop("contention", None)  # auto-m4: a plan without the model
        write(self.folder, "profile-sm.clocks.csv", header + "t, 100, 1920\n")
        self.assertAlmostEqual(summary.mean_share_computing(plan, trace), 2 / 3)
        text = "\n".join(summary.clock_model_table(self.folder))
        self.assertIn("| 1f1b-m4-2bp | 0.67 | 1.067x | 1.200x |", text)
        self.assertIn("| auto-m4 | 0.67 |  | 1.280x |", text)
        self.assertNotIn("| profile-sm |", text)  # no trace: not a run
        # Without the profile's samples the clock column stays empty.
        os.remove(os.path.join(self.folder, "profile-sm.clocks.csv"))
        self.assertIn("| 1f1b-m4-2bp | 0.67 | 1.067x |  |",
                      "\n".join(summary.clock_model_table(self.folder)))

    def test_whole_steps_with_the_optimizer(self):
        report = json.loads(run_report(500.0, 510.0, [120.0], [121.0]))
        report["predicted"]["step_time_us"] = 560e3
        report["measured"]["step_time_us"] = 580e3
        report["error_pct"]["step_time"] = 100 * (580 - 560) / 560
        write(self.folder, "step-m4-fused.run.json", HEADER + json.dumps(report) + "\n" + FOOTER)
        exact = json.loads(run_report(500.0, 500.0, [120.0], [120.0]))
        exact["predicted"]["step_time_us"] = 560e3
        exact["measured"]["step_time_us"] = 565.6e3
        exact["error_pct"]["step_time"] = 1.0
        write(self.folder, "step-m4-2bp.run.json", HEADER + json.dumps(exact) + "\n" + FOOTER)
        # A plan without optimizer nodes: no row.
        write(self.folder, "1f1b-m4-fused.run.json",
              HEADER + run_report(100.0, 103.0, [10.0], [10.2]) + "\n" + FOOTER)
        text = "\n".join(summary.step_table(self.folder))
        self.assertIn("| step-m4-fused | 560.0 | 580.0 | +3.6 % | step > 3 % |", text)
        self.assertIn("| step-m4-2bp | 560.0 | 565.6 | +1.0 % |  |", text)
        self.assertNotIn("1f1b-m4-fused", text)

    def test_profiles_under_load(self):
        load = {"devices": 1, "seconds": 20.04,
                "ops": {"F": {"burst_us": 6000.0, "steady_us": 6900.0, "count": 600},
                        "P1": {"burst_us": 12000.0, "steady_us": 13800.0, "count": 600}},
                "model": {"factor": 0.152, "time_constant_us": 2.1e6},
                "error_pct": {"constant": 5.31, "model": 0.42},
                "clock": {"start_mhz": 1980.0, "steady_mhz": 1695.0, "power_capped": 0.93,
                          "steady_power_w": 689.6, "samples": 1000},
                "source": "measured at profile time"}
        write(self.folder, "h200-llama-7b.measured.json", json.dumps({"sustained_load": load}))
        write(self.folder, "h100-llama-7b.measured.json", json.dumps({"layers": {}}))
        text = "\n".join(summary.load_table(self.folder))
        self.assertIn("| h200-llama-7b.measured.json | 1 | 20.0 | 0.152 | 2100 | 5.31 → 0.42 % "
                      "| F 6.00 → 6.90, P1 12.00 → 13.80 | 1980 → 1695 MHz, 93 % capped, 690 W |",
                      text)
        self.assertNotIn("h100", text)
        with tempfile.TemporaryDirectory() as empty:
            self.assertEqual(summary.load_table(empty), [])

    def test_no_clock_samples_no_section(self):
        self.assertEqual(summary.clocks_table(self.folder), [])
        self.assertEqual(summary.clock_model_table(self.folder), [])

    def test_main_prints_every_section(self):
        from io import StringIO
        saved = sys.stdout
        sys.stdout = StringIO()
        try:
            status = summary.main([self.folder])
            text = sys.stdout.getvalue()
        finally:
            sys.stdout = saved
        self.assertEqual(status, 0)
        for title in ("## GPU tests", "## Block MFU", "## Emulated pipelines"):
            self.assertIn(title, text)


if __name__ == "__main__":
    unittest.main()
