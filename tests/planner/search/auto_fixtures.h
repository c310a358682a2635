// Helpers for the auto-schedule, lower-bound and search tests: plans built straight from a
// vector of stage costs (one stage per device), so stages can differ in time and memory.
#pragma once

#include <string>
#include <vector>

#include "planner/graph/simulator.h"
#include "planner/graph/validator.h"
#include "planner/plan/make_plan.h"
#include "planner/search/auto_schedule.h"
#include "schedules/family.h"

namespace pipeplan::testing {

constexpr double kGiBBytes = 1024.0 * 1024.0 * 1024.0;

// F/P1/P2 in us, stash/retained in GiB; p2(k) = k * p2 unless `concat_rate` < 1, then
// p2(k) = p2 * (1 + (k - 1) * concat_rate).
inline StageCost stage(double f, double p1, double p2, double stash_gib = 1.0,
                       double retained_gib = 0.5, double static_gib = 0.0, int max_k = 16,
                       double concat_rate = 1.0) {
  StageCost c;
  c.forward_us = f;
  c.p1_us = p1;
  c.p2_us = p2;
  for (int k = 1; k <= max_k; ++k)
    c.p2_concat_us.push_back(p2 * (1 + (k - 1) * concat_rate));
  c.stash_bytes = static_cast<std::int64_t>(stash_gib * kGiBBytes);
  c.retained_bytes = static_cast<std::int64_t>(retained_gib * kGiBBytes);
  c.static_bytes = static_cast<std::int64_t>(static_gib * kGiBBytes);
  return c;
}

inline PlanMeta meta_for(const std::vector<StageCost>& costs, int microbatches,
                         std::vector<double> limits = {}, double latency_us = 0) {
  PlanMeta m;
  m.model.name = "synthetic";
  m.devices = static_cast<int>(costs.size());
  m.microbatches = microbatches;
  m.seq = 1;
  m.schedule = "auto";
  m.backward = BackwardMode::twobp;
  if (limits.empty()) limits.assign(costs.size(), 0.0);
  m.memory_limit_bytes = std::move(limits);
  for (const StageCost& c : costs)
    m.static_bytes.push_back(c.static_bytes);
  m.link = P2pLink{latency_us, 0.0};
  return m;
}

struct Simulated {
  Schedule schedule;
  SimResult sim;
};

inline Simulated run_schedule(const Schedule& schedule, const std::vector<StageCost>& costs,
                              const PlanMeta& meta) {
  const TaskGraph graph = lower(schedule, costs, meta);
  validate(graph);
  return {schedule, simulate(graph)};
}

inline Simulated run_auto(const std::vector<StageCost>& costs, const PlanMeta& meta,
                          int p2_concat = 0) {
  return run_schedule(make_auto_schedule(costs, meta, BackwardMode::twobp, p2_concat).schedule,
                      costs, meta);
}

// A fixed family (one chunk per device) in one backward mode, with unlimited memory.
inline Simulated run_family(const ScheduleFamily& family, BackwardMode mode,
                            const std::vector<StageCost>& costs, const PlanMeta& meta) {
  const ScheduleRequest request{meta.devices, 1, meta.microbatches, mode, 1, nullptr};
  return run_schedule(with_backward_mode(family, family.generate(request), request, costs, meta),
                      costs, meta);
}

}  // namespace pipeplan::testing
