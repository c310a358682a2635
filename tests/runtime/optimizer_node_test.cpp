// The optimizer step as a node of the plan (OpType::O): the runtime runs AdamW there, on the
// device's compute stream after its last weight gradient, and trains exactly as when it steps
// after the whole graph (a plan from a profile without optimizer times); a gradients-only step
// leaves the gradients; the measured trace times the node, so the run's step and the plan's
// prediction are one quantity.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/graph/taskgraph.h"
#include "planner/plan/make_plan.h"
#include "profiles/analytic.h"
#include "profiles/gpu.h"
#include "runtime/executor.h"
#include "schedules/family.h"
#include "tests/runtime/executor_fixtures.h"

namespace pipeplan {
namespace {

TaskGraph plan(bool optimizer_step) {
  const ScheduleFamily& family = find_schedule_family("1f1b");
  AnalyticOptions analytic;
  analytic.seq = testing::kSeq;
  PlanRequest request;
  request.profile = analytic_profile(testing::tiny_for(family), find_gpu("h100"), analytic);
  if (!optimizer_step) {
    for (auto& [kind, by_mbs] : request.profile.layers) {
      for (auto& [mbs, cost] : by_mbs)
        cost.optimizer_us = 0;
    }
  }
  request.gpu = "h100";
  request.devices = testing::kDevices;
  request.microbatches = testing::kMicrobatches;
  request.schedule = "1f1b";
  request.backward = BackwardMode::twobp;
  return make_plan(request).graph;
}

int optimizer_nodes(const TaskGraph& g) {
  int count = 0;
  for (const Node& n : g.nodes())
    count += n.kind == NodeKind::compute && n.op == OpType::O ? 1 : 0;
  return count;
}

TEST(OptimizerNodeRun, TrainsExactlyAsAStepAfterTheGraph) {
  const TaskGraph with = plan(true);
  const TaskGraph without = plan(false);
  ASSERT_EQ(optimizer_nodes(with), testing::kDevices);
  ASSERT_EQ(optimizer_nodes(without), 0);
  ExecutorOptions options;
  options.seed = 5;
  options.adamw.lr = 1e-3;
  Executor a(with, testing::cpu_backends(), options);
  Executor b(without, testing::cpu_backends(), options);
  for (int step = 1; step <= 4; ++step) {
    const StepResult ra = a.step();
    const StepResult rb = b.step();
    EXPECT_EQ(ra.loss, rb.loss) << "step " << step;  // bit for bit: the same AdamW, same order
    for (int id = 0; id < with.node_count(); ++id) {
      if (with.node(id).op != OpType::O) continue;
      const NodeTime& t = ra.measured.times[static_cast<std::size_t>(id)];
      EXPECT_GE(t.end_us, t.start_us);
      EXPECT_GT(t.end_us, 0.0) << "the optimizer node ran and was timed";
    }
  }
}

TEST(OptimizerNodeRun, AGradientsOnlyStepKeepsTheGradients) {
  ExecutorOptions options;
  options.seed = 5;
  Executor with(plan(true), testing::cpu_backends(), options);
  Executor without(plan(false), testing::cpu_backends(), options);
  const StepResult a = with.step(StepMode::gradients_only);
  const StepResult b = without.step(StepMode::gradients_only);
  EXPECT_EQ(a.loss, b.loss);
  // The next training step starts from the same weights: the node did not step them.
  EXPECT_EQ(with.step().loss, without.step().loss);
}

}  // namespace
}  // namespace pipeplan
