// Acceptance of issue 4 for `--schedule auto`: uniform costs against Zero Bubble's figures,
// heterogeneous stages against every fixed schedule at equal memory, memory limits, p2
// concatenation and determinism.
#include <gtest/gtest.h>

#include <algorithm>

#include "planner/error.h"
#include "tests/planner/auto_fixtures.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

using testing::kGiBBytes;

// Bubble is measured on the largest stage span (steady-state iteration time), as Zero Bubble's
// published rates are (BRIEF.md §1): 1 - sum busy / (P * max span).
TEST(AutoSchedule, UniformWithTwicePMbIsBelowOnePercentBubble) {
  for (const int p : {4, 8, 16}) {
    for (const int m : {3 * p, 4 * p}) {
      if (p == 16 && m > 3 * p) continue;  // keeps the test fast
      testing::UniformPlan u;
      u.devices = p;
      u.microbatches = m;
      u.schedule = "auto";
      u.backward = BackwardMode::twobp;
      u.memory_limit_bytes = 2.0 * p * kGiBBytes;  // M_B = 1 GiB stash per micro-batch
      const Plan plan = testing::uniform_plan(u);
      EXPECT_LE(plan.sim.span_bubble_ratio, 0.01) << "P=" << p << " m=" << m;
      for (const auto peak : plan.sim.peak_memory_bytes())
        EXPECT_LE(static_cast<double>(peak), u.memory_limit_bytes);
    }
  }
}

TEST(AutoSchedule, AtOneFOneBMemoryNoWorseThanZbH1) {
  for (const int p : {4, 8}) {
    const int m = 3 * p;
    testing::UniformPlan u;
    u.devices = p;
    u.microbatches = m;
    u.backward = BackwardMode::twobp;
    u.schedule = "zb-h1";
    const Plan zb = testing::uniform_plan(u);
    const auto zb_peaks = zb.sim.peak_memory_bytes();
    // ZB-H1's bubble per stage, closed form (P-1)(F+B-W) with F=B=W=1 ms.
    const double zb_bubble_us = (p - 1) * 1000.0;
    u.schedule = "auto";
    u.memory_limit_bytes = static_cast<double>(*std::max_element(zb_peaks.begin(), zb_peaks.end()));
    EXPECT_LE(u.memory_limit_bytes, p * kGiBBytes + 1);  // P*M_B, as the closed form says
    const Plan automatic = testing::uniform_plan(u);
    const double busy = 3000.0 * m;
    EXPECT_LE(automatic.sim.max_stage_span_us - busy, zb_bubble_us + 1e-6) << "P=" << p;
    EXPECT_LE(automatic.sim.max_stage_span_us, zb.sim.max_stage_span_us + 1e-6) << "P=" << p;
    EXPECT_LE(automatic.sim.makespan_us, zb.sim.makespan_us + 1e-6) << "P=" << p;
  }
}

