// The step-time lower bound: closed forms, validity against every plan (random instances), and
// the exact branch and bound against auto on small instances.
#include <gtest/gtest.h>

#include <random>

#include "planner/base/error.h"
#include "planner/graph/schedule_sim.h"
#include "planner/plan/lower_bound.h"
#include "planner/search/exact_schedule.h"
#include "tests/planner/plan_fixtures.h"
#include "tests/planner/search/auto_fixtures.h"

namespace pipeplan {
namespace {

std::vector<int> identity(int p) {
  std::vector<int> d(static_cast<std::size_t>(p));
  for (int i = 0; i < p; ++i)
    d[static_cast<std::size_t>(i)] = i;
  return d;
}

TEST(LowerBound, UniformClosedForm) {
  // F=B=W=1, comm c: the last device starts after (P-1)(1+c) and works 3m.
  for (const double c : {0.0, 0.25}) {
    const std::vector<StageCost> costs(4, testing::stage(1, 1, 1));
    const LowerBound b = step_time_lower_bound(costs, identity(4), P2pLink{c, 0}, 12);
    EXPECT_NEAR(b.makespan_us, 3 * 12 + 3 * (1 + c), 1e-9);
    EXPECT_NEAR(b.stage_span_us, 36, 1e-9);
  }
  // One micro-batch: the chain F0..F3, P1 3..0, one p2, 2(P-1) transfers.
  const std::vector<StageCost> costs(4, testing::stage(1, 1, 1));
  EXPECT_NEAR(step_time_lower_bound(costs, identity(4), P2pLink{0.5, 0}, 1).makespan_us,
              4 + 4 + 1 + 6 * 0.5, 1e-9);
}

// After its last P1 a device's gradient still runs down to stage 0, whose device then steps its
// own optimizer: the ramp-down path ends there, not with this device's optimizer. Two stages, one
// micro-batch, F = P1 = P2 = 1, optimizer 10 on stage 1's device: F0 F1 P1_1, then device 1 runs
// P2_1 and its optimizer (3 -> 14) while device 0 runs P1_0 and P2_0 (3 -> 5).
TEST(LowerBound, TheRampDownEndsWithTheOptimizerOfTheDeviceItEndsOn) {
  std::vector<StageCost> costs(2, testing::stage(1, 1, 1));
  costs[1].optimizer_us = 10;
  EXPECT_NEAR(step_time_lower_bound(costs, identity(2), P2pLink{}, 1).makespan_us, 14, 1e-9);
}

TEST(LowerBound, UsesTheCheapestConcatenatedP2) {
  // p2(4) = 1.75: a p2 costs at least 0.4375 per micro-batch.
  const std::vector<StageCost> costs(2, testing::stage(1, 1, 1, 1, 0.5, 0, 4, 0.25));
  EXPECT_NEAR(step_time_lower_bound(costs, identity(2), P2pLink{}, 8).makespan_us,
              1 + 16 + 8 * 0.4375, 1e-9);
}

// Property: the bound never exceeds the simulated step time of any plan, for random stage
// costs, optimizer steps, comm latencies and micro-batch counts (from 1, where the ramp-down
// decides), over every one-chunk family and backward mode and auto.
TEST(LowerBound, NeverAboveAnyPlan) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> time(0.3, 2.0), lat(0.0, 0.3);
  int checked = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int p = 2 + trial % 4;
    const int m = trial % 3 == 0 ? 1 + trial % 2 : p + trial % 5;
    std::vector<StageCost> costs;
    costs.reserve(static_cast<std::size_t>(p));
    for (int s = 0; s < p; ++s) {
      const double f = time(rng), p1 = time(rng), p2 = time(rng);  // fixed evaluation order
      costs.push_back(testing::stage(f, p1, p2, 1, 0.5, 0, 16, trial % 2 ? 1.0 : 0.5));
      // A long optimizer step on the last stage (a head), none below.
      if (s == p - 1 && trial % 4 != 1) costs.back().optimizer_us = 4 * f;
    }
    const PlanMeta meta = testing::meta_for(costs, m, {}, lat(rng));
    const LowerBound b = step_time_lower_bound(costs, identity(p), meta.link, m);
    for (const ScheduleFamily* family : schedule_families()) {
      if (family->traits().chunks.preferred > 1 || family->traits().needs_costs) continue;
      for (const BackwardMode mode : family->backward_modes()) {
        const double t = testing::run_family(*family, mode, costs, meta).sim.makespan_us;
        EXPECT_LE(b.makespan_us, t + 1e-9) << family->name() << " trial " << trial;
        ++checked;
      }
    }
    const testing::Simulated a = testing::run_auto(costs, meta);
    EXPECT_LE(b.makespan_us, a.sim.makespan_us + 1e-9) << "auto trial " << trial;
    EXPECT_LE(b.stage_span_us, a.sim.max_stage_span_us + 1e-9) << "auto trial " << trial;
  }
  EXPECT_GT(checked, 100);
}

