// A step whose MFU passes 100 % of its GPU's peak (planner/graph/metrics.h): times faster than the
// GPU computes the model's FLOPs, which plan and show flag with one line
// (tests/tools/mfu_note_cli_test.cpp).
#include <gtest/gtest.h>

#include <string>

#include "planner/graph/metrics.h"
#include "planner/graph/taskgraph.h"

namespace pipeplan {
namespace {

PlanMeta meta_on_h100(int devices) {
  PlanMeta meta;
  meta.gpu = "h100-sxm";
  meta.devices = devices;
  meta.tensor_parallel = 2;
  meta.peak_flops_per_device = 2 * 989.4e12;  // a stage's two tensor-parallel GPUs
  return meta;
}

TEST(MfuAbovePeak, OnlyAStepFasterThanThePeakIsNamed) {
  const PlanMeta meta = meta_on_h100(4);
  StepMetrics step;
  step.mfu = 0.43;
  EXPECT_EQ(mfu_above_peak_note(meta, step), "");
  step.mfu = 1.0;
  EXPECT_EQ(mfu_above_peak_note(meta, step), "");
  step.mfu = 5.27;
  EXPECT_EQ(mfu_above_peak_note(meta, step),
            "MFU 527.0 % is above 100 % of gpu 'h100-sxm' (989.4 TFLOP/s a GPU): the plan's times "
            "are faster than its peak computes the model's FLOPs (check the durations, and the "
            "profile's times and model)");
  step.mfu = 0;  // no peak or no FLOPs known
  EXPECT_EQ(mfu_above_peak_note(meta, step), "");
}

// Emulated stages share one GPU: their MFU against it is the figure times the stages.
TEST(MfuAbovePeak, StagesSharingOneGpuCountTogether) {
  PlanMeta meta = meta_on_h100(4);
  meta.contention.slowdown = {1.0, 1.2};
  StepMetrics step;
  step.mfu = 0.2;
  EXPECT_DOUBLE_EQ(mfu_of_one_gpu(meta, step), 0.8);
  EXPECT_EQ(mfu_above_peak_note(meta, step), "");
  step.mfu = 0.3;
  EXPECT_EQ(mfu_above_peak_note(meta, step),
            "MFU 120.0 % is above 100 % of gpu 'h100-sxm' (989.4 TFLOP/s a GPU) for the stages "
            "that share it: the plan's times are faster than its peak computes the model's FLOPs "
            "(check the durations, and the profile's times and model)");
}

}  // namespace
}  // namespace pipeplan
