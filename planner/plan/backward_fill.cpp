#include "planner/plan/backward_fill.h"

#include <deque>
#include <map>

#include "planner/base/error.h"
#include "planner/graph/schedule_sim.h"
#include "schedules/backward.h"

namespace pipeplan {

Schedule fill_p2_into_gaps(const Schedule& fused_schedule, const std::vector<StageCost>& costs,
                           const PlanMeta& meta, int p2_concat) {
  check_p2_concat(p2_concat);
  // Simulate with every p2 deferred; a p2 placed into an idle gap that it fits entirely cannot
  // move anything else (other devices only see this device's F/P1 and its communication, which
  // keep their times), so one pass over the simulated gaps is exact.
  const Schedule deferred = apply_backward_mode(fused_schedule, BackwardMode::twobp, 1);
  const ScheduleSim sim =
      simulate_schedule(deferred, costs, meta, {.keep_times = true, .check_memory = false});
  if (!sim.ok) throw InternalError("2bp-fill cannot simulate the 2bp order: " + sim.error);

  Schedule out = fused_schedule;
  out.backward = BackwardMode::twobp_fill;
  for (int d = 0; d < out.devices; ++d) {
    const auto dd = static_cast<std::size_t>(d);
    const std::vector<Action>& order = deferred.per_device[dd];
    std::vector<Action> actions;
    actions.reserve(order.size());
    std::deque<Action> pending;
    std::map<double, int> pending_times;  // p2 time -> how many pending p2 take it
    double now = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const Action& a = order[i];
      if (a.op == OpType::P2) continue;
      const double start = sim.times[dd][i].start_us;
      // First fit, oldest first, into the gap before this op (none fits when the shortest
      // pending p2 does not).
      for (auto it = pending.begin(); it != pending.end() && !pending_times.empty() &&
                                      now + pending_times.begin()->first <= start + 1e-9;) {
        const double t = costs[static_cast<std::size_t>(it->stage)].p2_time_us(1);
        if (now + t <= start + 1e-9) {
          actions.push_back(*it);
          now += t;
          it = pending.erase(it);
          if (--pending_times[t] == 0) pending_times.erase(t);
        } else {
          ++it;
        }
      }
      actions.push_back(a);
      now = sim.times[dd][i].end_us;
      if (a.op == OpType::P1) {
        pending.push_back(Action{OpType::P2, a.stage, a.microbatches});
        ++pending_times[costs[static_cast<std::size_t>(a.stage)].p2_time_us(1)];
      }
    }
    append_deferred_p2(actions, {pending.begin(), pending.end()}, p2_concat);
    out.per_device[static_cast<std::size_t>(d)] = std::move(actions);
  }
  return out;
}

}  // namespace pipeplan
