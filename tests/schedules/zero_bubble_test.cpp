// Zero Bubble families, breadth-first looping and the V schedules against their closed forms
// (Zero Bubble, arXiv 2401.10241; uniform stages, comm = 0). Conditions under which the forms hold:
// m >= P, and for ZB-H2 T_F + T_B >= 2·T_W (otherwise p2 work alone exceeds the ramp it fills).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "schedules/family.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

using testing::kGiB;
using testing::uniform_plan;
using testing::UniformPlan;

struct Costs {
  double f, b, w;
};
// T_W ≤ T_F in the first five, T_W > T_F in the last three (each with T_F + T_B ≥ 2T_W).
constexpr Costs kCosts[] = {{1, 1, 1}, {1, 2, 1},   {2, 2, 1}, {1, 1, 0.5},
                            {2, 3, 1}, {1, 2, 1.5}, {1, 3, 2}, {2, 3, 2.5}};

UniformPlan zb(const char* schedule, int p, int m, const Costs& c, int chunks = 1) {
  return {.devices = p,
          .microbatches = m,
          .chunks = chunks,
          .schedule = schedule,
          .backward = BackwardMode::twobp,
          .f = c.f,
          .b = c.b,
          .w = c.w,
          .p2_concat = 1};
}

// ZB-H1: makespan m(T_F + T_B + T_W) + (P − 1)(T_F + T_B − T_W), plus (P − 1)(T_W − T_F) where
// T_W > T_F; every device holds at most P micro-batches (stage 0 exactly P·M_B, as 1F1B).
TEST(ZeroBubble, H1ClosedForm) {
  for (const int p : {2, 4, 8}) {
    for (const int m : {p, 2 * p, 3 * p}) {
      for (const Costs& c : kCosts) {
        const Plan plan = uniform_plan(zb("zb-h1", p, m, c));
        const double expected = m * (c.f + c.b + c.w) + (p - 1) * (c.f + c.b - c.w) +
                                (p - 1) * std::max(0.0, c.w - c.f);
        EXPECT_NEAR(plan.sim.makespan_us, expected * 1e3, 1e-6) << "P=" << p << " m=" << m;
        const Plan one_f_one_b = uniform_plan({.devices = p, .microbatches = m});
        EXPECT_LE(plan.sim.devices[0].peak_memory_bytes,
                  one_f_one_b.sim.devices[0].peak_memory_bytes);
        for (const DeviceMetrics& d : plan.sim.devices)
          EXPECT_LE(static_cast<double>(d.peak_memory_bytes), p * kGiB + 1);
      }
    }
  }
}

// ZB-H2: the largest stage span (Zero Bubble's steady-state step) is
// m(T_F + T_B + T_W) + (P − 1)(T_F + T_B − 2T_W) — no bubble at all when F = B = W — plus
// 2(P − 1)(T_W − T_F) where T_W > T_F, and every device holds at most 2P − 1 micro-batches.
TEST(ZeroBubble, H2ClosedForm) {
  for (const int p : {2, 4, 8}) {
    for (const int m : {2 * p, 3 * p}) {
      for (const Costs& c : kCosts) {
        const Plan plan = uniform_plan(zb("zb-h2", p, m, c));
        const double expected = m * (c.f + c.b + c.w) + (p - 1) * (c.f + c.b - 2 * c.w) +
                                2 * (p - 1) * std::max(0.0, c.w - c.f);
        EXPECT_NEAR(plan.sim.max_stage_span_us, expected * 1e3, 1e-6) << "P=" << p << " m=" << m;
        EXPECT_NEAR(static_cast<double>(plan.sim.devices[0].peak_memory_bytes), (2 * p - 1) * kGiB,
                    1);
        for (const DeviceMetrics& d : plan.sim.devices)
          EXPECT_LE(static_cast<double>(d.peak_memory_bytes), (2 * p - 1) * kGiB + 1);
      }
    }
  }
}

