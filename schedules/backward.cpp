#include "schedules/backward.h"

#include <algorithm>

#include "planner/base/error.h"

namespace pipeplan {

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

void check_p2_concat(int p2_concat) {
  if (p2_concat < 0) throw FieldError("p2_concat", "must be 0 (all) or a positive count");
}

Schedule apply_backward_mode(const Schedule& fused_schedule, BackwardMode mode, int p2_concat) {
  check_p2_concat(p2_concat);
  Schedule out = fused_schedule;
  out.backward = mode;
  if (mode == BackwardMode::fused) return out;
  if (mode == BackwardMode::twobp_fill) {
    throw Error("apply_backward_mode: 2bp-fill needs stage costs (planner/plan/backward_fill.h)");
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

}  // namespace pipeplan
