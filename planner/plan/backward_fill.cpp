#include "planner/plan/backward_fill.h"

#include <deque>

#include "planner/base/error.h"
#include "planner/graph/simulator.h"
#include "schedules/backward.h"

namespace pipeplan {

Schedule fill_p2_into_gaps(const Schedule& fused_schedule, const std::vector<StageCost>& costs,
                           const PlanMeta& meta, int p2_concat) {
  check_p2_concat(p2_concat);
  // Simulate with every p2 deferred; a p2 placed into an idle gap that it fits entirely cannot
  // move anything else (other devices only see this device's F/P1 and its communication, which
  // keep their times), so one pass over the simulated gaps is exact.
  const Schedule deferred = apply_backward_mode(fused_schedule, BackwardMode::twobp, 1);
  PlanMeta probe_meta = meta;
  probe_meta.memory_limit_bytes.assign(static_cast<std::size_t>(meta.devices), 0.0);
  const TaskGraph probe = lower(deferred, costs, probe_meta);
  const SimResult sim = simulate(probe);

  Schedule out = fused_schedule;
  out.backward = BackwardMode::twobp_fill;
  const int compute_stream_count = static_cast<int>(probe.streams().size());
  for (int d = 0; d < out.devices; ++d) {
    int stream = -1;
    for (int s = 0; s < compute_stream_count; ++s) {
      const Stream& st = probe.streams()[static_cast<std::size_t>(s)];
      if (st.device == d && st.role == StreamRole::compute) stream = s;
    }
    std::vector<Action> actions;
    std::deque<Action> pending;
    double now = 0;
    for (const int id : probe.stream_order(stream)) {
      const Node& n = probe.node(id);
      if (n.op == OpType::P2) continue;
      const double start = sim.times[static_cast<std::size_t>(id)].start_us;
      // First fit, oldest first, into the gap before this op.
      for (auto it = pending.begin(); it != pending.end();) {
        const double t = costs[static_cast<std::size_t>(it->stage)].p2_time_us(1);
        if (now + t <= start + 1e-9) {
          actions.push_back(*it);
          now += t;
          it = pending.erase(it);
        } else {
          ++it;
        }
      }
      actions.push_back(Action{n.op, n.stage, n.microbatches});
      now = sim.times[static_cast<std::size_t>(id)].end_us;
      if (n.op == OpType::P1) pending.push_back(Action{OpType::P2, n.stage, n.microbatches});
    }
    append_deferred_p2(actions, {pending.begin(), pending.end()}, p2_concat);
    out.per_device[static_cast<std::size_t>(d)] = std::move(actions);
  }
  return out;
}

}  // namespace pipeplan
