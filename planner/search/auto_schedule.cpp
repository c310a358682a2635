#include "planner/search/auto_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <utility>

#include "planner/base/error.h"
#include "planner/graph/evaluate.h"
#include "planner/graph/simulator.h"
#include "planner/graph/validator.h"
#include "planner/plan/lower_bound.h"
#include "planner/plan/make_plan.h"
#include "schedules/family.h"

namespace pipeplan {

double boundary_transfer_us(const P2pLink& link, const StageCost& sender) {
  return transfer_time_us(link, sender.send_bytes);
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Fill { fit, always };

// One heuristic variant: the warm-up depth cap of device d is ceil(depth_factor * (P - d))
// micro-batches in flight (0: only memory limits it); `fill` says whether a P2 may start in an
// idle gap it does not fit (delaying the next arrival) or only in one it fits.
struct Variant {
  double depth_factor = 0;
  Fill fill = Fill::fit;
  bool split = true;  // false: fused B (p2 right after p1), tried where split does not fit
  std::string name() const {
    std::string depth = "memory";
    if (depth_factor > 0) {
      depth = std::to_string(depth_factor);
      depth = depth.substr(0, depth.find('.') + 2) + "x";
    }
    if (!split) return "depth=" + depth + " fused";
    return "depth=" + depth + " fill=" + (fill == Fill::fit ? "fit" : "always");
  }
};

enum class Kind { wait, forward, p1, p2 };

struct Decision {
  double start = kInf;
  Kind kind = Kind::wait;
  int group = 1;  // P2 group size
};

struct DeviceState {
  double free_at = 0;
  int next_f = 0;
  int inflight = 0;  // forwarded, P1 not yet run
  int backward_done = 0;
  std::int64_t memory = 0;  // static + activations, in the validator's order semantics
  double send_forward_free = 0, send_backward_free = 0;
  std::deque<std::pair<double, int>> gradients;  // (arrival, micro-batch), arrival-ordered
  std::deque<int> pending_p2;
  int depth_cap = 0;
  std::vector<Action> actions;
};

class ListScheduler {
 public:
  ListScheduler(const std::vector<StageCost>& costs, const PlanMeta& meta, bool split,
                int max_group, const Variant& variant)
      : costs_(costs),
        meta_(meta),
        split_(split),
        max_group_(max_group),
        devices_(meta.devices),
        microbatches_(meta.microbatches),
        state_(static_cast<std::size_t>(meta.devices)),
        forward_arrival_(static_cast<std::size_t>(meta.devices),
                         std::vector<double>(static_cast<std::size_t>(meta.microbatches), kInf)) {
    for (int d = 0; d < devices_; ++d) {
      DeviceState& s = at(d);
      s.memory = d < static_cast<int>(meta.static_bytes.size())
                     ? meta.static_bytes[static_cast<std::size_t>(d)]
                     : 0;
      const double cap = variant.depth_factor > 0
                             ? std::ceil(variant.depth_factor * (devices_ - d) - 1e-9)
                             : static_cast<double>(microbatches_);
      s.depth_cap = std::max(1, static_cast<int>(cap));
      if (d + 1 < devices_) comm_.push_back(boundary_transfer_us(meta.link, cost(d)));
    }
    forward_arrival_[0].assign(static_cast<std::size_t>(microbatches_), 0.0);
    fill_ = variant.fill;
  }

  Schedule run() {
    int done = 0;
    std::vector<char> finished(static_cast<std::size_t>(devices_), 0);
    while (done < devices_) {
      int best_device = -1;
      Decision best;
      for (int d = 0; d < devices_; ++d) {
        if (finished[static_cast<std::size_t>(d)]) continue;
        const Decision dec = decide(d);
        if (best_device < 0 || dec.start < best.start) {
          best = dec;
          best_device = d;
        }
      }
      if (best.start == kInf) {
        // Every device waits on an arrival nobody has produced yet: run a pending P2 anywhere.
        best_device = -1;
        for (int d = 0; d < devices_ && best_device < 0; ++d) {
          if (!at(d).pending_p2.empty()) best_device = d;
        }
        if (best_device < 0) throw Error("auto schedule: internal deadlock");
        best = Decision{at(best_device).free_at, Kind::p2, 1};
      }
      apply(best_device, best);
      const DeviceState& s = at(best_device);
      if (s.next_f == microbatches_ && s.backward_done == microbatches_ && s.pending_p2.empty()) {
        finished[static_cast<std::size_t>(best_device)] = 1;
        ++done;
      }
    }
    Schedule out;
    out.family = kAutoScheduleName;
    out.devices = devices_;
    out.microbatches = microbatches_;
    for (int d = 0; d < devices_; ++d) {
      out.stage_device.push_back(d);
      out.per_device.push_back(std::move(at(d).actions));
    }
    return out;
  }

 private:
  DeviceState& at(int d) { return state_[static_cast<std::size_t>(d)]; }
  const StageCost& cost(int d) const { return costs_[static_cast<std::size_t>(d)]; }
  bool fits(int d, std::int64_t extra) {
    const auto dd = static_cast<std::size_t>(d);
    const double limit = dd < meta_.memory_limit_bytes.size() ? meta_.memory_limit_bytes[dd] : 0;
    return limit <= 0 || static_cast<double>(at(d).memory + extra) <= limit;
  }
  // What a P1 adds at its start (lowering's accounting: the stash turns into the retained X/dY,
  // the net growth charged up front, a net shrink released at the end).
  std::int64_t p1_growth(int d) {
    const StageCost& c = cost(d);
    return std::max<std::int64_t>(c.retained_bytes - c.stash_bytes, 0);
  }
  // Admit an F only when its stash fits and its P1 will fit too once the pending P2s have run,
  // so a device full of stashes can always run a backward.
  bool forward_fits(int d) {
    const StageCost& c = cost(d);
    if (!fits(d, c.stash_bytes)) return false;
    if (!split_) return true;
    const auto pending = static_cast<std::int64_t>(at(d).pending_p2.size());
    return fits(d, c.stash_bytes + p1_growth(d) - pending * c.retained_bytes);
  }
  double p2_time(int d, int k) const { return cost(d).p2_time_us(k); }

  // The P2 group size for a gap of `gap` us (kInf: no deadline): the most efficient size that
  // fits, larger on ties; 0 when none fits.
  int group_for_gap(int d, double gap) const {
    const int pending = static_cast<int>(state_[static_cast<std::size_t>(d)].pending_p2.size());
    const int limit = std::min(pending, max_group_);
    int best = 0;
    double best_rate = kInf;
    for (int k = 1; k <= limit; ++k) {
      const double t = p2_time(d, k);
      if (t > gap + 1e-9) break;
      const double rate = t / k;
      if (rate <= best_rate * (1 + 1e-12)) {
        best_rate = std::min(best_rate, rate);
        best = k;
      }
    }
    return best;
  }

  // Earliest time an input could still reach device d: known arrivals, else an estimate from
  // the neighbour's next free time (it cannot produce the input sooner).
  double next_input(int d, double now, bool want_forward) {
    const DeviceState& s = at(d);
    double next = s.gradients.empty() ? kInf : s.gradients.front().first;
    if (want_forward) {
      const double f =
          forward_arrival_[static_cast<std::size_t>(d)][static_cast<std::size_t>(s.next_f)];
      if (f < kInf) {
        next = std::min(next, f);
      } else if (d > 0) {
        next = std::min(next, std::max(at(d - 1).free_at, now) + cost(d - 1).forward_us +
                                  comm_[static_cast<std::size_t>(d) - 1]);
      }
    }
    const bool gradient_expected = s.inflight > static_cast<int>(s.gradients.size());
    if (gradient_expected && d + 1 < devices_) {
      next = std::min(next, std::max(at(d + 1).free_at, now) + cost(d + 1).p1_us +
                                comm_[static_cast<std::size_t>(d)]);
    }
    return next;
  }

  Decision decide(int d) {
    DeviceState& s = at(d);
    const double now = s.free_at;
    const double gradient_at = s.gradients.empty() ? kInf : s.gradients.front().first;
    const bool more_forwards = s.next_f < microbatches_;
    const double forward_at =
        more_forwards
            ? forward_arrival_[static_cast<std::size_t>(d)][static_cast<std::size_t>(s.next_f)]
            : kInf;
    const bool forward_memory = more_forwards && forward_fits(d);
    const bool forward_allowed = forward_memory && s.inflight < s.depth_cap;

    if (gradient_at <= now) {
      if (!split_ || fits(d, p1_growth(d))) return {now, Kind::p1, 1};
      if (!s.pending_p2.empty()) return {now, Kind::p2, 1};  // memory forces it
      throw FieldError("memory_limit_bytes", "device " + std::to_string(d) +
                                                 " cannot hold the retained bytes of one more p1");
    }
    if (forward_allowed && forward_at <= now) return {now, Kind::forward, 1};
    if (split_ && !s.pending_p2.empty()) {
      if (s.backward_done == microbatches_) return {now, Kind::p2, group_for_gap(d, kInf)};
      if (more_forwards && !forward_memory && s.inflight < s.depth_cap) {
        return {now, Kind::p2, 1};  // memory blocks the next F: free some
      }
      const double next = next_input(d, now, forward_allowed);
      const int k = group_for_gap(d, next - now);
      if (k > 0) return {now, Kind::p2, k};
      if (fill_ == Fill::always) return {now, Kind::p2, 1};
    }
    double wake = gradient_at;
    if (forward_allowed) wake = std::min(wake, forward_at);
    if (more_forwards && !forward_memory && s.inflight == 0 && s.pending_p2.empty()) {
      throw FieldError("memory_limit_bytes",
                       "device " + std::to_string(d) +
                           " cannot hold the activations of one micro-batch within its limit");
    }
    return {std::max(wake, now), Kind::wait, 1};
  }

  void send(int from, int to, int mb, double ready) {
    DeviceState& s = at(from);
    const bool forward = to > from;
    double& free = forward ? s.send_forward_free : s.send_backward_free;
    const double start = std::max(ready, free);
    const double arrival = start + comm_[static_cast<std::size_t>(std::min(from, to))];
    free = arrival;
    if (forward) {
      forward_arrival_[static_cast<std::size_t>(to)][static_cast<std::size_t>(mb)] = arrival;
    } else {
      at(to).gradients.emplace_back(arrival, mb);
    }
  }

  void apply(int d, const Decision& dec) {
    DeviceState& s = at(d);
    const StageCost& c = cost(d);
    const double start = dec.start;
    switch (dec.kind) {
      case Kind::wait:
        s.free_at = start;
        return;
      case Kind::forward: {
        const int mb = s.next_f++;
        s.free_at = start + c.forward_us;
        s.memory += c.stash_bytes;
        ++s.inflight;
        s.actions.push_back(Action{OpType::F, d, {mb}});
        if (d + 1 < devices_) {
          send(d, d + 1, mb, s.free_at);
        } else {
          s.gradients.emplace_back(s.free_at, mb);
        }
        return;
      }
      case Kind::p1: {
        const int mb = s.gradients.front().second;
        s.gradients.pop_front();
        --s.inflight;
        ++s.backward_done;
        if (split_) {
          s.free_at = start + c.p1_us;
          s.memory += c.retained_bytes - c.stash_bytes;
          s.pending_p2.push_back(mb);
          s.actions.push_back(Action{OpType::P1, d, {mb}});
        } else {
          s.free_at = start + c.p1_us + c.p2_us;
          s.memory -= c.stash_bytes;
          s.actions.push_back(Action{OpType::B, d, {mb}});
        }
        if (d > 0) send(d, d - 1, mb, s.free_at);
        return;
      }
      case Kind::p2: {
        const int k = std::max(1, dec.group);
        Action a{OpType::P2, d, {}};
        for (int i = 0; i < k; ++i) {
          a.microbatches.push_back(s.pending_p2.front());
          s.pending_p2.pop_front();
        }
        s.free_at = start + p2_time(d, k);
        s.memory -= k * c.retained_bytes;
        s.actions.push_back(std::move(a));
        return;
      }
    }
  }

  const std::vector<StageCost>& costs_;
  const PlanMeta& meta_;
  bool split_;
  int max_group_;
  int devices_, microbatches_;
  Fill fill_ = Fill::fit;
  std::vector<double> comm_;
  std::vector<DeviceState> state_;
  std::vector<std::vector<double>> forward_arrival_;  // [device][mb]
};

std::vector<Variant> variants(bool split) {
  std::vector<Variant> out;
  for (const double depth : {0.0, 1.0, 1.5, 2.0, 3.0}) {
    if (split) {
      out.push_back({depth, Fill::fit, true});
      out.push_back({depth, Fill::always, true});
    }
    out.push_back({depth, Fill::fit, false});  // fused B: least memory, the 1F1B family
  }
  return out;
}

// Orders are compared by global step time, then the largest stage span, then the sum of the
// devices' last end times: the last key lets the local search cross plateaus where an earlier
// finish on one device does not yet shorten the step.
struct Score {
  double makespan_us = kInf;
  double max_stage_span_us = kInf;
  double sum_last_end_us = kInf;
};

Score score_of(const SimResult& sim) {
  Score s{sim.makespan_us, sim.max_stage_span_us, 0};
  for (const DeviceMetrics& d : sim.devices)
    s.sum_last_end_us += d.last_end_us;
  return s;
}

bool better(const Score& a, const Score& b) {
  const double tol = 1e-9 * std::max(1.0, std::isfinite(b.makespan_us) ? b.makespan_us : 1.0);
  if (a.makespan_us < b.makespan_us - tol) return true;
  if (a.makespan_us > b.makespan_us + tol) return false;
  if (a.max_stage_span_us < b.max_stage_span_us - tol) return true;
  if (a.max_stage_span_us > b.max_stage_span_us + tol) return false;
  return a.sum_last_end_us < b.sum_last_end_us - tol;
}

// One scored order and, per device, the start and end of each of its actions in order (empty for
// a device whose compute stream does not map one node per action).
struct Evaluation {
  Score score;
  std::vector<std::vector<NodeTime>> times;
};

// Lowers, validates (memory limits included) and simulates an order; nullopt when it breaks a
// rule, with the first message kept for the error that reports no feasible order at all.
std::optional<Evaluation> evaluate(const Schedule& schedule, const std::vector<StageCost>& costs,
                                   const PlanMeta& meta, std::string& first_error) {
  const TaskGraph graph = lower(schedule, costs, meta);
  const CheckedSimulation checked = validate_and_simulate(graph);
  if (const auto& violation = checked.violation) {
    if (first_error.empty())
      first_error = field_name("memory_limit_bytes") + ": " + violation->message;
    return std::nullopt;
  }
  const SimResult& sim = checked.sim;
  Evaluation e{score_of(sim), std::vector<std::vector<NodeTime>>(schedule.per_device.size())};
  for (std::size_t st = 0; st < graph.streams().size(); ++st) {
    const Stream& stream = graph.streams()[st];
    if (stream.role != StreamRole::compute) continue;
    const auto d = static_cast<std::size_t>(stream.device);
    const std::vector<int>& order = graph.stream_order(static_cast<int>(st));
    if (d >= e.times.size() || order.size() != schedule.per_device[d].size()) continue;
    e.times[d].reserve(order.size());
    for (const int id : order)
      e.times[d].push_back(sim.times[static_cast<std::size_t>(id)]);
  }
  return e;
}

// The one-chunk fixed families in every backward mode they accept (fused only when the request
// keeps B whole), as starting orders: the search then never returns anything slower than a
// hand-made schedule that fits the same memory.
std::vector<std::pair<std::string, Schedule>> family_seeds(const PlanMeta& meta,
                                                           const std::vector<StageCost>& costs,
                                                           BackwardMode mode, int p2_concat) {
  std::vector<std::pair<std::string, Schedule>> out;
  const bool split = mode != BackwardMode::fused;
  for (const ScheduleFamily* family : schedule_families()) {
    if (family->traits().needs_costs || !family->traits().chunks.accepts(1)) continue;
    ScheduleRequest request{meta.devices, 1, meta.microbatches, std::nullopt, p2_concat, nullptr};
    Schedule generated;
    try {
      generated = family->generate(request);
    } catch (const Error&) {
      continue;  // the family does not suit this shape (e.g. micro-batches vs devices)
    }
    // The modes the family accepts, only fused when the request keeps B whole; fused last, so
    // that on equal scores (a stable sort) the split orders win.
    std::vector<BackwardMode> modes;
    for (const BackwardMode m : family->backward_modes()) {
      if (split || m == BackwardMode::fused) modes.push_back(m);
    }
    std::stable_partition(modes.begin(), modes.end(),
                          [](BackwardMode m) { return m != BackwardMode::fused; });
    for (const BackwardMode m : modes) {
      request.backward = m;
      Schedule s = with_backward_mode(*family, generated, request, costs, meta);
      out.emplace_back(
          family->places_p2() ? family->name() : family->name() + " " + std::string(to_string(m)),
          std::move(s));
    }
  }
  return out;
}

// Whether swapping actions a (earlier) and b (later) of one device keeps every (stage,
// micro-batch)'s F before its P1/B and its P1 before its P2.
bool may_swap(const Action& a, const Action& b) {
  if (a.stage != b.stage) return true;
  for (const int x : a.microbatches)
    for (const int y : b.microbatches)
      if (x == y) return false;
  return true;
}

// Evaluations the local search may spend, shared by its starts: a fixed budget of simulated
// actions (about 3e5, i.e. ~130 evaluations at P = 8, m = 32 and ~25 at P = 32, m = 128), at least
// kMinEvaluations and at most kMaxEvaluations. Deterministic, unlike a wall-clock limit.
int local_search_budget(const Schedule& schedule) {
  constexpr double kActionBudget = 3e5;
  constexpr double kMinEvaluations = 8, kMaxEvaluations = 600;
  std::size_t actions = 0;
  for (const auto& device : schedule.per_device)
    actions += device.size();
  const double evaluations = kActionBudget / static_cast<double>(actions + 1);
  return static_cast<int>(std::clamp(evaluations, kMinEvaluations, kMaxEvaluations));
}

// Moves one action of a device from position `from` to position `to` (the actions between shift
// by one); false, with nothing changed, when that would put an action before one of its own
// micro-batch's earlier ops (F -> P1 -> P2) on this device.
bool move_action(std::vector<Action>& actions, std::size_t from, std::size_t to) {
  if (from == to) return false;
  const std::size_t lo = std::min(from, to), hi = std::max(from, to);
  for (std::size_t k = lo; k <= hi; ++k) {
    if (k != from && !may_swap(actions[std::min(k, from)], actions[std::max(k, from)]))
      return false;
  }
  if (from < to) {
    std::rotate(actions.begin() + static_cast<std::ptrdiff_t>(from),
                actions.begin() + static_cast<std::ptrdiff_t>(from) + 1,
                actions.begin() + static_cast<std::ptrdiff_t>(to) + 1);
  } else {
    std::rotate(actions.begin() + static_cast<std::ptrdiff_t>(to),
                actions.begin() + static_cast<std::ptrdiff_t>(from),
                actions.begin() + static_cast<std::ptrdiff_t>(from) + 1);
  }
  return true;
}

void undo_move(std::vector<Action>& actions, std::size_t from, std::size_t to) {
  move_action(actions, to, from);
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

std::vector<Gap> idle_gaps(const Evaluation& e) {
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

// One candidate move: the action of `device` at `from` goes to `to`.
struct Move {
  std::size_t device = 0, from = 0, to = 0;
};

// Moves aimed at the measured idle gaps, longest gap first: fill the gap with one of the next
// kMaxShift actions of the same device (e.g. a P2 or a forward whose input is already there), or
// pull the action that produces the waiting input one to kMaxShift places earlier on its device.
std::vector<Move> gap_moves(const Schedule& schedule, const Evaluation& e) {
  constexpr std::size_t kMaxShift = 4;
  std::vector<Move> moves;
  for (const Gap& g : idle_gaps(e)) {
    const std::vector<Action>& actions = schedule.per_device[g.device];
    for (std::size_t j = g.position + 1; j <= g.position + kMaxShift && j < actions.size(); ++j)
      moves.push_back({g.device, j, g.position});
    if (const auto producer = producer_of(schedule, actions[g.position])) {
      const auto [d, q] = *producer;
      for (std::size_t shift = 1; shift <= kMaxShift && shift <= q; ++shift)
        moves.push_back({d, q, q - shift});
    }
  }
  return moves;
}

// Hill climbing in two neighbourhoods, each move lowered, validated (memory limits) and simulated,
// the first improving move taken:
//  1. gap moves (gap_moves above), recomputed from the new timeline after every accepted move;
//  2. when none improves, every action of every device one to kMaxShift positions earlier or
//     later (an adjacent swap is a shift by one); after an accepted move, back to 1.
// Ends when neither improves or `budget` evaluations are spent.
int improve_by_moves(Schedule& schedule, Evaluation& current, const std::vector<StageCost>& costs,
                     const PlanMeta& meta, std::string& first_error, int budget) {
  constexpr std::size_t kMaxShift = 4;
  int accepted = 0;
  const auto try_move = [&](std::size_t device, std::size_t from, std::size_t to) {
    std::vector<Action>& actions = schedule.per_device[device];
    if (from >= actions.size() || to >= actions.size() || !move_action(actions, from, to))
      return false;
    --budget;
    std::optional<Evaluation> e = evaluate(schedule, costs, meta, first_error);
    if (e && better(e->score, current.score)) {
      current = std::move(*e);
      ++accepted;
      return true;
    }
    undo_move(actions, from, to);
    return false;
  };
  while (budget > 0) {
    bool improved = false;
    for (const Move& mv : gap_moves(schedule, current)) {
      if (budget <= 0) break;
      if ((improved = try_move(mv.device, mv.from, mv.to))) break;
    }
    if (improved) continue;
    for (std::size_t d = 0; d < schedule.per_device.size() && !improved && budget > 0; ++d) {
      for (std::size_t i = 0; i < schedule.per_device[d].size() && !improved && budget > 0; ++i) {
        for (std::size_t shift = 1; shift <= kMaxShift && !improved && budget > 0; ++shift) {
          if (i >= shift) improved = try_move(d, i, i - shift);
          if (!improved && budget > 0) improved = try_move(d, i, i + shift);
        }
      }
    }
    if (!improved) break;
  }
  return accepted;
}

}  // namespace

AutoResult make_auto_schedule(const std::vector<StageCost>& costs, const PlanMeta& meta,
                              BackwardMode mode, int p2_concat) {
  if (meta.chunks != 1) throw FieldError("chunks", "schedule 'auto' runs one chunk per device");
  if (static_cast<int>(costs.size()) != meta.devices) {
    throw FieldError("chunks", "schedule 'auto' needs one stage per device, got " +
                                   std::to_string(costs.size()) + " stages for " +
                                   std::to_string(meta.devices) + " devices");
  }
  if (meta.microbatches < 1) throw FieldError("microbatches", "must be at least 1");
  if (p2_concat < 0) throw FieldError("p2_concat", "must be 0 (all) or a positive count");
  const bool split = mode != BackwardMode::fused;
  const int max_group = p2_concat == 0 ? meta.microbatches : p2_concat;

  // Every feasible candidate, scored; the local search then starts from the best few.
  struct Candidate {
    Schedule schedule;
    std::string name;
    Evaluation eval;
  };
  std::vector<Candidate> feasible;
  int tried = 0;
  std::string first_error;
  const auto consider = [&](Schedule schedule, const std::string& name) {
    ++tried;
    schedule.family = kAutoScheduleName;
    schedule.backward = mode;
    if (std::optional<Evaluation> e = evaluate(schedule, costs, meta, first_error))
      feasible.push_back({std::move(schedule), name, std::move(*e)});
  };
  for (const Variant& v : variants(split)) {
    try {
      consider(ListScheduler(costs, meta, v.split, max_group, v).run(), v.name());
    } catch (const Error& e) {
      ++tried;
      if (first_error.empty()) first_error = e.what();
    }
  }
  for (auto& [name, schedule] : family_seeds(meta, costs, mode, p2_concat))
    consider(std::move(schedule), "seed=" + name);
  if (feasible.empty()) throw Error(first_error);
  // Stable: equal scores keep candidate order, so the result is deterministic.
  std::stable_sort(feasible.begin(), feasible.end(), [](const Candidate& a, const Candidate& b) {
    return better(a.eval.score, b.eval.score);
  });

  // No order beats the lower bound on the step time: a candidate that meets it needs no search.
  std::vector<int> stage_device(costs.size());
  for (std::size_t s = 0; s < costs.size(); ++s)
    stage_device[s] = static_cast<int>(s);
  const double bound =
      step_time_lower_bound(costs, stage_device, meta.link, meta.microbatches).makespan_us;
  const bool at_bound = feasible.front().eval.score.makespan_us <= bound * (1 + 1e-9) + 1e-9;

  constexpr std::size_t kStarts = 3;
  const std::size_t starts = at_bound ? 0 : std::min(kStarts, feasible.size());
  const int budget = starts > 0 ? local_search_budget(feasible.front().schedule) : 0;
  AutoResult best;
  best.schedule = feasible.front().schedule;
  best.variant = feasible.front().name;
  Score best_score = feasible.front().eval.score;
  for (std::size_t i = 0; i < starts; ++i) {
    Candidate& c = feasible[i];
    const int share =
        budget / static_cast<int>(starts) + (i == 0 ? budget % static_cast<int>(starts) : 0);
    const int moves = improve_by_moves(c.schedule, c.eval, costs, meta, first_error, share);
    if (better(c.eval.score, best_score)) {
      best.schedule = std::move(c.schedule);
      best.variant = c.name + (moves > 0 ? " +" + std::to_string(moves) + " moves" : "");
      best_score = c.eval.score;
    }
  }
  best.variants_tried = tried;
  best.makespan_us = best_score.makespan_us;
  best.max_stage_span_us = best_score.max_stage_span_us;
  return best;
}

}  // namespace pipeplan
