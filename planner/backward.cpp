#include "planner/backward.h"

#include <algorithm>
#include <deque>

#include "planner/error.h"
#include "planner/simulator.h"

namespace pipeplan {

namespace {

// The deferred p2s of one device, appended at the end of its list: stage by stage in the order
// their last p1 ran, micro-batches in p1 order, grouped `p2_concat` at a time (0: all).
void append_deferred_p2(std::vector<Action>& actions, const std::vector<Action>& pending,
                        int p2_concat) {
  std::vector<int> stage_order;
  for (const Action& a : pending) {
    std::erase(stage_order, a.stage);
    stage_order.push_back(a.stage);  // ends up ordered by each stage's last p1
  }
  for (const int stage : stage_order) {
    Action group{OpType::P2, stage, {}};
    for (const Action& a : pending) {
      if (a.stage != stage) continue;
      group.microbatches.push_back(a.microbatches.front());
      if (p2_concat > 0 && static_cast<int>(group.microbatches.size()) == p2_concat) {
        actions.push_back(group);
        group.microbatches.clear();
      }
    }
    if (!group.microbatches.empty()) actions.push_back(group);
  }
}

void check_concat(int p2_concat) {
  if (p2_concat < 0) throw Error("--p2-concat: must be 0 (all) or a positive count");
}

}  // namespace

Schedule apply_backward_mode(const Schedule& fused_schedule, BackwardMode mode, int p2_concat) {
  check_concat(p2_concat);
  Schedule out = fused_schedule;
  out.backward = mode;
  if (mode == BackwardMode::fused) return out;
  if (mode == BackwardMode::twobp_fill) {
    throw Error("apply_backward_mode: 2bp-fill needs stage costs (use fill_p2_into_gaps)");
  }
  for (auto& actions : out.per_device) {
    std::vector<Action> pending;
    for (Action& a : actions) {
      if (a.op != OpType::B) continue;
      a.op = OpType::P1;
      pending.push_back(Action{OpType::P2, a.stage, a.microbatches});
    }
    append_deferred_p2(actions, pending, p2_concat);
  }
  return out;
}

Schedule fill_p2_into_gaps(const Schedule& fused_schedule, const std::vector<StageCost>& costs,
                           const PlanMeta& meta, int p2_concat) {
  check_concat(p2_concat);
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
