// make_plan lowers a search's first candidate while the search evaluates it, and keeps that graph
// when the search returns that very order: the plan must be the one lowering the returned order
// gives, whether the first candidate won (it meets both bounds) or the local search moved on.
#include "planner/plan/make_plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "planner/graph/taskgraph.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

using testing::kGiB;
using testing::uniform_request;

void expect_as_lowered(const PlanRequest& request) {
  const Plan plan = make_plan(request);
  const PlannedSchedule planned = plan_schedule(request);
  ASSERT_EQ(planned.schedule, plan.graph.schedule);
  const TaskGraph fresh = lower(planned.schedule, planned.costs, planned.meta);
  EXPECT_EQ(plan_to_json(plan.graph), plan_to_json(fresh));
}

TEST(MakePlan, AutoPlanIsTheLoweringOfTheReturnedOrder) {
  // Large enough to be lowered beside its evaluation: 16 devices, a V, 48 micro-batches.
  const PlanRequest at_bounds = uniform_request({.devices = 16,
                                                 .microbatches = 48,
                                                 .schedule = "auto",
                                                 .backward = BackwardMode::twobp,
                                                 .comm = 0.05,
                                                 .memory_limit_bytes = 32 * kGiB});
  expect_as_lowered(at_bounds);
  // Memory for P micro-batches: the first candidate misses the bounds, the local search runs.
  PlanRequest searched = at_bounds;
  searched.memory_limit_bytes = 16 * kGiB;
  expect_as_lowered(searched);
  const Plan plan = make_plan(searched);
  EXPECT_GT(plan.sim.makespan_us, plan.bound.makespan_us * (1 + 1e-9));
}

}  // namespace
}  // namespace pipeplan
