#include "planner/search/auto_moves.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "planner/base/error.h"
#include "planner/graph/schedule_sim.h"
#include "schedules/schedule.h"

namespace pipeplan {

namespace {

// -1: a ranks before b on the objective's two figures, 1: after, 0: equal within rounding.
int compare_figures(const AutoScore& a, const AutoScore& b, Objective objective) {
  const double first_a = objective == Objective::step ? a.makespan_us : a.span_us;
  const double first_b = objective == Objective::step ? b.makespan_us : b.span_us;
  const double second_a = objective == Objective::step ? a.span_us : a.makespan_us;
  const double second_b = objective == Objective::step ? b.span_us : b.makespan_us;
  const double tol = 1e-9 * std::max(1.0, std::isfinite(first_b) ? first_b : 1.0);
  if (first_a < first_b - tol) return -1;
  if (first_a > first_b + tol) return 1;
  if (second_a < second_b - tol) return -1;
  if (second_a > second_b + tol) return 1;
  return 0;
}

bool smaller_sum(const AutoScore& a, const AutoScore& b) {
  const double tol = 1e-9 * std::max(1.0, std::isfinite(b.makespan_us) ? b.makespan_us : 1.0);
  return a.sum_last_end_us < b.sum_last_end_us - tol;
}

}  // namespace

bool better(const AutoScore& a, const AutoScore& b, Objective objective) {
  const int order = compare_figures(a, b, objective);
  return order != 0 ? order < 0 : smaller_sum(a, b);
}

bool preferred(const AutoScore& a, const AutoScore& b, Objective objective) {
  const int order = compare_figures(a, b, objective);
  if (order != 0) return order < 0;
  if (a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
  return smaller_sum(a, b);
}

std::optional<AutoEval> evaluate_order(const Schedule& schedule, const EvalContext& context,
                                       bool keep_times, std::string& first_error) {
  ScheduleSim sim = simulate_schedule(schedule, *context.costs, *context.meta,
                                      {.keep_times = keep_times, .check_memory = true});
  if (!sim.ok) {
    if (first_error.empty())
      first_error = (sim.memory_ok ? "" : field_name("memory_limit_bytes") + ": ") + sim.error;
    return std::nullopt;
  }
  double peak = 0;
  for (const std::int64_t bytes : sim.peak_memory_bytes)
    peak = std::max(peak, static_cast<double>(bytes));
  return AutoEval{{sim.makespan_us, sim.max_stage_span_us, sim.sum_last_end_us, peak},
                  std::move(sim.times)};
}

namespace {

// Whether swapping actions a (earlier) and b (later) of one device keeps every (stage,
// micro-batch)'s F before its P1/B and its P1 before its P2.
bool may_swap(const Action& a, const Action& b) {
  if (a.stage != b.stage) return true;
  for (const int x : a.microbatches)
    for (const int y : b.microbatches)
      if (x == y) return false;
  return true;
}

// Whether position i of a device's order holds the second action of an overlapped pair.
bool pair_second(const std::vector<Action>& actions, std::size_t i) {
  return i > 0 && i < actions.size() && actions[i - 1].overlaps_next;
}

// Undoes move_action(actions, from, length, to) (below) that moved the actions.
void undo_move(std::vector<Action>& actions, std::size_t from, std::size_t length, std::size_t to) {
  const auto at = [&](std::size_t i) { return actions.begin() + static_cast<std::ptrdiff_t>(i); };
  if (to < from) {
    std::rotate(at(to), at(to + length), at(from + length));
  } else {
    std::rotate(at(from), at(to + 1 - length), at(to + 1));
  }
}

// Moves `length` actions of a device that start at `from` (one, or an overlapped pair as a whole:
// its F and the B or P1 after it) so that they start at `to` when moved earlier, or end at `to`
// when moved later; the actions between shift. False, with nothing changed, when `to` lies
// inside the moved actions, when the move would put an action before one of its own
// micro-batch's earlier ops (F -> P1 -> P2) on this device, or when it would leave an overlapped
// pair out of check_schedule's form (an action moved in between a pair's two, a pair's F moved
// away from its backward).
bool move_action(std::vector<Action>& actions, std::size_t from, std::size_t length,
                 std::size_t to) {
  if (length == 0 || from + length > actions.size() || to >= actions.size()) return false;
  const std::size_t last = from + length - 1;
  if (to >= from && to <= last) return false;
  const bool earlier = to < from;
  const std::size_t lo = earlier ? to : last + 1, hi = earlier ? from : to + 1;  // crossed
  for (std::size_t k = lo; k < hi; ++k) {
    for (std::size_t u = from; u <= last; ++u) {
      if (!may_swap(earlier ? actions[k] : actions[u], earlier ? actions[u] : actions[k]))
        return false;
    }
  }
  const auto at = [&](std::size_t i) { return actions.begin() + static_cast<std::ptrdiff_t>(i); };
  if (earlier) {
    std::rotate(at(to), at(from), at(last + 1));
  } else {
    std::rotate(at(from), at(last + 1), at(to + 1));
  }
  // The positions whose action or next action changed: a pair there must still be one.
  const std::size_t first_changed = earlier ? to : from, last_changed = earlier ? last : to;
  for (std::size_t k = first_changed > 0 ? first_changed - 1 : 0; k <= last_changed; ++k) {
    if (overlapped_pair_fault(actions, static_cast<int>(k))) {
      undo_move(actions, from, length, to);
      return false;
    }
  }
  return true;
}

// Position of the action on `device` that produces the input `a` waits for: the forward of the
// same micro-batch one stage up (for an F) or its input gradient one stage down (for a P1 or B);
// nullopt for an input produced on the same device.
std::optional<std::pair<std::size_t, std::size_t>> producer_of(const Schedule& schedule,
                                                               const Action& a) {
  int stage = -1;
  OpType op = OpType::F;
  if (a.op == OpType::F) {
    stage = a.stage - 1;
  } else if (a.op == OpType::P1 || a.op == OpType::B) {
    stage = a.stage + 1;
    op = a.op;
  }
  if (stage < 0 || stage >= static_cast<int>(schedule.stage_device.size())) return std::nullopt;
  const auto d = static_cast<std::size_t>(schedule.stage_device[static_cast<std::size_t>(stage)]);
  const std::vector<Action>& actions = schedule.per_device[d];
  for (std::size_t q = 0; q < actions.size(); ++q) {
    const Action& x = actions[q];
    const bool kind = op == OpType::F ? x.op == OpType::F : x.op == OpType::P1 || x.op == OpType::B;
    if (x.stage == stage && kind && x.microbatches == a.microbatches) return std::make_pair(d, q);
  }
  return std::nullopt;
}

// An idle gap on a device's compute stream: `length` us before its action at `position`.
struct Gap {
  double length = 0;
  std::size_t device = 0, position = 0;
};

std::vector<Gap> idle_gaps(const AutoEval& e) {
  std::vector<Gap> gaps;
  for (std::size_t d = 0; d < e.times.size(); ++d) {
    double previous_end = 0;
    for (std::size_t i = 0; i < e.times[d].size(); ++i) {
      const double idle = e.times[d][i].start_us - previous_end;
      if (idle > 1e-9 * std::max(1.0, previous_end)) gaps.push_back({idle, d, i});
      previous_end = e.times[d][i].end_us;
    }
  }
  // Longest gap first; ties by device, then position (deterministic).
  std::stable_sort(gaps.begin(), gaps.end(),
                   [](const Gap& x, const Gap& y) { return x.length > y.length; });
  return gaps;
}

// One candidate move: `length` actions of `device` at `from` (an action, or an overlapped pair)
// go to `to`.
struct Move {
  std::size_t device = 0, from = 0, to = 0, length = 1;
};

// Moves aimed at the measured idle gaps, longest gap first: fill the gap with one of the next
// kMaxShift actions of the same device (e.g. a P2 or a forward whose input is already there), or
// pull the action that produces the waiting input one to kMaxShift places earlier on its device;
// an action of an overlapped pair also with its partner, as a whole.
std::vector<Move> gap_moves(const Schedule& schedule, const AutoEval& e) {
  constexpr std::size_t kMaxShift = 4;
  std::vector<Move> moves;
  for (const Gap& g : idle_gaps(e)) {
    const std::vector<Action>& actions = schedule.per_device[g.device];
    // The times end with the optimizer step's, no action: with two copies of the model it waits
    // for the other copy's gradients, a gap before no action to move.
    if (g.position >= actions.size()) continue;
    for (std::size_t j = g.position + 1; j <= g.position + kMaxShift && j < actions.size(); ++j) {
      moves.push_back({g.device, j, g.position, 1});
      if (actions[j].overlaps_next) moves.push_back({g.device, j, g.position, 2});
    }
    if (const auto producer = producer_of(schedule, actions[g.position])) {
      const auto [d, q] = *producer;
      const std::vector<Action>& on = schedule.per_device[d];
      const std::size_t pair = pair_second(on, q) ? q - 1 : q;  // the pair's F
      const bool paired = on[pair].overlaps_next;
      for (std::size_t shift = 1; shift <= kMaxShift && shift <= q; ++shift) {
        moves.push_back({d, q, q - shift, 1});
        if (paired && shift <= pair) moves.push_back({d, pair, pair - shift, 2});
      }
    }
  }
  return moves;
}

// Hill climbing in two neighbourhoods, each move lowered, validated (memory limits) and simulated,
// the first improving move taken:
//  1. gap moves (gap_moves above), recomputed from the new timeline after every accepted move;
//  2. when none improves, every action of every device one to kMaxShift positions earlier or
//     later (an adjacent swap is a shift by one), and every overlapped pair as a whole; after an
//     accepted move, back to 1.
// A move that breaks a pair's form is not tried (move_action), so every order evaluated has
// check_schedule's pairs, as many as the start.
// Ends when neither improves or `budget` evaluations are spent.
}  // namespace

int improve_by_moves(Schedule& schedule, AutoEval& current, const EvalContext& context,
                     std::string& first_error, int& budget) {
  constexpr std::size_t kMaxShift = 4;
  int accepted = 0;
  const auto try_move = [&](const Move& mv) {
    if (budget <= 0) return false;
    std::vector<Action>& actions = schedule.per_device[mv.device];
    if (!move_action(actions, mv.from, mv.length, mv.to)) return false;
    --budget;
    std::optional<AutoEval> e = evaluate_order(schedule, context, true, first_error);
    if (e && better(e->score, current.score, context.objective)) {
      current = std::move(*e);
      ++accepted;
      return true;
    }
    undo_move(actions, mv.from, mv.length, mv.to);
    return false;
  };
  while (budget > 0) {
    bool improved = false;
    for (const Move& mv : gap_moves(schedule, current)) {
      if (budget <= 0) break;
      if ((improved = try_move(mv))) break;
    }
    if (improved) continue;
    for (std::size_t d = 0; d < schedule.per_device.size() && !improved && budget > 0; ++d) {
      const std::vector<Action>& actions = schedule.per_device[d];
      for (std::size_t i = 0; i < actions.size() && !improved && budget > 0; ++i) {
        const bool paired = actions[i].overlaps_next;
        for (std::size_t shift = 1; shift <= kMaxShift && !improved && budget > 0; ++shift) {
          improved =
              (i >= shift && try_move({d, i, i - shift, 1})) || try_move({d, i, i + shift, 1});
          if (paired && !improved) {
            improved = (i >= shift && try_move({d, i, i - shift, 2})) ||
                       try_move({d, i, i + 1 + shift, 2});
          }
        }
      }
    }
    if (!improved) break;
  }
  return accepted;
}

}  // namespace pipeplan
