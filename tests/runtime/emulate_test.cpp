// The host-side rules of `pipeplan run --backend cuda --emulate P` (runtime/emulate.h) and the
// comparison of a measured step with its prediction (runtime/measured.h): SM shares, --emulate
// validation, device-name -> gpus.json peak, MFU and errors from a fake measurement.
#include <gtest/gtest.h>

#include <string>

#include "planner/base/error.h"
#include "runtime/emulate.h"
#include "runtime/measured.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

using pipeplan::testing::error_of;

TEST(EmulatedSmShare, RoundsAnEqualShareDownToMultiplesOfEight) {
  EXPECT_EQ(emulated_sm_share(132, 4), 32);  // 33 -> 32
  EXPECT_EQ(emulated_sm_share(132, 3), 40);  // 44 -> 40
  EXPECT_EQ(emulated_sm_share(132, 2), 64);  // 66 -> 64
  EXPECT_EQ(emulated_sm_share(132, 1), 128);
  EXPECT_EQ(emulated_sm_share(132, 16), 8);  // 8.25 -> 8, the minimum
  EXPECT_EQ(emulated_sm_share(108, 4), 24);  // A100: 27 -> 24
}

TEST(EmulatedSmShare, RefusesSharesBelowTheMinimum) {
  const std::string tiny = error_of([] { emulated_sm_share(132, 17); });
  EXPECT_NE(tiny.find("emulate: 17 stages"), std::string::npos) << tiny;
  EXPECT_NE(tiny.find("give each stage 7,"), std::string::npos) << tiny;  // 132 / 17 = 7 SMs
  EXPECT_NE(error_of([] { emulated_sm_share(132, 0); }).find("emulate: "), std::string::npos);
  EXPECT_NE(error_of([] { emulated_sm_share(0, 4); }).find("no SMs"), std::string::npos);
}