// Looped BFS (fused): with m >= P no device waits between its chunks, so the step is
// m(T_F + T_B + T_W) + (P − 1)(T_F + T_B + T_W)/V, and stage 0 holds all m micro-batches.
TEST(ZeroBubble, LoopedBfsClosedForm) {
  for (const int p : {2, 4}) {
    for (const int v : {1, 2, 3}) {
      for (const int m : {p, 2 * p}) {
        const Costs c{1, 1.5, 0.5};
        UniformPlan u = zb("looped-bfs", p, m, c, v);
        u.backward = BackwardMode::fused;
        const Plan plan = uniform_plan(u);
        const double per_mb = c.f + c.b + c.w;
        EXPECT_NEAR(plan.sim.makespan_us, (m * per_mb + (p - 1) * per_mb / v) * 1e3, 1e-6)
            << "P=" << p << " V=" << v << " m=" << m;
        // Per-block stash is 1 GiB / V rounded to whole bytes: V bytes per micro-batch.
        EXPECT_NEAR(static_cast<double>(plan.sim.devices[0].peak_memory_bytes), m * kGiB, m * v);
      }
    }
  }
}

// Chunk stashes (M_B / 2 each) alive on a device from the start of a forward to the end of its
// p2, at their peak: Zero Bubble's and V-Min's activation count, independent of how much a p1
// frees early.
int peak_live_chunk_stashes(const Plan& plan, int device) {
  std::vector<std::pair<double, int>> events;
  for (int id = 0; id < plan.graph.node_count(); ++id) {
    const Node& n = plan.graph.node(id);
    if (n.kind != NodeKind::compute || n.device != device) continue;
    const NodeTime& t = plan.sim.times[static_cast<std::size_t>(id)];
    if (n.op == OpType::F) events.emplace_back(t.start_us, +1);
    if (n.op == OpType::P2) events.emplace_back(t.end_us, -static_cast<int>(n.microbatches.size()));
  }
  std::sort(events.begin(), events.end());  // at equal times a release (-) sorts first
  int live = 0, peak = 0;
  for (const auto& [time, delta] : events)
    peak = std::max(peak, live += delta);
  return peak;
}

// A V family's declared peak (schedules/family.h's MemoryModel) in chunk stashes (M_B / 2), with
// micro-batches enough not to bound it.
int chunk_stash_cap(const char* family, int devices) {
  return static_cast<int>(2 *
                          find_schedule_family(family).traits().memory.peak(devices, 2, 1 << 20));
}

// V-Min (arXiv 2405.15362) against the paper's figures with T_F = T_B = T_W, comm = 0: peak
// activations floor((P + 4) / 3)·M_B, i.e. 2·floor((P + 4) / 3) chunk stashes on the fullest
// device (about a third of 1F1B's P·M_B), and a stage-span bubble of at most (2P/3)(T_F + T_B +
// T_W) (the paper's "~2p/3m" bubble rate), below 1F1B's (P − 1)(T_F + T_B + T_W) from P = 3 on.
TEST(ZeroBubble, VMinBuildingBlockMeetsThePapersMemoryAndBubble) {
  for (const int p : {2, 3, 4, 5, 6, 7, 8, 12, 16}) {
    for (const int m : {2 * p, 4 * p}) {
      const Plan plan = uniform_plan(zb("v-min", p, m, {1, 1, 1}, 2));
      int peak = 0;
      for (int d = 0; d < p; ++d)
        peak = std::max(peak, peak_live_chunk_stashes(plan, d));
      const std::string label = "P=" + std::to_string(p) + " m=" + std::to_string(m);
      EXPECT_EQ(peak, 2 * ((p + 4) / 3)) << label;
      EXPECT_EQ(peak, chunk_stash_cap("v-min", p)) << label;
      const int v_min_microbatches = (p + 4) / 3;
      for (const DeviceMetrics& d : plan.sim.devices)
        EXPECT_LE(static_cast<double>(d.peak_memory_bytes), v_min_microbatches * kGiB + 1) << label;
      const double bubble_us = plan.sim.max_stage_span_us - 3.0 * m * 1e3;
      EXPECT_GE(bubble_us, -1e-6) << label;
      EXPECT_LE(bubble_us, 2.0 * p / 3.0 * 3e3 + 1e-6) << label;
      if (p >= 3) {
        EXPECT_LT(bubble_us, (p - 1) * 3e3) << label;
      }
      EXPECT_EQ(plan.graph.schedule.stage_device[0], 0);
      EXPECT_EQ(plan.graph.schedule.stage_device[static_cast<std::size_t>(2 * p - 1)], 0);
    }
  }
}