// A realistic heterogeneous pipeline: the first stage holds the embedding (3 GiB of extra static
// memory, 10 % slower), the last holds the LM head (F and P1 1.5x slower, a 1.5x larger stash),
// and every boundary costs a 0.05 us transfer. Every one-chunk fixed family in every backward
// mode it accepts runs first with unlimited memory; auto then gets exactly that schedule's
// per-device peaks as its per-device limits and must never be slower (global step time), and
// strictly faster than all but zb-h1.
// The V families run two chunks per device, i.e. a different partition of the model into stages,
// so they are not compared on this one-stage-per-device instance.
TEST(AutoSchedule, HeterogeneousStagesBeatFixedSchedulesAtEqualMemory) {
  const std::vector<StageCost> costs = {testing::stage(1.2, 1.2, 1.2, 1.0, 0.5, 3.0),
                                        testing::stage(1, 1, 1), testing::stage(1, 1, 1),
                                        testing::stage(1.5, 1.5, 0.6, 1.5, 0.5)};
  constexpr double kLatencyUs = 0.05;
  const int m = 12;
  int compared = 0, strictly_faster = 0;
  for (const ScheduleFamily& family : schedule_families()) {
    if (family.uses_chunks || family.name == kAutoScheduleName) continue;
    for (const BackwardMode mode :
         {BackwardMode::fused, BackwardMode::twobp, BackwardMode::twobp_fill}) {
      if (family.places_p2 && mode != BackwardMode::twobp) continue;
      const testing::Simulated fixed =
          testing::run_family(family, mode, costs, testing::meta_for(costs, m, {}, kLatencyUs));
      std::vector<double> limits;
      for (const auto peak : fixed.sim.peak_memory_bytes())
        limits.push_back(static_cast<double>(peak));
      const testing::Simulated automatic =
          testing::run_auto(costs, testing::meta_for(costs, m, limits, kLatencyUs));
      const std::string label = family.name + " " + std::string(to_string(mode));
      EXPECT_LE(automatic.sim.makespan_us, fixed.sim.makespan_us + 1e-6) << label;
      if (automatic.sim.makespan_us < fixed.sim.makespan_us - 1e-6) ++strictly_faster;
      const auto peaks = automatic.sim.peak_memory_bytes();
      for (std::size_t d = 0; d < peaks.size(); ++d)
        EXPECT_LE(static_cast<double>(peaks[d]), limits[d]) << label << " device " << d;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 8);  // gpipe, 1f1b x {fused, 2bp, 2bp-fill}; zb-h1, zb-h2 (2bp)
  // Measured: 46.55 against gpipe (56.4-57.1), 1f1b 2bp / 2bp-fill (57.1 / 53.5) and zb-h2
  // (48.4 -> 46.9); 50.5 against 1f1b fused (53.1). zb-h1 (48.7) is only tied: no candidate and
  // no single move of the local search beats it at its own memory (docs/auto-schedule.md).
  EXPECT_GE(strictly_faster, 7);
}

TEST(AutoSchedule, RespectsEachDevicesOwnLimit) {
  const std::vector<StageCost> costs = {testing::stage(1, 1, 1, 1, 0.5, 1.0),
                                        testing::stage(1, 1, 1), testing::stage(1, 1, 1),
                                        testing::stage(1, 1, 1)};
  const std::vector<double> limits = {3.5 * kGiBBytes, 8 * kGiBBytes, 2 * kGiBBytes,
                                      1.5 * kGiBBytes};
  const testing::Simulated r = testing::run_auto(costs, testing::meta_for(costs, 8, limits));
  const auto peaks = r.sim.peak_memory_bytes();
  for (std::size_t d = 0; d < peaks.size(); ++d)
    EXPECT_LE(static_cast<double>(peaks[d]), limits[d]) << "device " << d;
  EXPECT_THROW(make_auto_schedule(costs, testing::meta_for(costs, 8, {1.2 * kGiBBytes, 0, 0, 0}),
                                  BackwardMode::twobp, 0),
               Error);
}

TEST(AutoSchedule, ConcatenatesP2WhenTheProfileSaysItIsFaster) {
  // p2(k) = 1 + 0.25 (k - 1): four p2 in one call cost 1.75 instead of 4.
  std::vector<StageCost> costs(4, testing::stage(1, 1, 1, 1, 0.5, 0, 16, 0.25));
  const PlanMeta meta = testing::meta_for(costs, 8);
  const testing::Simulated joined = testing::run_auto(costs, meta, 0);
  const testing::Simulated single = testing::run_auto(costs, meta, 1);
  EXPECT_LT(joined.sim.makespan_us, single.sim.makespan_us);
  bool grouped = false;
  for (const auto& actions : joined.schedule.per_device)
    for (const Action& a : actions)
      grouped = grouped || a.microbatches.size() > 1;
  EXPECT_TRUE(grouped);
}

TEST(AutoSchedule, IsDeterministic) {
  const std::vector<StageCost> costs = {testing::stage(1.2, 1.3, 0.9), testing::stage(1, 1.1, 1),
                                        testing::stage(0.8, 1, 1.2), testing::stage(1.5, 1.4, 1)};
  const PlanMeta meta = testing::meta_for(costs, 10, std::vector<double>(4, 5 * kGiBBytes), 0.05);
  const AutoResult a = make_auto_schedule(costs, meta, BackwardMode::twobp, 0);
  const AutoResult b = make_auto_schedule(costs, meta, BackwardMode::twobp, 0);
  EXPECT_EQ(a.schedule, b.schedule);
  EXPECT_EQ(a.variant, b.variant);
  EXPECT_EQ(schedule_to_text(a.schedule), schedule_to_text(b.schedule));
}

TEST(AutoSchedule, PlannedThroughMakePlanWithTheAutoName) {
  testing::UniformPlan u;
  u.schedule = "auto";
  u.backward = BackwardMode::twobp;
  const Plan plan = testing::uniform_plan(u);
  EXPECT_EQ(plan.graph.meta.schedule, "auto");
  EXPECT_GE(plan.sim.makespan_us, plan.bound.makespan_us - 1e-6);
  u.chunks = 2;
  EXPECT_THROW(testing::uniform_plan(u), Error);  // --chunks
}

}  // namespace
}  // namespace pipeplan
