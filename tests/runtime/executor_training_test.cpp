// 20 AdamW steps: every schedule family trains to the same losses, and the loss falls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "tests/runtime/executor_fixtures.h"

namespace pipeplan {
namespace {

constexpr int kSteps = 20;

std::vector<double> train(TaskGraph plan, int steps) {
  ExecutorOptions options;
  options.seed = 3;
  options.adamw.lr = 1e-3;
  Executor executor(std::move(plan), testing::cpu_backends(), options);
  std::vector<double> losses;
  losses.reserve(static_cast<std::size_t>(steps));
  for (int s = 0; s < steps; ++s)
    losses.push_back(executor.step().loss);
  return losses;
}

// Losses agree within 1e-4 relative: the schedules differ only in the order of the fp32
// gradient sums (concatenated p2, backward order), about 1e-7 relative per step, and AdamW
// carries such differences on from step to step. Chunked families run an 8-block model, so they
// are compared with each other.
TEST(ExecutorTraining, EverySchedulesLossesAgreeAndFall) {
  std::map<int, std::vector<double>> baseline;  // by block count
  int families = 0;
  for (const ScheduleFamily* family : schedule_families()) {
    std::optional<TaskGraph> plan = testing::tiny_plan(*family, BackwardMode::twobp);
    if (!plan) plan = testing::tiny_plan(*family, BackwardMode::fused);
    ASSERT_TRUE(plan) << family->name();
    const int blocks = plan->meta.model.layers;
    const std::vector<double> losses = train(std::move(*plan), kSteps);
    ++families;
    EXPECT_LT(losses.back(), 0.9 * losses.front()) << family->name();
    for (int s = 1; s < kSteps; ++s) {
      EXPECT_LT(losses[static_cast<std::size_t>(s)], losses[static_cast<std::size_t>(s - 1)])
          << family->name() << " step " << s + 1;
    }
    const auto [it, first] = baseline.emplace(blocks, losses);
    if (first) continue;
    for (int s = 0; s < kSteps; ++s) {
      const double want = it->second[static_cast<std::size_t>(s)];
      EXPECT_NEAR(losses[static_cast<std::size_t>(s)], want, 1e-4 * want)
          << family->name() << " step " << s + 1;
    }
  }
  EXPECT_GE(families, 3);
}

// The same plan twice: bitwise the same losses (per device, ops run in planned order).
TEST(ExecutorTraining, RunsAreReproducible) {
  const ScheduleFamily& family = find_schedule_family("1f1b");
  const std::vector<double> a = train(*testing::tiny_plan(family, BackwardMode::twobp), 3);
  const std::vector<double> b = train(*testing::tiny_plan(family, BackwardMode::twobp), 3);
  EXPECT_EQ(a, b);
}

// Every weight of every layer, as the host reads it.
std::vector<std::vector<double>> weights(const Executor& executor) {
  cpu::CpuBackend host;
  std::vector<std::vector<double>> values;
  const int layers = static_cast<int>(executor.plan().meta.model.layer_list().size());
  for (int l = 0; l < layers; ++l) {
    for (const Parameter& p : executor.layer(l).params)
      values.push_back(host.download(p.weight));
  }
  return values;
}

// A gradients-only step feeds AdamW nothing, so the training step after it is AdamW's first
// (bias correction at t = 1): bitwise the weights of a fresh executor's one training step, with
// the optimizer in the plan's O nodes and, without them, after the graph.
TEST(ExecutorTraining, AGradientsOnlyStepIsNotAnOptimizerStep) {
  for (const bool optimizer_nodes : {true, false}) {
    const std::optional<TaskGraph> plan = testing::tiny_plan(
        find_schedule_family("1f1b"), BackwardMode::twobp, nullptr, optimizer_nodes);
    ASSERT_TRUE(plan.has_value());
    const bool has_o = std::any_of(plan->nodes().begin(), plan->nodes().end(),
                                   [](const Node& n) { return n.op == OpType::O; });
    ASSERT_EQ(has_o, optimizer_nodes);
    ExecutorOptions options;
    options.seed = 3;
    options.adamw.lr = 1e-2;
    Executor fresh(*plan, testing::cpu_backends(), options);
    fresh.step();
    Executor after_gradients(*plan, testing::cpu_backends(), options);
    after_gradients.step(StepMode::gradients_only);
    after_gradients.step();
    EXPECT_EQ(after_gradients.steps_done(), 2);
    EXPECT_TRUE(weights(after_gradients) == weights(fresh))
        << "optimizer nodes: " << optimizer_nodes;
  }
}

}  // namespace
}  // namespace pipeplan