// V-Half (arXiv 2405.15362) with T_F = T_B = T_W, comm 0: the paper's memory, floor((P + 2) / 2)
// micro-batches of activations (2·floor((P + 2) / 2) chunk stashes on the fullest device, about
// half of 1F1B's P·M_B), and a bubble below 1F1B's, fused ((P − 1)(T_F + T_B + T_W)) and 2bp
// ((P − 1)(T_F + T_B)), on the global step and on the largest stage span alike, for every m >= 2P.
// The paper's "~p/2m" bubble rate is a bubble of about (P/2)(T_F + T_B + T_W); measured here
// (m = 2P..4P): 0.5, 2.5, 2.5, 5.5, 5.5, 8.5, 14.5, 20.5 at P = 2, 3, 4, 5, 6, 8, 12, 16, within
// it (VHalfBubbleIsWithinThePapersHalfOfP has the closed form).
TEST(ZeroBubble, VHalfBuildingBlockMeetsThePapersMemoryAndBeatsOneFOneB) {
  for (const int p : {2, 3, 4, 5, 6, 8, 12, 16}) {
    for (const int m : {2 * p, 3 * p, 4 * p}) {
      const std::string label = "P=" + std::to_string(p) + " m=" + std::to_string(m);
      const Plan plan = uniform_plan(zb("v-half", p, m, {1, 1, 1}, 2));
      int peak = 0;
      for (int d = 0; d < p; ++d)
        peak = std::max(peak, peak_live_chunk_stashes(plan, d));
      const int v_half_microbatches = (p + 2) / 2;
      EXPECT_EQ(peak, 2 * v_half_microbatches) << label;
      EXPECT_EQ(peak, chunk_stash_cap("v-half", p)) << label;
      for (const DeviceMetrics& d : plan.sim.devices)
        EXPECT_LE(static_cast<double>(d.peak_memory_bytes), v_half_microbatches * kGiB + 1)
            << label;
      const double busy_us = 3.0 * m * 1e3;
      const double bubble_us = plan.sim.makespan_us - busy_us;
      const double span_bubble_us = plan.sim.max_stage_span_us - busy_us;
      const Plan fused = uniform_plan({.devices = p, .microbatches = m});
      UniformPlan two = zb("1f1b", p, m, {1, 1, 1});
      const Plan twobp = uniform_plan(two);
      EXPECT_NEAR(fused.sim.makespan_us - busy_us, (p - 1) * 3e3, 1e-6) << label;
      EXPECT_NEAR(twobp.sim.makespan_us - busy_us, (p - 1) * 2e3, 1e-6) << label;
      EXPECT_LT(bubble_us, (p - 1) * 2e3 - 1e-6) << label;
      EXPECT_LT(span_bubble_us, twobp.sim.max_stage_span_us - busy_us - 1e-6) << label;
      EXPECT_LT(plan.sim.bubble_ratio, twobp.sim.bubble_ratio) << label;
      EXPECT_LE(bubble_us, p / 2.0 * 3e3 + 1e-6) << label;
    }
  }
}

