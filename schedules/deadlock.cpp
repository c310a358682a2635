#include "schedules/deadlock.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pipeplan {

namespace {

// (kind, stage, micro-batch): kind 0 = F, 1 = backward (B or P1), 2 = P2 of that micro-batch.
using Key = std::uint64_t;
Key key(int kind, int stage, int mb) {
  return (static_cast<Key>(kind) << 60) | (static_cast<Key>(stage) << 32) |
         static_cast<Key>(static_cast<std::uint32_t>(mb));
}

struct Input {
  Key key;
  Action action;
};

// What an op makes: a forward's activation (0), a B's or P1's input gradient (1), a P2's weight
// gradient (2).
int output_kind(OpType op) {
  return op == OpType::F ? 0 : op == OpType::P2 ? 2 : 1;
}

// The inputs of `a` that another action produces, in the order they are checked.
std::vector<Input> inputs(const Action& a, const Schedule& schedule) {
  std::vector<Input> out;
  for (Action& in : action_inputs(a, schedule)) {
    const Key k = key(output_kind(in.op), in.stage, in.microbatches.front());
    out.push_back({k, std::move(in)});
  }
  return out;
}

std::vector<Key> outputs(const Action& a) {
  std::vector<Key> out;
  for (const int mb : a.microbatches) {
    out.push_back(key(output_kind(a.op), a.stage, mb));
  }
  return out;
}

}  // namespace

// A micro-batch flows from its first stage to its last (Schedule::first_stage_of, last_stage_of).
std::vector<Action> action_inputs(const Action& a, const Schedule& schedule) {
  std::vector<Action> out;
  for (const int mb : a.microbatches) {
    switch (a.op) {
      case OpType::F:
        if (a.stage > schedule.first_stage_of(mb)) out.push_back({OpType::F, a.stage - 1, {mb}});
        break;
      case OpType::B:
      case OpType::P1:
        out.push_back({OpType::F, a.stage, {mb}});
        if (a.stage < schedule.last_stage_of(mb)) out.push_back({OpType::P1, a.stage + 1, {mb}});
        break;
      case OpType::P2:
        out.push_back({OpType::P1, a.stage, {mb}});
        break;
      case OpType::O:  // never in a schedule (check_schedule refuses it)
        break;
    }
  }
  return out;
}

bool produces(const Action& producer, const Action& input) {
  const int mb = input.microbatches.front();
  return producer.stage == input.stage && output_kind(producer.op) == output_kind(input.op) &&
         std::find(producer.microbatches.begin(), producer.microbatches.end(), mb) !=
             producer.microbatches.end();
}

std::optional<Deadlock> find_deadlock(const Schedule& schedule,
                                      const std::vector<std::vector<int>>* starts_together) {
  const int devices = schedule.devices;
  // Where each output is produced: (device, position).
  std::unordered_map<Key, std::pair<int, int>> producer;
  for (int d = 0; d < devices; ++d) {
    const auto& actions = schedule.per_device[static_cast<std::size_t>(d)];
    for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
      for (const Key k : outputs(actions[static_cast<std::size_t>(i)]))
        producer[k] = {d, i};
    }
  }
  std::unordered_map<Key, char> done;
  std::vector<int> head(static_cast<std::size_t>(devices), 0);
  std::vector<std::optional<Input>> blocked(static_cast<std::size_t>(devices));
  std::unordered_map<Key, std::vector<int>> waiting;  // output -> devices stuck on it
  std::deque<int> ready;
  for (int d = 0; d < devices; ++d)
    ready.push_back(d);
  while (!ready.empty()) {
    const int d = ready.front();
    ready.pop_front();
    const auto& actions = schedule.per_device[static_cast<std::size_t>(d)];
    auto& at = head[static_cast<std::size_t>(d)];
    blocked[static_cast<std::size_t>(d)].reset();
    while (at < static_cast<int>(actions.size())) {
      // An overlapped pair starts when the inputs of both its actions are there; so does a
      // group that starts together, of all its actions.
      const bool pair = actions[static_cast<std::size_t>(at)].overlaps_next &&
                        at + 1 < static_cast<int>(actions.size());
      int together = 1;
      if (starts_together != nullptr && static_cast<std::size_t>(d) < starts_together->size()) {
        const std::vector<int>& groups = (*starts_together)[static_cast<std::size_t>(d)];
        if (static_cast<std::size_t>(at) < groups.size())
          together = std::max(1, groups[static_cast<std::size_t>(at)]);
      }
      const int count =
          std::min(std::max(pair ? 2 : 1, together), static_cast<int>(actions.size()) - at);
      std::optional<Input> missing;
      for (int i = 0; i < count && !missing; ++i) {
        for (const Input& in : inputs(
                 actions[static_cast<std::size_t>(at) + static_cast<std::size_t>(i)], schedule)) {
          if (!done.contains(in.key)) {
            missing = in;
            break;
          }
        }
      }
      if (missing) {
        waiting[missing->key].push_back(d);
        blocked[static_cast<std::size_t>(d)] = missing;
        break;
      }
      for (int i = 0; i < count; ++i) {
        for (const Key k :
             outputs(actions[static_cast<std::size_t>(at) + static_cast<std::size_t>(i)])) {
          done[k] = 1;
          if (auto it = waiting.find(k); it != waiting.end()) {
            for (const int other : it->second)
              ready.push_back(other);
            waiting.erase(it);
          }
        }
      }
      at += count;
    }
  }
  // A stuck device's input is produced by a device stuck before it: follow them to a cycle.
  int start = -1;
  for (int d = 0; d < devices && start < 0; ++d) {
    if (blocked[static_cast<std::size_t>(d)]) start = d;
  }
  if (start < 0) return std::nullopt;
  std::vector<int> visit_order(static_cast<std::size_t>(devices), -1);
  std::vector<DeadlockStep> path;
  int d = start;
  while (visit_order[static_cast<std::size_t>(d)] < 0) {
    visit_order[static_cast<std::size_t>(d)] = static_cast<int>(path.size());
    const Input& in = *blocked[static_cast<std::size_t>(d)];
    const auto [next, position] = producer.at(in.key);
    path.push_back({d, head[static_cast<std::size_t>(d)], in.action, position});
    d = next;
    if (!blocked[static_cast<std::size_t>(d)]) return std::nullopt;  // cannot happen: d is stuck
  }
  Deadlock deadlock;
  deadlock.steps.assign(path.begin() + visit_order[static_cast<std::size_t>(d)], path.end());
  return deadlock;
}

}  // namespace pipeplan
