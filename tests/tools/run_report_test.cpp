// The report of `pipeplan run --backend cuda` (tools/run_report.h) from a fake measurement:
// the emulation line, predicted / measured / error columns, MFU labels and the JSON fields.
#include <gtest/gtest.h>

#include <string>

#include "tools/run_report.h"

namespace pipeplan {
namespace {

struct Fake {
  RunComparison run;
  MeasuredHardware hw;
  Fake() {
    run.predicted_makespan_us = 100000;
    run.measured_makespan_us = 105000;
    run.makespan_error_pct = 5;
    run.measured_step_time_us = 110000;
    run.predicted_tokens_per_s = 80000;
    run.measured_tokens_per_s = 76190.476;
    run.predicted_mfu = 0.4;
    run.predicted_mfu_on_gpus_used = 0.097;
    run.measured_mfu = 0.0924;
    run.measured_mfu_of_share = 0.0924 * 132 / 128;
    run.sm_share = 128.0 / 132.0;
    run.predicted_peak_bytes = {1LL << 30, 2LL << 30};
    run.measured_peak_bytes = {1LL << 30, 3LL << 30};
    run.peak_bytes_error_pct = {0, 50};
    hw.device_name = "NVIDIA H100 80GB HBM3";
    hw.gpu = "h100-sxm";
    hw.peak_flops = 989.4e12;
    hw.total_sms = 132;
    hw.sm_per_stage = 64;
    hw.emulated_stages = 2;
  }
};

TEST(RunReport, EmulatedRunsSaySoAndShowPredictedMeasuredAndError) {
  const Fake f;
  const std::string text = format_run_report(f.run, f.hw);
  EXPECT_EQ(text.rfind("emulated on one GPU: HBM and L2 shared (2 stages x 64 of 132 SMs)\n", 0),
            0U)
      << text;
  EXPECT_NE(text.find("100.000 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("105.000 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("+5.00 %"), std::string::npos) << text;
  EXPECT_NE(text.find("110.000 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("MFU (PaLM model FLOPs)"), std::string::npos) << text;
  // Predicted and measured MFU on one basis (the GPU it ran on), the plan's own beside them.
  EXPECT_NE(text.find("9.7 %          9.2 %"), std::string::npos) << text;
  EXPECT_NE(text.find("the plan's own figure, against its devices: 40.0 %"), std::string::npos)
      << text;
  EXPECT_NE(text.find("9.5 % of the 128 SMs granted (97.0 % of the GPU)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("989.4 TFLOP/s"), std::string::npos) << text;
  EXPECT_NE(text.find("3.00 GiB"), std::string::npos) << text;
  EXPECT_NE(text.find("+50.00 %"), std::string::npos) << text;
}

TEST(RunReport, JsonCarriesTheNoteTheShareAndTheErrors) {
  const Fake f;
  const nlohmann::json j = run_report_json(f.run, f.hw);
  EXPECT_EQ(j.at("hardware").at("note"), "emulated on one GPU: HBM and L2 shared");
  EXPECT_EQ(j.at("hardware").at("sm_per_stage"), 64);
  EXPECT_EQ(j.at("hardware").at("emulated"), true);
  EXPECT_DOUBLE_EQ(j.at("error_pct").at("makespan").get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(j.at("measured").at("mfu").get<double>(), 0.0924);
  EXPECT_DOUBLE_EQ(j.at("predicted").at("mfu_on_gpus_used").get<double>(), 0.097);
  EXPECT_DOUBLE_EQ(j.at("predicted").at("mfu").get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(j.at("measured").at("step_time_us").get<double>(), 110000);
  EXPECT_TRUE(j.at("measured").contains("mfu_of_sm_share"));
  ASSERT_EQ(j.at("peak_memory").size(), 2U);
  EXPECT_EQ(j.at("peak_memory")[1].at("measured_bytes").get<std::int64_t>(), 3LL << 30);
  EXPECT_NE(j.at("mfu_kind").get<std::string>().find("PaLM"), std::string::npos);
}

// A plan with its optimizer steps as nodes predicts the wall-clock step: the report sets the two
// side by side, as one quantity; without them the predicted step is null.
TEST(RunReport, AnOptimizerNodeMakesTheStepTimeOneQuantity) {
  Fake f;
  EXPECT_TRUE(run_report_json(f.run, f.hw).at("predicted").at("step_time_us").is_null());
  EXPECT_FALSE(run_report_json(f.run, f.hw).at("error_pct").contains("step_time"));
  f.run.predicted_step_time_us = 100000;
  const nlohmann::json j = run_report_json(f.run, f.hw);
  EXPECT_DOUBLE_EQ(j.at("predicted").at("step_time_us").get<double>(), 100000);
  EXPECT_DOUBLE_EQ(j.at("error_pct").at("step_time").get<double>(), 10.0);
  const std::string text = format_run_report(f.run, f.hw);
  EXPECT_NE(text.find("step time (wall, +AdamW)       100.000 ms     110.000 ms   +10.00 %"),
            std::string::npos)
      << text;
}

// The median of steps 2..N beside the last step; the work queues the run had.
TEST(RunReport, SteadyStepsAndWorkQueues) {
  Fake f;
  f.hw.work_queues = 32;
  f.run.steady_steps = 4;
  f.run.steady_first_step = 2;
  f.run.steady_makespan_us = 102000;
  f.run.steady_error_pct = 2;
  const std::string text = format_run_report(f.run, f.hw);
  EXPECT_EQ(text.rfind("emulated on one GPU: HBM and L2 shared (2 stages x 64 of 132 SMs, 32 work "
                       "queues per context)\n",
                       0),
            0U)
      << text;
  EXPECT_NE(text.find("  median, steps 2-5            100.000 ms     102.000 ms    +2.00 %"),
            std::string::npos)
      << text;
  const nlohmann::json j = run_report_json(f.run, f.hw);
  EXPECT_EQ(j.at("hardware").at("work_queues_per_context"), 32);
  EXPECT_DOUBLE_EQ(j.at("measured").at("steady").at("makespan_us").get<double>(), 102000);
  EXPECT_EQ(j.at("measured").at("steady").at("steps"), 4);
  EXPECT_EQ(j.at("measured").at("steady").at("first_step"), 2);
  EXPECT_DOUBLE_EQ(j.at("error_pct").at("steady_makespan").get<double>(), 2);
  // The runtime's account of the plan's tensors beside the allocator's peak.
  f.run.accounted_peak_bytes = {1LL << 30, 2LL << 30};
  const std::string with_account = format_run_report(f.run, f.hw);
  EXPECT_NE(with_account.find("+50.00 %  (2.00 GiB)"), std::string::npos) << with_account;
  EXPECT_EQ(run_report_json(f.run, f.hw).at("peak_memory")[1].at("accounted_bytes"), 2LL << 30);
  // One step: nothing to add beside it.
  f.run.steady_steps = 1;
  f.run.steady_first_step = 1;
  EXPECT_EQ(format_run_report(f.run, f.hw).find("median"), std::string::npos);
}

TEST(RunReport, RealGpusCarryNoEmulationNoteAndUnknownPeaksNoMfu) {
  Fake f;
  f.hw.emulated_stages = 0;
  f.hw.sm_per_stage = 0;
  f.hw.gpus = 2;
  const std::string text = format_run_report(f.run, f.hw);
  EXPECT_EQ(text.find("emulated"), std::string::npos) << text;
  EXPECT_NE(text.find("2 x NVIDIA H100 80GB HBM3"), std::string::npos) << text;
  EXPECT_FALSE(run_report_json(f.run, f.hw).at("hardware").contains("note"));
  f.hw.peak_flops = 0;
  EXPECT_NE(format_run_report(f.run, f.hw).find("MFU: unknown peak"), std::string::npos);
  EXPECT_TRUE(run_report_json(f.run, f.hw).at("measured").at("mfu").is_null());
}

}  // namespace
}  // namespace pipeplan