TEST(CheckEmulate, MustNameThePlansDeviceCountOnTheCudaBackend) {
  TaskGraph plan;
  plan.meta.devices = 4;
  EXPECT_EQ(error_of([&] { check_emulate(0, plan, "cpu"); }), "<no error>");
  EXPECT_EQ(error_of([&] { check_emulate(4, plan, "cuda"); }), "<no error>");
  const std::string wrong = error_of([&] { check_emulate(3, plan, "cuda"); });
  EXPECT_NE(wrong.find("emulate: 3 stages"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("4 devices"), std::string::npos) << wrong;
  const std::string cpu = error_of([&] { check_emulate(4, plan, "cpu"); });
  EXPECT_NE(cpu.find("backend cuda"), std::string::npos) << cpu;
  EXPECT_NE(error_of([&] { check_emulate(-2, plan, "cuda"); }).find("emulate: "),
            std::string::npos);
}

TEST(GpuForDeviceName, MapsCudaDeviceNamesToGpusJsonPeaks) {
  EXPECT_EQ(gpu_for_device_name("NVIDIA H100 80GB HBM3").name, "h100-sxm");
  EXPECT_DOUBLE_EQ(gpu_for_device_name("NVIDIA H100 80GB HBM3").peak_bf16_tflops, 989.4);
  EXPECT_EQ(gpu_for_device_name("NVIDIA H100 PCIe").name, "h100-pcie");
  EXPECT_EQ(gpu_for_device_name("NVIDIA H200").name, "h200");
  EXPECT_EQ(gpu_for_device_name("NVIDIA A100-SXM4-80GB").name, "a100-80g");
  const std::string unknown = error_of([] { gpu_for_device_name("Tesla T4"); });
  EXPECT_NE(unknown.find("Tesla T4"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("pass gpu with"), std::string::npos) << unknown;
  // Variants of a listed GPU whose peak, memory or links are another's are not taken for it (the
  // PCIe A100: 1935 GB/s of HBM and no NVLink, where the entry has 2039 and 300).
  for (const char* name :
       {"NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA GH200 480GB", "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe"}) {
    const std::string error = error_of([name] { gpu_for_device_name(name); });
    EXPECT_NE(error.find(name), std::string::npos) << error;
  }
}

TEST(GpuForDevice, AGivenGpuWinsOverTheDeviceName) {
  EXPECT_EQ(gpu_for_device("NVIDIA H100 80GB HBM3", "").name, "h100-sxm");
  EXPECT_EQ(gpu_for_device("NVIDIA H100 80GB HBM3", "h200").name, "h200");
  EXPECT_EQ(gpu_for_device("Tesla T4", "a100-80g").name, "a100-80g");
  EXPECT_NE(error_of([] { gpu_for_device("Tesla T4", ""); }).find("Tesla T4"), std::string::npos);
  EXPECT_NE(error_of([] { gpu_for_device("NVIDIA H200", "b300"); }).find("b300"),
            std::string::npos);
}

// A fake measurement: 4 emulated stages x 32 of 132 SMs on an H100, 5 % slower than predicted.
struct FakeRun {
  TaskGraph plan;
  SimResult predicted, measured;
  MeasuredHardware hw;
  FakeRun() {
    plan.meta.devices = 4;
    plan.meta.flops_per_token = 1.2e9;
    predicted.makespan_us = 100000;
    predicted.tokens_per_s = 80000;
    predicted.mfu = 0.4;
    predicted.devices.resize(4);
    measured.makespan_us = 105000;
    measured.tokens_per_s = 80000.0 / 1.05;
    for (int d = 0; d < 4; ++d)
      predicted.devices[static_cast<std::size_t>(d)].peak_memory_bytes = (d + 1) * 1000;
    hw.device_name = "NVIDIA H100 80GB HBM3";
    hw.gpu = "h100-sxm";
    hw.peak_flops = 989.4e12;
    hw.gpus = 1;
    hw.total_sms = 132;
    hw.sm_per_stage = 32;
    hw.emulated_stages = 4;
  }
};

TEST(CompareWithPrediction, ErrorsMfuAndSmShareFromAFakeMeasurement) {
  const FakeRun f;
  const RunComparison c = compare_with_prediction(f.plan, f.predicted, f.measured, 110000,
                                                  {1000, 2100, 2700, 4000}, f.hw);
  EXPECT_NEAR(c.makespan_error_pct, 5.0, 1e-9);
  EXPECT_DOUBLE_EQ(c.measured_step_time_us, 110000);
  const double mfu = (80000.0 / 1.05) * 1.2e9 / 989.4e12;
  EXPECT_NEAR(c.measured_mfu, mfu, 1e-12);
  EXPECT_NEAR(c.sm_share, 128.0 / 132.0, 1e-12);
  EXPECT_NEAR(c.measured_mfu_of_share, mfu * 132.0 / 128.0, 1e-12);
  EXPECT_DOUBLE_EQ(c.predicted_mfu, 0.4);
  // The prediction on the measurement's basis: its tokens/s against the one GPU used.
  EXPECT_NEAR(c.predicted_mfu_on_gpus_used, 80000.0 * 1.2e9 / 989.4e12, 1e-12);
  ASSERT_EQ(c.peak_bytes_error_pct.size(), 4U);
  EXPECT_NEAR(c.peak_bytes_error_pct[0], 0.0, 1e-12);
  EXPECT_NEAR(c.peak_bytes_error_pct[1], 5.0, 1e-9);
  EXPECT_NEAR(c.peak_bytes_error_pct[2], -10.0, 1e-9);
  EXPECT_NEAR(c.peak_bytes_error_pct[3], 0.0, 1e-12);
}

TEST(CompareWithPrediction, RealGpusCountEveryGpuAndUnknownPeaksGiveNoMfu) {
  FakeRun f;
  f.hw.emulated_stages = 0;
  f.hw.sm_per_stage = 0;
  f.hw.gpus = 4;
  const RunComparison four = compare_with_prediction(f.plan, f.predicted, f.measured, 0, {}, f.hw);
  EXPECT_NEAR(four.measured_mfu, (80000.0 / 1.05) * 1.2e9 / (4 * 989.4e12), 1e-12);
  EXPECT_DOUBLE_EQ(four.measured_mfu_of_share, 0.0);
  EXPECT_DOUBLE_EQ(four.sm_share, 1.0);
  f.hw.peak_flops = 0;
  EXPECT_DOUBLE_EQ(
      compare_with_prediction(f.plan, f.predicted, f.measured, 0, {}, f.hw).measured_mfu, 0.0);
  f.hw.gpus = 0;
  EXPECT_NE(error_of([&] {
              compare_with_prediction(f.plan, f.predicted, f.measured, 0, {}, f.hw);
            }).find("GPU count"),
            std::string::npos);
}

}  // namespace
}  // namespace pipeplan
