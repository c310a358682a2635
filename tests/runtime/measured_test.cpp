// A measured step's metrics are computed as the simulator's (planner/graph/metrics.h): given the
// simulator's own times they are the prediction, MFU included, and a real run carries MFU.
#include "runtime/measured.h"

#include <gtest/gtest.h>

#include <chrono>

#include "planner/graph/simulator.h"
#include "profiles/gpu.h"
#include "tests/planner/graph/same_metrics.h"
#include "tests/runtime/executor_fixtures.h"

namespace pipeplan {
namespace {

// With the H100's peak, as `pipeplan plan --gpu h100` records it.
TaskGraph tiny_1f1b() {
  TaskGraph plan = *testing::tiny_plan(find_schedule_family("1f1b"), BackwardMode::twobp);
  plan.meta.peak_flops_per_device = find_gpu("h100").peak_bf16_tflops * 1e12;
  return plan;
}

TEST(MeasuredResult, OnTheSimulatorsTimesIsThePrediction) {
  const TaskGraph plan = tiny_1f1b();
  ASSERT_GT(plan.meta.flops_per_token, 0.0);
  ASSERT_GT(plan.meta.peak_flops_per_device, 0.0);
  const SimResult predicted = simulate(plan);
  const SimResult measured = measured_result(plan, predicted.times, {});
  EXPECT_GT(measured.mfu, 0.0);
  EXPECT_EQ(measured.times.size(), predicted.times.size());
  testing::expect_same_metrics(measured, predicted);
}

TEST(MeasuredResult, ADeviceTimelineReplacesThePlansMemory) {
  const TaskGraph plan = tiny_1f1b();
  const SimResult predicted = simulate(plan);
  std::vector<MeasuredDevice> devices(static_cast<std::size_t>(plan.meta.devices));
  devices[1] = {1234, {{0.0, 1000}, {5.0, 1234}}};
  const SimResult measured = measured_result(plan, predicted.times, devices);
  EXPECT_EQ(measured.devices[1].peak_memory_bytes, 1234);
  EXPECT_EQ(measured.devices[1].memory_timeline.size(), 2u);
  EXPECT_EQ(measured.devices[0].memory_timeline, predicted.devices[0].memory_timeline);
  devices.resize(devices.size() + 1);
  EXPECT_THROW(measured_result(plan, predicted.times, devices), Error);
}

TEST(MeasuredResult, ARunCarriesMfu) {
  const TaskGraph plan = tiny_1f1b();
  ExecutorOptions options;
  options.timeout = std::chrono::milliseconds(20000);
  Executor executor(plan, testing::cpu_backends(), options);
  const SimResult measured = executor.step(StepMode::gradients_only).measured;
  ASSERT_GT(measured.makespan_us, 0.0);
  const double devices = plan.meta.devices;
  EXPECT_GT(measured.mfu, 0.0);
  EXPECT_DOUBLE_EQ(measured.mfu, measured.tokens_per_s * plan.meta.flops_per_token /
                                     (devices * plan.meta.peak_flops_per_device));
}

// The steady figure is the median of the steps after the first (which warms the caches).
TEST(MeasuredResult, SteadyStepsAreTheMedianAfterTheFirst) {
  RunComparison run;
  run.predicted_makespan_us = 100;
  set_steady_steps(run, {900, 104, 110, 101});  // steps 2-4: 101, 104, 110
  EXPECT_EQ(run.steady_steps, 3);
  EXPECT_EQ(run.steady_first_step, 2);
  EXPECT_DOUBLE_EQ(run.steady_makespan_us, 104);
  EXPECT_DOUBLE_EQ(run.steady_error_pct, 4);
  set_steady_steps(run, {900, 104, 110});  // an even count: the mean of the middle two
  EXPECT_DOUBLE_EQ(run.steady_makespan_us, 107);
  set_steady_steps(run, {95});  // one step: that one
  EXPECT_EQ(run.steady_first_step, 1);
  EXPECT_DOUBLE_EQ(run.steady_error_pct, -5);
  EXPECT_THROW(set_steady_steps(run, {}), Error);
}

}  // namespace
}  // namespace pipeplan