// V-Half's stage-span bubble with T_F = T_B = T_W, comm 0, for every m >= P: within the paper's
// (P/2)(T_F + T_B + T_W) (arXiv 2405.15362, its "~p/2m" bubble rate), exactly
// floor((P − 1) / 2)(T_F + T_B + T_W) − T_F / 2 from P = 3 on (the cool-down's p1s run before the
// p2s that nothing waits on), at the paper's peak of floor((P + 2) / 2)·M_B.
TEST(ZeroBubble, VHalfBubbleIsWithinThePapersHalfOfP) {
  for (const int p : {3, 4, 5, 6, 7, 8, 12, 16, 24, 32}) {
    for (const int m : {p, 2 * p, 3 * p, 4 * p}) {
      const std::string label = "P=" + std::to_string(p) + " m=" + std::to_string(m);
      const Plan plan = uniform_plan(zb("v-half", p, m, {1, 1, 1}, 2));
      const double span_bubble_us = plan.sim.max_stage_span_us - 3.0 * m * 1e3;
      EXPECT_LE(span_bubble_us, p / 2.0 * 3e3 + 1e-6) << label;
      const int half_of_p_less_one = (p - 1) / 2;  // floor((P − 1) / 2)
      EXPECT_NEAR(span_bubble_us, (half_of_p_less_one * 3.0 - 0.5) * 1e3, 1e-6) << label;
      int peak = 0;
      for (int d = 0; d < p; ++d)
        peak = std::max(peak, peak_live_chunk_stashes(plan, d));
      const int v_half_microbatches = (p + 2) / 2;
      EXPECT_EQ(peak, 2 * v_half_microbatches) << label;
      for (const DeviceMetrics& d : plan.sim.devices)
        EXPECT_LE(static_cast<double>(d.peak_memory_bytes), v_half_microbatches * kGiB + 1)
            << label;
    }
  }
}

// The building block repeats without collisions for every P: micro-batch k's passes are the
// block's shifted by 6k, so every device runs F, F, P1, P1, P2, P2 for each micro-batch and its
// order is the same six-pass pattern in the steady state (one period = 6 actions).
TEST(ZeroBubble, VMinSteadyStateRepeatsTheBlock) {
  for (const int p : {3, 4, 8}) {
    const int m = 6 * p;
    const Schedule s = generate_schedule("v-min", {p, 2, m});
    check_schedule(s);
    for (const auto& actions : s.per_device) {
      ASSERT_EQ(actions.size(), static_cast<std::size_t>(6 * m));
      const std::size_t mid = actions.size() / 2;
      for (std::size_t i = mid; i < mid + 6; ++i) {
        const Action& a = actions[i];
        const Action& next_period = actions[i + 6];
        EXPECT_EQ(a.op, next_period.op);
        EXPECT_EQ(a.stage, next_period.stage);
        EXPECT_EQ(a.microbatches[0] + 1, next_period.microbatches[0]);
      }
    }
  }
}

// ZB-V as published (Qi et al., ICLR 2024, section 6): with T_F = T_B = T_W and comm 0, zero
// bubble on every device's span once m >= 2P, at 1F1B's peak activation memory P·M_B, which the
// fullest device reaches exactly. The global makespan keeps the ramp of the first micro-batch's
// chunk-0 forwards, (P - 1) chunk forwards of T_F / 2. With m = P the span keeps that same ramp.
TEST(ZeroBubble, ZbVIsZeroBubbleAtOneFOneBMemory) {
  for (const int p : {2, 3, 4, 6, 8}) {
    for (const int m : {p, 2 * p, 3 * p, 4 * p}) {
      const std::string label = "P=" + std::to_string(p) + " m=" + std::to_string(m);
      const Plan plan = uniform_plan(zb("zb-v", p, m, {1, 1, 1}, 2));
      const double busy_us = 3.0 * m * 1e3;  // per device: two chunks of F, P1, P2 at 0.5 ms
      const double ramp_us = (p - 1) * 0.5e3;
      const double span_bubble_us = plan.sim.max_stage_span_us - busy_us;
      if (m >= 2 * p) {
        EXPECT_NEAR(span_bubble_us, 0.0, 1e-6) << label;
      } else {
        EXPECT_NEAR(span_bubble_us, ramp_us, 1e-6) << label;
      }
      EXPECT_NEAR(plan.sim.makespan_us - busy_us, ramp_us, 1e-6) << label;
      std::int64_t peak = 0;
      for (const DeviceMetrics& d : plan.sim.devices)
        peak = std::max(peak, d.peak_memory_bytes);
      EXPECT_NEAR(static_cast<double>(peak), p * kGiB, 1.0) << label;  // P·M_B, M_B = 1 GiB
    }
  }
  // Against ZB-H1 at the same memory: (P - 1)(T_F + T_B - T_W) of bubble per stage there.
  const Plan v = uniform_plan(zb("zb-v", 8, 32, {1, 1, 1}, 2));
  const Plan h1 = uniform_plan(zb("zb-h1", 8, 32, {1, 1, 1}));
  EXPECT_NEAR(h1.sim.max_stage_span_us - v.sim.max_stage_span_us, 7e3, 1e-6);
}

