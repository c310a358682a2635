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
        write(self.folder, "nccl-1f1b-m8-2bp.local.json", report([5.25, 5.125, 5.0]))
        write(self.folder, "nccl-1f1b-m8-2bp.nccl.json", report([5.25, 5.125, 5.0]))
        # 5.14 against 5.125 at step 2: 2.9e-3 relative, beyond 1e-3.
        write(self.folder, "nccl-1f1b-m8-2bp.torchrun.json", report([5.25, 5.14, 5.0]))
        write(self.folder, "nccl-gpipe-m8-fused.local.json", report([5.5]))
        write(self.folder, "nccl-gpipe-m8-fused.nccl.json", HEADER + "error\n")
        paths = sorted(os.path.join(self.folder, f) for f in os.listdir(self.folder))
        lines, same = summary.losses_table(paths)
        text = "\n".join(lines)
        self.assertFalse(same)
        self.assertIn("| nccl-1f1b-m8-2bp | 5.250000 5.125000 5.000000 | same | **differs** (up to "
                      "0.00292 relative after step 1, beyond 0.001) |", text)
        # A way not given (here torchrun of the GPipe plan) is a failure, not an agreement.
        self.assertIn("| nccl-gpipe-m8-fused | 5.500000 | missing | **not run** |", text)
        self.assertIn("**Not every way ran and agreed** (a way missing or not run counts); the "
                      "largest relative difference after step 1: 0.0029.", text)
        # Every way the same: agreed, bit for bit.
        write(self.folder, "nccl-1f1b-m8-2bp.torchrun.json", report([5.25, 5.125, 5.0]))
        os.remove(os.path.join(self.folder, "nccl-gpipe-m8-fused.local.json"))
        os.remove(os.path.join(self.folder, "nccl-gpipe-m8-fused.nccl.json"))
        paths = sorted(os.path.join(self.folder, f) for f in os.listdir(self.folder))
        lines, same = summary.losses_table(paths)
        self.assertTrue(same)
        self.assertIn("All three ways agree; the largest relative difference after step 1: 0 (bit "
                      "for bit).", lines)
        # Later steps apart in their last bits (flash attention's dQ, atomicAdd gradients): within
        # a relative 1e-3 they agree, and the largest difference is said.
        write(self.folder, "nccl-1f1b-m8-2bp.nccl.json", report([5.25, 5.1250001, 5.0000002]))
        write(self.folder, "nccl-1f1b-m8-2bp.torchrun.json", report([5.25, 5.1255, 5.0]))
        lines, same = summary.losses_table(paths)
        text = "\n".join(lines)
        self.assertTrue(same, text)
        self.assertIn("| nccl-1f1b-m8-2bp | 5.250000 5.125000 5.000000 | step 1 same, then up to "
                      "4e-08 relative (within 0.001) | step 1 same, then up to 9.8e-05 relative "
                      "(within 0.001) |", text)
        self.assertIn("All three ways agree; the largest relative difference after step 1: "
                      "9.8e-05.", lines)
        self.assertEqual(self.main(["--losses"] + paths)[0], 0)
        # Step 1 is the same weights and inputs: any difference there fails, however small.
        write(self.folder, "nccl-1f1b-m8-2bp.nccl.json", report([5.2500001, 5.125, 5.0]))
        lines, same = summary.losses_table(paths)
        self.assertFalse(same)
        self.assertIn("| nccl-1f1b-m8-2bp | 5.250000 5.125000 5.000000 | **differs** at step 1 "
                      "(1.9e-08 relative; step 1 must be bit for bit) |", "\n".join(lines))
        write(self.folder, "nccl-1f1b-m8-2bp.nccl.json", report([5.25, 5.125, 5.0]))
        # A NaN loss agrees with nothing.
        write(self.folder, "nccl-1f1b-m8-2bp.torchrun.json",
              HEADER + '{"steps": [{"loss": 5.25}, {"loss": NaN}, {"loss": 5.0}]}\n')
        self.assertFalse(summary.losses_table(paths)[1])
        # No torchrun (run.sh records the run as not run): a failure, with the reason.
        write(self.folder, "nccl-1f1b-m8-2bp.torchrun.json", HEADER +
              "# not run: no torchrun and no python3 -m torch.distributed.run here\n")
        lines, same = summary.losses_table(paths)
        self.assertFalse(same)
        self.assertIn("| nccl-1f1b-m8-2bp | 5.250000 5.125000 5.000000 | same | **not run** (no "
                      "torchrun and no python3 -m torch.distributed.run here) |", lines)
        # The same from the command line: exit 1.
        self.assertEqual(self.main(["--losses"] + paths)[0], 1)

    def test_a_null_loss_differs_without_ending_the_summary(self):
        # pipeplan's JSON writes a NaN loss as null: in the device-local run it is the reference.
        write(self.folder, "nccl-1f1b-m8-2bp.local.json",
              HEADER + '{"steps": [{"loss": 5.25}, {"loss": null}]}\n' + FOOTER)
        for kind in ("nccl", "torchrun"):
            write(self.folder, f"nccl-1f1b-m8-2bp.{kind}.json",
                  HEADER + '{"steps": [{"loss": 5.25}, {"loss": 5.125}]}\n' + FOOTER)
        lines, same = summary.losses_table(summary.nccl_run_paths(self.folder))
        self.assertFalse(same)
        self.assertIn("| nccl-1f1b-m8-2bp | 5.250000 nan | **differs** (up to inf relative after "
                      "step 1, beyond 0.001) | **differs** (up to inf relative after step 1, "
                      "beyond 0.001) |", lines)
        status, text = self.main([self.folder])
        self.assertEqual(status, 0)
        self.assertIn("## NCCL on one GPU", text)

    def test_a_suite_without_its_json_is_listed_with_its_exit_status(self):
        write(self.folder, "tests-CudaBackend.json", gtest_report("CudaBackend", 9, 0, 1))
        write(self.folder, "tests-CudaBackend.txt", "[ RUN ] ...\n# exit status: 0\n")
        write(self.folder, "tests-EmulatedRun.txt", "[ RUN ] ...\n# exit status: 139\n")
        lines = summary.tests_table(self.folder)
        self.assertIn("| tests-EmulatedRun | **no JSON** (exit status 139; see "
                      "tests-EmulatedRun.txt) | | | |", lines)
        self.assertFalse(any("tests-CudaBackend |" in l and "no JSON" in l for l in lines))

    def test_a_table_that_fails_leaves_the_others(self):
        original = summary.block_table

        def broken(_results):
            raise KeyError("x")

        summary.block_table = broken
        try:
            status, text = self.main([self.folder])
        finally:
            summary.block_table = original
        self.assertEqual(status, 0)
        self.assertIn("## broken: the table failed (KeyError: 'x')", text)
        self.assertIn("## Emulated pipelines", text)

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

    def main(self, argv):
        from io import StringIO
        saved = sys.stdout
        sys.stdout = StringIO()
        try:
            status = summary.main(argv)
            return status, sys.stdout.getvalue()
        finally:
            sys.stdout = saved

    @staticmethod
    def whole_step(predicted_ms, step_ms, predicted_gib, measured_gib, emulated=False):
        """A report of a plan with optimizer nodes: its per-step rows' step times step_ms."""
        report = json.loads(run_report(500.0, 500.0, predicted_gib, measured_gib))
        report["hardware"]["emulated"] = emulated
        report["predicted"]["step_time_us"] = predicted_ms * 1e3
        report["measured"]["step_time_us"] = step_ms[-1] * 1e3
        report["error_pct"]["step_time"] = 100 * (step_ms[-1] - predicted_ms) / predicted_ms
        report["steps"] = [{"step": i + 1, "loss": 5.0, "step_time_us": ms * 1e3,
                            "makespan_us": 500e3} for i, ms in enumerate(step_ms)]
        return HEADER + json.dumps(report) + "\n" + FOOTER

    def test_whole_steps_with_the_optimizer(self):
        # Whole GPU, six steps: the first (warm-up) is left out, the median of 2-6 is 580 (the
        # last step alone, 562, would pass): +3.6 %, beyond 3 %.
        write(self.folder, "step-m4-fused.run.json",
              self.whole_step(560.0, [900.0, 579.0, 580.0, 590.0, 581.0, 562.0], [120.0], [121.0]))
        # Within 3 % on the step (median 565.6), but 3.5 % over on device 0's memory.
        write(self.folder, "step-m4-2bp.run.json",
              self.whole_step(560.0, [800.0, 565.6, 565.6, 570.0, 500.0, 565.6], [100.0], [103.5]))
        # One step only: the last.
        write(self.folder, "step-m4-one.run.json",
              self.whole_step(560.0, [565.6], [100.0], [101.0]))
        # Emulated stages with optimizer nodes: their own table, bounded by 5 % (+4 % passes).
        write(self.folder, "1f1b-m4-2bp.run.json",
              self.whole_step(100.0, [130.0, 104.0, 104.0], [10.0, 9.0], [10.1, 9.0], True))
        write(self.folder, "1f1b-m8-2bp.run.json",
              self.whole_step(100.0, [130.0, 106.0, 106.0], [10.0, 9.0], [10.1, 9.0], True))
        # A plan without optimizer nodes: no row.
        write(self.folder, "1f1b-m4-fused.run.json",
              HEADER + run_report(100.0, 103.0, [10.0], [10.2]) + "\n" + FOOTER)
        text = "\n".join(summary.step_table(self.folder))
        whole, emulated = text.split("## Whole steps, emulated stages")
        self.assertIn("## Whole steps on a whole GPU", whole)
        self.assertIn("| step-m4-fused | 2-6 | 560.0 | 580.0 | +3.6 % | 121.00 (120.00) | 0.8 % "
                      "| step > 3 % |", whole)
        self.assertIn("| step-m4-2bp | 2-6 | 560.0 | 565.6 | +1.0 % | 103.50 (100.00) | 3.5 % "
                      "| memory > 3 % |", whole)
        self.assertIn("| step-m4-one | last | 560.0 | 565.6 | +1.0 % | 101.00 (100.00) | 1.0 % "
                      "|  |", whole)
        self.assertNotIn("1f1b-m4-2bp", whole)
        self.assertIn("| 1f1b-m4-2bp | 2-3 | 100.0 | 104.0 | +4.0 % |  |", emulated)
        self.assertIn("| 1f1b-m8-2bp | 2-3 | 100.0 | 106.0 | +6.0 % | step > 5 % |", emulated)
        self.assertNotIn("step-m4", emulated)
        self.assertNotIn("1f1b-m4-fused", text)

    def test_whole_gpu_steps_stay_out_of_the_emulated_pipelines(self):
        # run.sh's step: one stage on the whole GPU, fused and 2bp, planned from the whole-GPU
        # profile; its own table, not the pipelines' (no "step-m4" 2bp speedup there).
        write(self.folder, "step-m4-fused.run.json",
              self.whole_step(560.0, [900.0, 580.0, 580.0], [120.0], [121.0]))
        write(self.folder, "step-m4-2bp.run.json", HEADER + "pipeplan: error: out of memory\n" +
              "# exit status: 1 (3 s)\n")
        for name in ("step-m4-fused", "step-m4-2bp"):
            write(self.folder, name + ".plan.json", json.dumps({"meta": {"devices": 1}}))
        # A run of one device named otherwise but reported as not emulated: the same.
        write(self.folder, "whole-m4-fused.run.json",
              self.whole_step(560.0, [900.0, 580.0, 580.0], [120.0], [121.0]))
        write(self.folder, "whole-m4-fused.plan.json", json.dumps({"meta": {"devices": 1}}))
        write(self.folder, "1f1b-m4-fused.run.json",
              HEADER + run_report(100.0, 103.0, [10.0], [10.2]) + "\n" + FOOTER)
        write(self.folder, "1f1b-m4-fused.plan.json", json.dumps({"meta": {"devices": 2}}))
        pipelines = "\n".join(summary.pipeline_table(self.folder))
        self.assertIn("| 1f1b-m4-fused | 100.0 | 103.0 |", pipelines)
        self.assertNotIn("step-m4", pipelines)
        self.assertNotIn("whole-m4", pipelines)
        self.assertNotIn("2bp speedup", pipelines)
        steps = "\n".join(summary.step_table(self.folder))
        self.assertIn("| step-m4-fused | 2-3 | 560.0 | 580.0 | +3.6 % |", steps)
        self.assertIn("| whole-m4-fused | 2-3 | 560.0 | 580.0 | +3.6 % |", steps)
        # The failed one is listed where its table is, not hidden.
        self.assertIn("| step-m4-2bp | | | | | run failed or missing (see its .run.json and .run.err) | | |",
                      steps)

    def test_predicted_then_calibrated(self):
        # The runs' steady medians: 1F1B-2bp 206.0 (uncalibrated 200.0: +3.0 %), ZB-V 189.0
        # (uncalibrated 175.0: +8.0 %).
        write(self.folder, "predict-1f1b-m8-2bp.run.json",
              HEADER + run_report(200.0, 212.0, [10.0], [10.0], steady_ms=206.0) + "\n" + FOOTER)
        write(self.folder, "predict-zbv-m8.run.json",
              HEADER + run_report(175.0, 190.0, [10.0], [10.0], steady_ms=189.0) + "\n" + FOOTER)
        write(self.folder, "fit-gpipe-m4-fused.run.json",
              HEADER + run_report(100.0, 101.0, [10.0], [10.0]) + "\n" + FOOTER)
        write(self.folder, "fit-gpipe-m4-fused.trace.json", '{"traceEvents": []}')
        # A fit run that failed (no trace) was not given to `calibrate fit`: not named.
        write(self.folder, "fit-zb-h1-m4-2bp.run.json", HEADER + "pipeplan: error: no\n")
        # `pipeplan calibrate eval` as it prints (tools/cmd_calibrate.cpp), one command per run
        # (run.sh's predict-calibrate-eval-<run>.txt): its own measured column is the traced last
        # step; the table takes only "after ms" from it.
        columns = ("run                           measured ms  before ms    error   after ms    "
                   "error memory before    after")
        rows = {"1f1b-m8-2bp": "predict-1f1b-m8-2bp               212.000    200.000    +6.0%    "
                               "203.000    +4.4%         +0.5%    +0.4%",
                "zbv-m8": "predict-zbv-m8                    190.000    175.000    +8.6%    "
                          "186.000    +2.2%             -        - (re-simulated)"}
        for run, row in rows.items():
            write(self.folder, f"predict-calibrate-eval-{run}.txt",
                  HEADER + columns + "\n" + row + "\n" + FOOTER)
        text = "\n".join(summary.predict_table(self.folder))
        self.assertIn("from fit-gpipe-m4-fused.", text)
        self.assertNotIn("fit-zb-h1", text)
        # 206.0 against 203.0: +1.5 %, within 2 %.
        self.assertIn("| predict-1f1b-m8-2bp | 2-5 | 206.0 | 200.0 | +3.0 % | 203.0 | +1.5 % |  |",
                      text)
        # 189.0 against 186.0: +1.6 % calibrated; uncalibrated +8.0 % flagged.
        self.assertIn("| predict-zbv-m8 | 2-5 | 189.0 | 175.0 | +8.0 % | 186.0 | +1.6 % "
                      "| uncalibrated > 5 % |", text)
        # Calibrated beyond 2 %; and without its eval (the run left no trace), a run says it was
        # not calibrated while the other keeps its row.
        write(self.folder, "predict-calibrate-eval-1f1b-m8-2bp.txt",
              "predict-1f1b-m8-2bp  212.000  200.000  +6.0%  200.500  +5.7%  -  -\n")
        os.remove(os.path.join(self.folder, "predict-calibrate-eval-zbv-m8.txt"))
        text = "\n".join(summary.predict_table(self.folder))
        self.assertIn("| predict-1f1b-m8-2bp | 2-5 | 206.0 | 200.0 | +3.0 % | 200.5 | +2.7 % "
                      "| calibrated > 2 % |", text)
        self.assertIn("| predict-zbv-m8 | 2-5 | 189.0 | 175.0 | +8.0 % | | | uncalibrated > 5 %, "
                      "not calibrated", text)
        # One eval of both runs (results written before one command per run) reads alike.
        os.remove(os.path.join(self.folder, "predict-calibrate-eval-1f1b-m8-2bp.txt"))
        write(self.folder, "predict-calibrate-eval.txt",
              HEADER + "\n".join([columns] + list(rows.values())) + "\n" + FOOTER)
        text = "\n".join(summary.predict_table(self.folder))
        self.assertIn("| predict-1f1b-m8-2bp | 2-5 | 206.0 | 200.0 | +3.0 % | 203.0 | +1.5 % |  |",
                      text)
        self.assertIn("| predict-zbv-m8 | 2-5 | 189.0 | 175.0 | +8.0 % | 186.0 | +1.6 % "
                      "| uncalibrated > 5 % |", text)
        with tempfile.TemporaryDirectory() as empty:
            self.assertEqual(summary.predict_table(empty), [])

    def test_bpipe_verdict_from_the_whole_gpu_profile(self):
        def config(mbs, m, bpipe, step_ms, mfu, peak_gib):
            return {"mbs": mbs, "microbatches": m, "schedule": "1f1b", "backward": "2bp",
                    "bpipe": bpipe, "step_time_ms": step_ms, "mfu": mfu, "stage_mfu": mfu,
                    "stage_time_ms": 1.0, "peak_memory_bytes": int(peak_gib * (1 << 30))}
        estimate = {"stages": 4, "tensor_parallel": 1, "global_batch": 32,
                    "memory_limit_bytes": int(130 * (1 << 30)),
                    "without": config(2, 16, False, 3100.0, 0.52, 70.5),
                    "with": config(4, 8, True, 3200.0, 0.55, 110.25), "gain": -0.031,
                    "verdict": "no benefit: mbs 2 -> 4 raises stage MFU 52.0 -> 55.0 %: -3.1 %",
                    "second_opinion": "per-stage estimate (m + P - 1)·t_stage: -2.9 %"}
        write(self.folder, "bpipe-estimate.json", HEADER + json.dumps(estimate, indent=2) + "\n" +
              FOOTER)
        text = "\n".join(summary.bpipe_estimate_table(self.folder))
        self.assertIn("4 stages, global batch 32, 130.00 GiB per GPU.", text)
        self.assertIn("| without BPipe | 2 | 16 | 2bp | off | 3100.0 | 52.0 % | 70.50 |", text)
        self.assertIn("| with BPipe | 4 | 8 | 2bp | on | 3200.0 | 55.0 % | 110.25 |", text)
        self.assertIn("Verdict: no benefit: mbs 2 -> 4", text)
        estimate["with"] = None
        write(self.folder, "bpipe-estimate.json", json.dumps(estimate))
        self.assertIn("| with BPipe | none needs it |",
                      "\n".join(summary.bpipe_estimate_table(self.folder)))
        write(self.folder, "bpipe-estimate.json", HEADER + "pipeplan: error: bad profile\n")
        self.assertIn("(no estimate: see bpipe-estimate.txt",
                      "\n".join(summary.bpipe_estimate_table(self.folder)))

    def test_nccl_step_times_and_transfers_of_each_way(self):
        name = "nccl-1f1b-m8-2bp"
        write(self.folder, name + ".plan.txt", HEADER)
        write(self.folder, name + ".local.json",
              HEADER + run_report(400.0, 410.0, [10.0], [10.0], steady_ms=404.0) + "\n")
        write(self.folder, name + ".nccl.json",
              HEADER + run_report(400.0, 420.0, [10.0], [10.0], steady_ms=412.0) + "\n")
        write(self.folder, name + ".torchrun.json",
              HEADER + "# not run: no torchrun and no python3 -m torch.distributed.run here\n")

        def diff(send_ms, recv_ms):
            # `pipeplan diff --json --all`'s ops: one send 0->1 and its recv, a send 1->0, and a
            # compute op (not a transfer).
            ops = [{"node": 1, "label": "send 0F0→1", "device": 0, "stream": "send>1",
                    "predicted_us": 100.0, "measured_us": send_ms * 1e3},
                   {"node": 2, "label": "send 0F1→1", "device": 0, "stream": "send>1",
                    "predicted_us": 100.0, "measured_us": send_ms * 1e3},
                   {"node": 3, "label": "recv 0F0←0", "device": 1, "stream": "recv<0",
                    "predicted_us": 150.0, "measured_us": recv_ms * 1e3},
                   {"node": 4, "label": "send 1B0→0", "device": 1, "stream": "send>0",
                    "predicted_us": 50.0, "measured_us": 70.0},
                   {"node": 5, "label": "F0", "device": 0, "stream": "compute",
                    "predicted_us": 9000.0, "measured_us": 9100.0}]
            return json.dumps({"overall": {}, "devices": [], "ops": ops, "stalls": []})

        write(self.folder, name + ".local.diff.json", HEADER + diff(0.05, 0.2) + "\n")
        write(self.folder, name + ".nccl.diff.json", HEADER + diff(0.25, 0.4) + "\n")
        paths = summary.nccl_run_paths(self.folder)
        self.assertEqual(len(paths), 3)
        text = "\n".join(summary.nccl_times_table(paths))
        self.assertIn("| nccl-1f1b-m8-2bp | 400.0 | 404.0 (+1.0 %, steps 2-5) "
                      "| 412.0 (+3.0 %, steps 2-5) | not run |", text)
        text = "\n".join(summary.nccl_links_table(self.folder, paths))
        # 0->1: two sends of 0.1 ms predicted (0.20), measured 2 x 0.05 locally and 2 x 0.25 over
        # NCCL; the recv 0.15 predicted, 0.20 and 0.40 measured; nothing from torchrun.
        self.assertIn("| nccl-1f1b-m8-2bp | 0→1 | 2 | 0.20 | 0.10 | 0.50 |  | 0.15 | 0.20 | 0.40 "
                      "|  |", text)
        self.assertIn("| nccl-1f1b-m8-2bp | 1→0 | 1 | 0.05 | 0.07 | 0.07 |  |  |  |  |  |", text)
        self.assertNotIn("9.10", text)
        # A plan that was planned but never ran still gets its rows: missing, not skipped.
        write(self.folder, "nccl-zb-v-m8-2bp.plan.txt", HEADER + "pipeplan: error: no\n")
        lines, same = summary.losses_table(summary.nccl_run_paths(self.folder))
        self.assertFalse(same)
        self.assertIn("| nccl-zb-v-m8-2bp | missing | **not run** | **not run** |", lines)

    def killed_rank(self, outputs, statuses, ends, killed=2):
        """rank_killed.sh's output folder: each rank's output, its status and end (ms)."""
        ranks = []
        for rank, (text, status, end) in enumerate(zip(outputs, statuses, ends)):
            write(self.folder, f"nccl-rank-killed.rank{rank}.txt", text)
            ranks.append({"rank": rank, "status": status, "end_ms": end,
                          "output": f"nccl-rank-killed.rank{rank}.txt"})
        facts = {"killed_rank": killed, "world": len(outputs), "timeout_ms": 20000,
                 "slack_ms": 10000, "limit_s": 120, "ranks": ranks}
        write(self.folder, "nccl-rank-killed.txt",
              HEADER + "PIPEPLAN_TEST_FAULT=die:2, 4 ranks\n" + json.dumps(facts) + "\n" + FOOTER)
        return os.path.join(self.folder, "nccl-rank-killed.txt")

    def test_a_killed_rank_ends_every_rank_naming_it(self):
        lost = "rank 2 closed its connection (it exited or was killed)"
        outputs = [f"pipeplan: error: rank 0: {lost}\n",
                   f"NCCL INFO something\npipeplan: error: rank 1: rank 0 ended the job: {lost}\n",
                   "",
                   f"pipeplan: error: rank 3: rank 0 ended the job: {lost}\n"]
        path = self.killed_rank(outputs, [1, 1, 137, 1], [9000, 9100, 8000, 9050])
        lines, passed = summary.rank_killed_table(path)
        text = "\n".join(lines)
        self.assertTrue(passed, text)
        self.assertIn("| 0 | 1 | 9000 | 1000 | pipeplan: error: rank 0: rank 2 closed its "
                      "connection (it exited or was killed) | pass |", text)
        self.assertIn("| 2 | 137 | 8000 | 0 |  | pass |", text)
        self.assertIn("Every rank passed.", text)
        self.assertEqual(self.main(["--rank-killed", path])[0], 0)
        # The main summary has the table.
        self.assertIn("## NCCL: a rank killed at its first node", self.main([self.folder])[1])

    def test_a_killed_rank_check_fails_on_each_miss(self):
        lost = "rank 2 closed its connection (it exited or was killed)"
        good = [f"pipeplan: error: rank {r}: {lost}\n" for r in range(4)]
        cases = [
            # a survivor exits 0
            ([1, 0, 137, 1], [9000, 9000, 8000, 9000], good, "exit 0"),
            # a survivor hits the harness's limit
            ([1, 124, 137, 1], [9000, 120000, 8000, 9000], good, "hit the limit of 120 s"),
            # one ends 31 s after rank 2 (bound 20 s + 10 s)
            ([1, 1, 137, 1], [9000, 39001, 8000, 9000], good, "not ended within 30 s of rank 2"),
            # rank 2 was never killed (the run failed before its first node)
            ([1, 1, 1, 1], [900, 900, 900, 900], good, "not killed (exit 1)"),
            # an error line that names another cause, and a rank with two lines
            ([1, 1, 137, 1], [9000, 9000, 8000, 9000],
             [good[0], "pipeplan: error: rank 1: NCCL error: remote process exited\n", "",
              good[3] + "pipeplan: error: rank 3: again\n"], "does not name rank 2"),
        ]
        for statuses, ends, outputs, problem in cases:
            lines, passed = summary.rank_killed_table(self.killed_rank(outputs, statuses, ends))
            text = "\n".join(lines)
            self.assertFalse(passed, text)
            self.assertIn(problem, text)
            self.assertIn("**Not every rank passed.**", text)
        self.assertIn("2 error lines", text)
        self.assertEqual(self.main(["--rank-killed",
                                    os.path.join(self.folder, "nccl-rank-killed.txt")])[0], 1)
        # No result at all (the harness did not run): a failure.
        write(self.folder, "nccl-rank-killed.txt", HEADER + "# exit status: 124\n")
        self.assertFalse(summary.rank_killed_table(
            os.path.join(self.folder, "nccl-rank-killed.txt"))[1])

    def test_the_machine_nccl_and_mps(self):
        self.assertEqual(summary.machine_table(self.folder), [])
        env = {"libraries": [{"name": "libcudnn", "path": "/x/libcudnn.so.9", "version": "9.19.0"},
                             {"name": "libnccl", "path": "/x/libnccl.so.2", "version": "2.28.3",
                              "error": ""}]}
        write(self.folder, "env.json", HEADER + json.dumps(env) + "\n" + FOOTER)
        env["libraries"][1].update(path="/deps/nccl/lib/libnccl.so.2", version="2.31.2")
        write(self.folder, "nccl-env.json", HEADER + json.dumps(env) + "\n" + FOOTER)
        write(self.folder, "env-mps.txt", HEADER + "nvidia-cuda-mps-control: not found\n"
              "MPS: not available (no nvidia-cuda-mps-control; processes sharing the GPU are "
              "time-sliced)\n" + FOOTER)
        text = "\n".join(summary.machine_table(self.folder))
        # nccl-env.json (what the nccl runs loaded) before env.json.
        self.assertIn("- NCCL: 2.31.2 from /deps/nccl/lib/libnccl.so.2 (nccl-env.json)", text)
        self.assertIn("- MPS: not available (no nvidia-cuda-mps-control;", text)
        os.remove(os.path.join(self.folder, "nccl-env.json"))
        self.assertIn("- NCCL: 2.28.3 from /x/libnccl.so.2 (env.json)",
                      "\n".join(summary.machine_table(self.folder)))

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
        status, text = self.main([self.folder])
        self.assertEqual(status, 0)
        for title in ("## GPU tests", "## Block MFU", "## Emulated pipelines"):
            self.assertIn(title, text)


if __name__ == "__main__":
    unittest.main()
