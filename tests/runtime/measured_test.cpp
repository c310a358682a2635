// A measured step's metrics (planner/graph/metrics.h) come from its measured times, MFU included,
// a measured memory timeline replaces the plan's, and a real run carries MFU.
#include "runtime/measured.h"

#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <vector>

#include "planner/graph/simulator.h"
#include "profiles/gpu.h"
#include "tests/runtime/executor_fixtures.h"

namespace pipeplan {
namespace {

// With the H100's peak, as `pipeplan plan --gpu h100` records it.
TaskGraph tiny_1f1b() {
  TaskGraph plan = *testing::tiny_plan(find_schedule_family("1f1b"), BackwardMode::twobp);
  plan.meta.peak_flops_per_device = find_gpu("h100").peak_bf16_tflops * 1e12;
  return plan;
}

// Node i ran alone from i ms to i ms + 0.5 ms: the step took (nodes - 1) ms + 0.5 ms, each device
// was busy 0.5 ms per compute node it holds (its work: those but the optimizer step), from its
// first compute node's start to its last's end, and tokens/s and MFU follow from that makespan.
TEST(MeasuredResult, ItsMetricsAreThoseOfTheMeasuredTimes) {
  const TaskGraph plan = tiny_1f1b();
  ASSERT_GT(plan.meta.flops_per_token, 0.0);
  ASSERT_GT(plan.meta.peak_flops_per_device, 0.0);
  const int nodes = plan.node_count();
  ASSERT_GT(nodes, 1);
  std::vector<NodeTime> times;
  for (int id = 0; id < nodes; ++id)
    times.push_back({1000.0 * id, 1000.0 * id + 500.0});
  const auto devices = static_cast<std::size_t>(plan.meta.devices);
  // compute: nodes per device; work: those of the pipeline (not the optimizer step).
  std::vector<int> compute(devices, 0), work(devices, 0), first(devices, -1), last(devices, -1);
  for (int id = 0; id < nodes; ++id) {
    const Node& n = plan.node(id);
    ASSERT_FALSE(n.overlaps_next) << "1F1B has no overlapped pairs";
    if (n.kind != NodeKind::compute) continue;
    const auto d = static_cast<std::size_t>(n.device);
    ++compute[d];
    if (n.op != OpType::O) ++work[d];
    if (first[d] < 0) first[d] = id;
    last[d] = id;
  }
  const SimResult measured = measured_result(plan, times, {});
  const double makespan = 1000.0 * (nodes - 1) + 500.0;
  EXPECT_EQ(measured.makespan_us, makespan);
  ASSERT_EQ(measured.times.size(), static_cast<std::size_t>(nodes));
  EXPECT_EQ(measured.times.back().start_us, 1000.0 * (nodes - 1));
  ASSERT_EQ(measured.devices.size(), devices);
  double busy_total = 0;
  for (std::size_t d = 0; d < devices; ++d) {
    ASSERT_GT(compute[d], 0) << "device " << d;
    const DeviceMetrics& m = measured.devices[d];
    EXPECT_EQ(m.busy_us, 500.0 * compute[d]) << "device " << d;
    EXPECT_EQ(m.first_start_us, 1000.0 * first[d]) << "device " << d;
    EXPECT_EQ(m.last_end_us, 1000.0 * last[d] + 500.0) << "device " << d;
    EXPECT_EQ(m.optimizer_us, 500.0 * (compute[d] - work[d])) << "device " << d;
    EXPECT_DOUBLE_EQ(m.bubble_ratio, (makespan - 500.0 * work[d]) / makespan) << "device " << d;
    busy_total += 500.0 * work[d];
  }
  EXPECT_DOUBLE_EQ(measured.bubble_ratio,
                   1.0 - busy_total / (static_cast<double>(devices) * makespan));
  EXPECT_LT(busy_total, 500.0 * std::accumulate(compute.begin(), compute.end(), 0))
      << "the plan has no optimizer node to leave out";
  const double tokens = static_cast<double>(plan.meta.microbatches) * plan.meta.mbs * plan.meta.seq;
  EXPECT_DOUBLE_EQ(measured.tokens_per_s, tokens / (makespan * 1e-6));
  EXPECT_GT(measured.mfu, 0.0);
  EXPECT_DOUBLE_EQ(measured.mfu,
                   tokens / (makespan * 1e-6) * plan.meta.flops_per_token /
                       (static_cast<double>(devices) * plan.meta.peak_flops_per_device));
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