// The V families keep at most their cap of chunk stashes (M_B / 2 each) alive per device from a
// forward to its p2: zb-v at 1F1B's P·M_B (the published order for m >= P, the memory-capped
// greedy below), v-half about half, v-min about a third, for every m. ZB-V with F = B = W idles at
// most (P − 1)·T_F, a third of 1F1B's (P − 1)(T_F + T_B + T_W).
TEST(ZeroBubble, VShapesStayWithinTheirMemory) {
  for (const int p : {2, 4, 6, 8}) {
    for (const int m : {p, 2 * p, 4 * p}) {
      for (const char* family : {"zb-v", "v-half", "v-min"}) {
        const Plan plan = uniform_plan(zb(family, p, m, {1, 1, 1}, 2));
        const int cap = chunk_stash_cap(family, p);
        for (int d = 0; d < p; ++d)
          EXPECT_LE(peak_live_chunk_stashes(plan, d), cap) << family << " P=" << p << " m=" << m;
        for (const DeviceMetrics& d : plan.sim.devices)
          EXPECT_LE(static_cast<double>(d.peak_memory_bytes), cap * 0.5 * kGiB + 1)
              << family << " P=" << p << " m=" << m;
        EXPECT_EQ(plan.graph.schedule.stage_device[0], 0);
        EXPECT_EQ(plan.graph.schedule.stage_device[static_cast<std::size_t>(2 * p - 1)], 0);
      }
      const Plan v = uniform_plan(zb("zb-v", p, m, {1, 1, 1}, 2));
      const Plan one_f_one_b = uniform_plan({.devices = p, .microbatches = m});
      EXPECT_LE(v.sim.devices[0].peak_memory_bytes, one_f_one_b.sim.devices[0].peak_memory_bytes);
      EXPECT_LE(v.sim.makespan_us - 3.0 * m * 1e3, (p - 1) * 1e3 + 1e-6) << "P=" << p << " m=" << m;
    }
  }
  EXPECT_EQ(chunk_stash_cap("zb-v", 6), 12);
  EXPECT_EQ(chunk_stash_cap("v-half", 6), 8);
  EXPECT_EQ(chunk_stash_cap("v-min", 6), 6);
  EXPECT_EQ(chunk_stash_cap("v-min", 8), 8);
}

TEST(ZeroBubble, FamiliesThatPlaceP2RefuseFusedBackward) {
  for (const char* family : {"zb-h1", "zb-h2"}) {
    UniformPlan u = zb(family, 4, 8, {1, 1, 1});
    u.backward = BackwardMode::fused;
    try {
      uniform_plan(u);
      FAIL() << family;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "backward: schedule '" + std::string(family) +
                                           "' places p1 and p2 itself; use 2bp, got fused");
    }
  }
  try {
    uniform_plan(zb("zb-v", 4, 8, {1, 1, 1}, 3));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "chunks: schedule 'zb-v' runs exactly 2 chunks per device, got 3");
  }
}

}  // namespace
}  // namespace pipeplan