// The same on chunked layouts (a V, interleaved, looped): every family with more than one chunk
// per device in every backward mode, on random costs for 2P or 3P stages; the bound holds for the
// step time and the largest stage span alike.
TEST(LowerBound, NeverAboveAnyChunkedPlan) {
  std::mt19937 rng(14);
  std::uniform_real_distribution<double> time(0.3, 2.0), lat(0.0, 0.3);
  int checked = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const int p = 2 + trial % 4;
    const int m = p * (1 + trial % 3);
    for (const ScheduleFamily* family : schedule_families()) {
      const ChunkRule& rule = family->traits().chunks;
      if (rule.max < 2 || family->traits().needs_costs) continue;
      for (int v = std::max(2, rule.min); v <= std::min(rule.max, 3); ++v) {
        std::vector<StageCost> costs;
        for (int s = 0; s < p * v; ++s) {
          const double f = time(rng), p1 = time(rng), p2 = time(rng);
          costs.push_back(testing::stage(f, p1, p2, 1, 0.5, 0, 16, trial % 2 ? 1.0 : 0.5));
          if (s % 3 == 0) costs.back().optimizer_us = 2 * f;  // an optimizer step on some devices
        }
        const ScheduleRequest request{p, v, m, std::nullopt, 1, nullptr};
        Schedule generated;
        try {
          generated = family->generate(request);
        } catch (const Error&) {
          continue;
        }
        PlanMeta meta = testing::meta_for(costs, m, {}, lat(rng));
        meta.devices = p;
        meta.chunks = v;
        meta.static_bytes.assign(static_cast<std::size_t>(p), 0);
        meta.memory_limit_bytes.assign(static_cast<std::size_t>(p), 0.0);
        // Overlapped pairs (dualpipe-v) from sequential to fully hidden.
        meta.overlap.efficiency = 0.5 * ((trial / 3) % 3);
        const LowerBound b = step_time_lower_bound(costs, generated.stage_device, meta.link, m,
                                                   meta.overlap.efficiency, generated.replicas);
        for (const BackwardMode mode : family->backward_modes()) {
          ScheduleRequest r = request;
          r.backward = mode;
          const testing::Simulated run = testing::run_schedule(
              with_backward_mode(*family, generated, r, costs, meta), costs, meta);
          const std::string label = family->name() + " " + std::string(to_string(mode)) +
                                    " V=" + std::to_string(v) + " trial " + std::to_string(trial);
          EXPECT_LE(b.makespan_us, run.sim.makespan_us + 1e-9) << label;
          EXPECT_LE(b.stage_span_us, run.sim.max_stage_span_us + 1e-9) << label;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(LowerBound, MakePlanReportsItForInterleavedToo) {
  testing::UniformPlan u;
  u.schedule = "interleaved";
  u.chunks = 2;
  const Plan plan = testing::uniform_plan(u);
  EXPECT_GT(plan.bound.makespan_us, 0);
  EXPECT_LE(plan.bound.makespan_us, plan.sim.makespan_us + 1e-6);
}

// Exact search (planner/search/exact_schedule.h): on small instances auto is within 5 % of the
// proven optimum (auto with unconcatenated p2, comm = 0, where both models agree).
TEST(ExactSchedule, AutoWithinFivePercentOfTheOptimum) {
  struct Case {
    std::vector<StageCost> costs;
    int m;
    std::vector<double> limits_gib;
  };
  const std::vector<Case> cases = {
      {std::vector<StageCost>(4, testing::stage(1, 1, 1)), 8, {}},
      {std::vector<StageCost>(3, testing::stage(1, 1, 1)), 4, {3, 3, 3}},
      {{testing::stage(1, 1, 1), testing::stage(1, 1, 1), testing::stage(1.5, 1.5, 1.5)}, 4, {}},
      {{testing::stage(1.2, 1, 0.8), testing::stage(0.8, 1.3, 1)}, 6, {2, 2}},
      {{testing::stage(1, 2, 1), testing::stage(1, 1, 0.5), testing::stage(2, 1, 1)}, 3, {}},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    std::vector<double> limits;
    for (const double g : c.limits_gib)
      limits.push_back(g * testing::kGiBBytes);
    const PlanMeta meta = testing::meta_for(c.costs, c.m, limits);
    const testing::Simulated a = testing::run_auto(c.costs, meta, 1);
    const ExactResult exact = exact_schedule(c.costs, meta, a.sim.makespan_us + 1e-6);
    EXPECT_TRUE(exact.proven) << "case " << i << " nodes " << exact.nodes;
    EXPECT_LE(exact.makespan_us, a.sim.makespan_us + 1e-6) << "case " << i;
    EXPECT_LE(a.sim.makespan_us, 1.05 * exact.makespan_us) << "case " << i;
    const LowerBound b = step_time_lower_bound(c.costs, identity(meta.devices), meta.link, c.m);
    EXPECT_LE(b.makespan_us, exact.makespan_us + 1e-9) << "case " << i;
    if (!exact.schedule.per_device.empty()) {  // a better schedule found: it must be valid
      const testing::Simulated e = testing::run_schedule(exact.schedule, c.costs, meta);
      EXPECT_NEAR(e.sim.makespan_us, exact.makespan_us, 1e-6) << "case " << i;
    }
  }
}

TEST(ExactSchedule, FindsTheOptimumFromAPoorIncumbent) {
  const std::vector<StageCost> costs(2, testing::stage(1, 1, 1));
  const PlanMeta meta = testing::meta_for(costs, 3);
  const ExactResult r = exact_schedule(costs, meta, 1e9);
  ASSERT_TRUE(r.proven);
  EXPECT_NEAR(r.makespan_us, 10, 1e-9);  // the bound: 1 + 3 * 3
  const testing::Simulated e = testing::run_schedule(r.schedule, costs, meta);
  EXPECT_NEAR(e.sim.makespan_us, 10, 1e-9);
}

// The exact search charges each op what the validator does: a P1 only its growth over the stash
// (none where the retained X/dY is smaller) and an op its own working memory (a P2 of one
// micro-batch, not a concatenated one's). zb-h1 on stash 2 GiB, retained 1 GiB, m = 4 runs in
// 13 us at 4 GiB on device 0; the optimum under that limit is no slower.
TEST(ExactSchedule, ChargesMemoryAsTheValidatorDoes) {
  for (const bool concat_work : {false, true}) {
    std::vector<StageCost> costs(2, testing::stage(1, 1, 1, 2.0, 1.0));
    if (concat_work) {
      // Four micro-batches in one p2 would need 8 GiB: no op of the class searched runs one.
      for (StageCost& c : costs)
        c.p2_work_bytes = {0, 0, 0, static_cast<std::int64_t>(8 * testing::kGiBBytes)};
    }
    const PlanMeta meta =
        testing::meta_for(costs, 4, {4 * testing::kGiBBytes, 4 * testing::kGiBBytes});
    const testing::Simulated zb =
        testing::run_family(find_schedule_family("zb-h1"), BackwardMode::twobp, costs, meta);
    ASSERT_NEAR(zb.sim.makespan_us, 13, 1e-9);
    const ExactResult exact = exact_schedule(costs, meta, 1e9);
    ASSERT_TRUE(exact.proven) << concat_work;
    ASSERT_FALSE(exact.schedule.per_device.empty()) << concat_work;
    EXPECT_LE(exact.makespan_us, zb.sim.makespan_us + 1e-9) << concat_work;
    // What it found runs within the limit, in the time it says.
    const testing::Simulated e = testing::run_schedule(exact.schedule, costs, meta);
    EXPECT_NEAR(e.sim.makespan_us, exact.makespan_us, 1e-9) << concat_work;
    for (const std::int64_t peak : schedule_peak_memory(exact.schedule, costs, meta))
      EXPECT_LE(static_cast<double>(peak), 4 * testing::kGiBBytes) << concat_work;
  }
}

}  // namespace
}  // namespace pipeplan
