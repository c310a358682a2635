// The compact schedule simulation (planner/graph/schedule_sim.h) against lower() + validate() +
// simulate() on every registered family (auto excepted: it is built by make_plan) in every
// backward mode it takes, with random stage costs, concatenation tables, memory deltas, link
// latency and bandwidth: the same times per action, spans, busy time and peak memory, and the
// same verdict on memory limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "planner/base/error.h"
#include "planner/graph/schedule_sim.h"
#include "planner/graph/simulator.h"
#include "planner/graph/validator.h"
#include "planner/plan/make_plan.h"
#include "schedules/family.h"

namespace pipeplan {
namespace {

std::vector<StageCost> random_costs(std::mt19937& rng, int stages) {
  std::uniform_real_distribution<double> time(0.2, 2.0);
  std::uniform_int_distribution<std::int64_t> bytes(1, 1 << 20);
  std::vector<StageCost> costs;
  for (int s = 0; s < stages; ++s) {
    StageCost c;
    c.forward_us = time(rng);
    c.p1_us = time(rng);
    c.p2_us = time(rng);
    const double rate = std::uniform_real_distribution<double>(0.3, 1.0)(rng);
    for (int k = 1; k <= 4; ++k)
      c.p2_concat_us.push_back(c.p2_us * (1 + (k - 1) * rate));
    c.stash_bytes = bytes(rng);
    c.retained_bytes = bytes(rng);  // above or below the stash: p1 grows or shrinks memory
    c.static_bytes = bytes(rng);
    c.send_bytes = bytes(rng);
    if (s % 3 == 0) c.optimizer_us = time(rng);  // an optimizer step on some devices
    if (s % 2 == 1) {  // working memory on every other stage: held only while an op runs
      c.forward_work_bytes = bytes(rng);
      c.p1_work_bytes = bytes(rng);
      c.fused_work_bytes = bytes(rng);
      for (int k = 1; k <= 4; ++k)
        c.p2_work_bytes.push_back(bytes(rng) / 4 * k);
    }
    costs.push_back(c);
  }
  return costs;
}

PlanMeta random_meta(std::mt19937& rng, const Schedule& schedule,
                     const std::vector<StageCost>& costs) {
  PlanMeta meta;
  meta.devices = schedule.devices;
  meta.microbatches = schedule.microbatches;
  meta.static_bytes.assign(static_cast<std::size_t>(schedule.devices), 0);
  for (int s = 0; s < schedule.stage_count(); ++s) {
    meta.static_bytes[static_cast<std::size_t>(
        schedule.stage_device[static_cast<std::size_t>(s)])] +=
        costs[static_cast<std::size_t>(s)].static_bytes;
  }
  meta.memory_limit_bytes.assign(static_cast<std::size_t>(schedule.devices), 0.0);
  meta.link.latency_us = std::uniform_real_distribution<double>(0, 0.3)(rng);
  // 0: pure latency; else 1 MiB takes 0.1 to 2 us, so transfers queue on a link.
  const double bandwidth = std::uniform_real_distribution<double>(0, 10)(rng);
  meta.link.bandwidth_GBps = bandwidth < 1 ? 0.0 : bandwidth;
  return meta;
}

void expect_same(const Schedule& schedule, const std::vector<StageCost>& costs,
                 const PlanMeta& meta, const std::string& label) {
  const TaskGraph graph = lower(schedule, costs, meta);
  ASSERT_FALSE(find_violation(graph)) << label;
  const SimResult sim = simulate(graph);
  const ScheduleSim fast = simulate_schedule(schedule, costs, meta, {.keep_times = true});
  ASSERT_TRUE(fast.ok) << label << ": " << fast.error;
  EXPECT_DOUBLE_EQ(fast.makespan_us, sim.makespan_us) << label;
  EXPECT_DOUBLE_EQ(fast.max_stage_span_us, sim.max_stage_span_us) << label;
  EXPECT_DOUBLE_EQ(fast.bubble_ratio, sim.bubble_ratio) << label;
  EXPECT_DOUBLE_EQ(fast.span_bubble_ratio, sim.span_bubble_ratio) << label;
  for (int d = 0; d < schedule.devices; ++d) {
    const auto dd = static_cast<std::size_t>(d);
    EXPECT_EQ(fast.peak_memory_bytes[dd], sim.devices[dd].peak_memory_bytes) << label << " " << d;
    EXPECT_DOUBLE_EQ(fast.busy_us[dd], sim.devices[dd].busy_us) << label << " " << d;
    EXPECT_DOUBLE_EQ(fast.first_start_us[dd], sim.devices[dd].first_start_us) << label;
    EXPECT_DOUBLE_EQ(fast.last_end_us[dd], sim.devices[dd].last_end_us) << label;
  }
  // The order alone gives the same peaks (an overlapped pair's memory counted together).
  EXPECT_EQ(schedule_peak_memory(schedule, costs, meta), fast.peak_memory_bytes) << label;
  // Every action's times, in each device's order (the compute stream's order).
  for (std::size_t st = 0; st < graph.streams().size(); ++st) {
    const Stream& stream = graph.streams()[st];
    if (stream.role != StreamRole::compute) continue;
    const std::vector<int>& order = graph.stream_order(static_cast<int>(st));
    const auto& times = fast.times[static_cast<std::size_t>(stream.device)];
    ASSERT_EQ(order.size(), times.size()) << label;
    for (std::size_t i = 0; i < order.size(); ++i) {
      EXPECT_DOUBLE_EQ(times[i].start_us, sim.times[static_cast<std::size_t>(order[i])].start_us)
          << label << " device " << stream.device << " action " << i;
    }
  }
  // A limit just under the largest peak: both refuse it.
  PlanMeta tight = meta;
  const auto peak = std::max_element(fast.peak_memory_bytes.begin(), fast.peak_memory_bytes.end());
  const auto device = static_cast<std::size_t>(peak - fast.peak_memory_bytes.begin());
  tight.memory_limit_bytes[device] = static_cast<double>(*peak) - 1;
  const ScheduleSim refused = simulate_schedule(schedule, costs, tight);
  EXPECT_FALSE(refused.ok) << label;
  EXPECT_FALSE(refused.memory_ok) << label;
  EXPECT_TRUE(find_violation(lower(schedule, costs, tight))) << label;
  tight.memory_limit_bytes[device] = static_cast<double>(*peak);
  EXPECT_TRUE(simulate_schedule(schedule, costs, tight).ok) << label;
}

// Every registered family (auto excepted) at several shapes, in every backward mode it takes,
// with random costs and links: `check(schedule, costs, meta, label)` on each; returns how many.
int for_every_family(std::mt19937& rng,
                     const std::function<void(const Schedule&, const std::vector<StageCost>&,
                                              PlanMeta&, const std::string&)>& check) {
  int checked = 0;
  for (const ScheduleFamily* family : schedule_families()) {
    if (family->traits().needs_costs) continue;
    const ChunkRule& rule = family->traits().chunks;
    for (const int p : {1, 2, 3, 4, 6}) {
      for (int v = rule.min; v <= std::min(rule.max, 3); ++v) {
        for (const int m : {1, p, 2 * p + 1, 3 * p}) {
          ScheduleRequest request{p, v, m, std::nullopt, 2, nullptr};
          Schedule generated;
          try {
            generated = family->generate(request);
          } catch (const Error&) {
            continue;  // a shape the family does not take
          }
          const std::vector<StageCost> costs = random_costs(rng, p * v);
          PlanMeta meta = random_meta(rng, generated, costs);
          for (const BackwardMode mode : family->backward_modes()) {
            request.backward = mode;
            const Schedule s = with_backward_mode(*family, generated, request, costs, meta);
            check(s, costs, meta,
                  family->name() + " " + std::string(to_string(mode)) + " P=" + std::to_string(p) +
                      " V=" + std::to_string(v) + " m=" + std::to_string(m));
            ++checked;
          }
        }
      }
    }
  }
  return checked;
}

TEST(ScheduleSim, MatchesTheTaskGraphSimulatorOnEveryFamily) {
  std::mt19937 rng(1414);
  const int checked = for_every_family(
      rng, [](const Schedule& s, const std::vector<StageCost>& costs, PlanMeta& meta,
              const std::string& label) { expect_same(s, costs, meta, label); });
  EXPECT_GT(checked, 300);
}

// Separate GPUs under a sustained-load model (a sustained term without a curve, random factor
// and time constant from a fraction of an op to many steps): each device's own load, the
// periodic start included, gives the simulator's times.
TEST(ScheduleSim, MatchesTheSimulatorUnderASustainedLoadOnSeparateGpus) {
  std::mt19937 rng(2718);
  std::uniform_real_distribution<double> factor(0, 3);
  std::uniform_real_distribution<double> log_tau(std::log(0.3), std::log(300.0));
  const int checked =
      for_every_family(rng, [&](const Schedule& s, const std::vector<StageCost>& costs,
                                PlanMeta& meta, const std::string& label) {
        const SustainedLoad load{.factor = factor(rng), .time_constant_us = std::exp(log_tau(rng))};
        meta.contention.sustained = load;
        expect_same(s, costs, meta,
                    label + " factor " + std::to_string(load.factor) + " tau " +
                        std::to_string(load.time_constant_us));
        // The term lengthens the step (some devices compute from the start).
        PlanMeta plain = meta;
        plain.contention = {};
        if (load.factor > 0.1) {
          EXPECT_GT(simulate_schedule(s, costs, meta).makespan_us,
                    simulate_schedule(s, costs, plain).makespan_us)
              << label;
        }
      });
  EXPECT_GT(checked, 300);
}

TEST(ScheduleSim, RefusesAnOrderThatCannotRun) {
  ScheduleRequest request{2, 1, 2, std::nullopt, 1, nullptr};
  Schedule s = generate_schedule("1f1b", request);
  std::swap(s.per_device[1][0], s.per_device[1][1]);  // 1B0 before 1F0
  std::vector<StageCost> costs(2);
  PlanMeta meta;
  meta.devices = 2;
  const ScheduleSim r = simulate_schedule(s, costs, meta);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.memory_ok);
  EXPECT_NE(r.error.find("waits forever"), std::string::npos) << r.error;
}

// An overlapped pair holds both actions' allocations and working memory at once: with working
// memory far above the stashes, the pair is each device's peak, and the order alone gives it.
TEST(ScheduleSim, PeakMemoryOfTheOrderCountsAnOverlappedPairAtOnce) {
  ScheduleRequest request{4, 2, 16, BackwardMode::twobp, 1, nullptr};
  const Schedule s = generate_schedule("dualpipe-v", request);
  std::vector<StageCost> costs(8);
  for (StageCost& c : costs) {
    c.forward_us = c.p1_us = c.p2_us = 1;
    c.stash_bytes = c.retained_bytes = 1;
    c.forward_work_bytes = c.p1_work_bytes = c.fused_work_bytes = 1000;
  }
  PlanMeta meta;
  meta.devices = 4;
  meta.static_bytes.assign(4, 7);
  int pairs = 0;
  for (const std::vector<Action>& actions : s.per_device)
    pairs += static_cast<int>(std::count_if(actions.begin(), actions.end(),
                                            [](const Action& a) { return a.overlaps_next; }));
  ASSERT_GT(pairs, 0);
  const ScheduleSim sim = simulate_schedule(s, costs, meta);
  ASSERT_TRUE(sim.ok) << sim.error;
  const std::vector<std::int64_t> peaks = schedule_peak_memory(s, costs, meta);
  EXPECT_EQ(peaks, sim.peak_memory_bytes);
  for (const std::int64_t peak : peaks) {
    EXPECT_GT(peak, 7 + 2000);  // a pair's two working memories
    EXPECT_LT(peak, 7 + 2000 + 100);
  }
}

}  // namespace
}  // namespace pipeplan
