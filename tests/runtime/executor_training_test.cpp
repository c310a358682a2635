// 20 AdamW steps: every schedule family trains to the same losses, and the loss falls.
#include <gtest/gtest.h>

#include <cmath>
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

}  // namespace
}  // namespace pipeplan
