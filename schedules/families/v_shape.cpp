// V-shaped schedules with two chunks per device (Qi et al., "Zero Bubble Pipeline Parallelism",
// ICLR 2024, and "Pipeline Parallelism with Controllable Memory", arXiv 2405.15362): virtual
// stage v runs on device v for v < P and on device 2P - 1 - v after, so device 0 holds the first
// and the last chunk and a micro-batch's activations on one device are freed soonest.
//
// v-min is the paper's construction: a building block (the six passes one micro-batch makes on
// every device) repeated every 6 unit slots, each device running its passes in block-time order
// (the simulator then squeezes out idle slots without reordering). See make_building_block.
//
// zb-v is Zero Bubble's published ZB-V (PublishedZbv below: warm-up, catch-up, then rounds of
// one p1 and one forward per device with p2s filling the waits), zero stage-span bubble at
// F = B = W and comm 0 with m >= 2P, at 1F1B's peak P·M_B. With m < P it falls back to the
// list scheduler below.
//
// v-half (and zb-v with m < P) use a deterministic list scheduler on unit times (F = P1 = P2 = 1
// per chunk) with a memory cap counted in chunk stashes (M_B / 2, one micro-batch on one chunk)
// from a forward to its p2:
//   zb-v   2P             1F1B's peak P·M_B
//   v-half P + 2          about half of it, (P/2 + 1)·M_B
// A micro-batch entering chunk 0 reserves its chunk-1 stash as well, so the cap never blocks
// the second half of a V that has started (no deadlock for any cap >= 2). On a device the
// scheduler prefers a ready P1 (later chunk first), then a ready F within the cap (later chunk
// first), then the oldest owed P2. docs/schedules.md says why v-half is not (yet) the paper's
// building block.
#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "planner/base/error.h"
#include "schedules/families/v_shape.h"

namespace pipeplan {

namespace {

struct Op {
  Action action;
  double ready = 0;
  int rank = 0;  // lower runs first among ops ready at the same time
};

class VScheduler {
 public:
  VScheduler(const ScheduleRequest& request, int cap)
      : devices_(request.devices),
        stages_(2 * request.devices),
        m_(request.microbatches),
        cap_(cap),
        f_end_(grid()),
        b_end_(grid()),
        next_f_(size(stages_), 0),
        next_b_(size(stages_), 0),
        owed_p2_(size(devices_)),
        reserved_(size(devices_), 0),
        free_at_(size(devices_), 0) {}

  void run(Schedule& schedule) {
    const int total = 3 * stages_ * m_;
    for (int scheduled = 0; scheduled < total; ++scheduled) {
      int best_device = -1;
      Op best;
      double best_start = std::numeric_limits<double>::infinity();
      for (int d = 0; d < devices_; ++d) {
        Op op;
        const double start = pick(d, op);
        if (start < best_start) {
          best_start = start;
          best = op;
          best_device = d;
        }
      }
      if (best_device < 0)
        throw InternalError("V schedule stalled at op " + std::to_string(scheduled));
      commit(best_device, best, best_start);
      schedule.per_device[size(best_device)].push_back(best.action);
    }
  }

 private:
  static std::size_t size(int n) { return static_cast<std::size_t>(n); }
  std::vector<std::vector<double>> grid() const {
    return std::vector<std::vector<double>>(size(stages_), std::vector<double>(size(m_), -1.0));
  }
  double& at(std::vector<std::vector<double>>& g, int s, int mb) { return g[size(s)][size(mb)]; }

  // The op device d runs next and when it can start (infinity when nothing is ready).
  double pick(int d, Op& chosen) {
    std::vector<Op> ops;
    const int later = stages_ - 1 - d, earlier = d;  // chunk 1 first
    for (const int s : {later, earlier}) {
      const int mb = next_b_[size(s)];
      if (mb < m_ && at(f_end_, s, mb) >= 0 && (s == stages_ - 1 || at(b_end_, s + 1, mb) >= 0)) {
        const double ready =
            std::max(at(f_end_, s, mb), s == stages_ - 1 ? 0.0 : at(b_end_, s + 1, mb));
        ops.push_back({{OpType::P1, s, {mb}}, ready, s == later ? 0 : 1});
      }
    }
    for (const int s : {later, earlier}) {
      const int mb = next_f_[size(s)];
      const bool admitted = s >= devices_ || reserved_[size(d)] + 2 <= cap_;
      if (mb < m_ && admitted && (s == 0 || at(f_end_, s - 1, mb) >= 0)) {
        const double ready = s == 0 ? 0.0 : at(f_end_, s - 1, mb);
        ops.push_back({{OpType::F, s, {mb}}, ready, s == later ? 2 : 3});
      }
    }
    if (!owed_p2_[size(d)].empty()) {
      const Action& p2 = owed_p2_[size(d)].front();
      ops.push_back({p2, at(b_end_, p2.stage, p2.microbatches[0]), 4});
    }
    if (ops.empty()) return std::numeric_limits<double>::infinity();
    double start = std::numeric_limits<double>::infinity();
    for (const Op& op : ops)
      start = std::min(start, op.ready);
    start = std::max(start, free_at_[size(d)]);
    int best_rank = std::numeric_limits<int>::max();
    for (const Op& op : ops) {
      if (op.ready <= start && op.rank < best_rank) {
        best_rank = op.rank;
        chosen = op;
      }
    }
    return start;
  }

  void commit(int d, const Op& op, double start) {
    const double end = start + 1.0;
    free_at_[size(d)] = end;
    const int s = op.action.stage, mb = op.action.microbatches[0];
    switch (op.action.op) {
      case OpType::F:
        at(f_end_, s, mb) = end;
        ++next_f_[size(s)];
        if (s < devices_) reserved_[size(d)] += 2;  // both chunks of the V
        break;
      case OpType::P1:
        at(b_end_, s, mb) = end;
        ++next_b_[size(s)];
        owed_p2_[size(d)].push_back({OpType::P2, s, {mb}});
        break;
      case OpType::P2:
        owed_p2_[size(d)].pop_front();
        --reserved_[size(d)];
        break;
      case OpType::B:
        break;
    }
  }

  int devices_, stages_, m_, cap_;
  std::vector<std::vector<double>> f_end_, b_end_;  // -1 until scheduled
  std::vector<int> next_f_, next_b_;                // per stage: micro-batches run in order
  std::vector<std::deque<Action>> owed_p2_;
  std::vector<int> reserved_;  // chunk stashes held or reserved per device
  std::vector<double> free_at_;
};

// ZB-V as Zero Bubble publishes it (Qi et al., ICLR 2024, section 6; the rules below are those of
// the reference scheduler in sail-sg/zero-bubble-pipeline-parallelism, re-derived here, not
// copied). Unit times F = B = W = 1, comm 0, memory in quarters of M_B: a chunk forward holds 2,
// its p1 releases 1 and its p2 the other 1, and a device may hold 4P (1F1B's P·M_B).
//
// Per device d the six kinds are: f0 (chunk 0 forward, virtual stage d), f1 (chunk 1 forward,
// stage 2P - 1 - d), b0 (the first p1 of the V, stage 2P - 1 - d), b1 (stage d), and the two p2.
// Micro-batches run in order within a kind. The schedule is built in three phases:
//  1. warm-up: every device runs f0 of micro-batch 0; then, from the last device up, device d
//     runs more chunk-0 forwards (one on every device 0..d at a time) while its chunk-1 input is
//     still on its way and its memory keeps room for 2 + 2d more stashes, then its first f1;
//  2. catch-up: each device runs forwards (alternating chunks, last device first) until it has
//     as many forwards as the device before it and more chunk-1 forwards;
//  3. 2m rounds of one p1 and one forward per device. A device takes b1 once b0 is ahead and
//     b1's input is there (the last device always), else b0; it takes f1 when its input is there,
//     else f0. Before an op that waits for its input, pending p2s run if they fit in the wait
//     entirely, and one more runs when the wait exceeds the bubble this device may still add
//     (the largest bubble of any device so far minus its own). A forward that would exceed the
//     memory first runs p2s.
// The build is retried with each device's bubble of the previous try as its allowance, and over
// the four choices of whether that extra p2 runs before b0 and before forwards; the smallest
// largest-device bubble wins.
class PublishedZbv {
 public:
  PublishedZbv(int devices, int microbatches)
      : p_(devices), m_(microbatches), max_memory_(4 * devices) {}

  // The per-device order of the try with the smallest largest-device bubble (first on ties).
  std::vector<std::vector<Action>> build() const {
    std::vector<std::vector<Action>> best;
    double best_bubble = std::numeric_limits<double>::infinity();
    for (const bool fill_b : {true, false}) {
      for (const bool fill_f : {true, false}) {
        std::vector<std::vector<Action>> order;
        const double b = try_build(fill_b, fill_f, {}, order);
        if (b < best_bubble - 1e-9) {
          best_bubble = b;
          best = std::move(order);
        }
      }
    }
    return best;
  }

 private:
  enum Kind { f0, f1, b0, b1, kKinds };

  struct State {
    std::array<std::vector<std::vector<double>>, kKinds> end;  // [kind][device][mb], -1 unset
    std::vector<std::array<int, kKinds>> count;
    std::vector<double> now, idle;
    std::vector<int> memory;
    std::vector<std::deque<std::pair<Kind, int>>> pending_w;  // (b0 | b1, micro-batch)
    std::vector<std::vector<Action>> order;
    std::vector<double> allowance;  // per device, from the previous try (empty: none)
  };

  static std::size_t u(int i) { return static_cast<std::size_t>(i); }

  State fresh(std::vector<double> allowance) const {
    State st;
    for (auto& e : st.end)
      e.assign(u(p_), std::vector<double>(u(m_), -1.0));
    st.count.assign(u(p_), std::array<int, kKinds>{});
    st.now.assign(u(p_), 0.0);
    st.idle.assign(u(p_), 0.0);
    st.memory.assign(u(p_), 0);
    st.pending_w.resize(u(p_));
    st.order.resize(u(p_));
    st.allowance = std::move(allowance);
    return st;
  }

  int stage_of(Kind k, int d) const { return k == f0 || k == b1 ? d : 2 * p_ - 1 - d; }

  // End time of the op on the neighbouring device that `k` of micro-batch mb on d waits for;
  // -1 when it is not placed yet, 0 when the input comes from d itself.
  double input_end(const State& st, Kind k, int d, int mb) const {
    int from = -1;
    if (k == f0 || k == b0) from = d - 1;  // chunk 0 forwards and the first p1s run down the V
    if (k == f1 || k == b1) from = d + 1;  // chunk 1 forwards and the second p1s run up
    if (from < 0 || from >= p_) return 0.0;
    return st.end[k][u(from)][u(mb)];
  }

  double largest_bubble(const State& st, int d) const {
    double worst = *std::max_element(st.idle.begin(), st.idle.end());
    if (!st.allowance.empty()) {
      const double most = *std::max_element(st.allowance.begin(), st.allowance.end());
      worst = std::max(worst, most - st.allowance[u(d)]);
    }
    return worst;
  }

  void place_w(State& st, int d) const {
    const auto [kind, mb] = st.pending_w[u(d)].front();
    st.pending_w[u(d)].pop_front();
    st.now[u(d)] += 1.0;
    st.memory[u(d)] -= 1;
    st.order[u(d)].push_back({OpType::P2, stage_of(kind, d), {mb}});
  }

  void place(State& st, Kind k, int d) const {
    const int mb = st.count[u(d)][k];
    if (mb >= m_) throw InternalError("zb-v placed too many ops on device " + std::to_string(d));
    const double input = input_end(st, k, d, mb);
    if (input < 0) throw InternalError("zb-v op before its input on device " + std::to_string(d));
    const double start = std::max(st.now[u(d)], input);
    if (st.count[u(d)][f0] > 0) st.idle[u(d)] += start - st.now[u(d)];
    st.now[u(d)] = start + 1.0;
    st.end[k][u(d)][u(mb)] = start + 1.0;
    ++st.count[u(d)][k];
    const bool forward = k == f0 || k == f1;
    st.memory[u(d)] += forward ? 2 : -1;
    if (!forward) st.pending_w[u(d)].emplace_back(k, mb);
    st.order[u(d)].push_back({forward ? OpType::F : OpType::P1, stage_of(k, d), {mb}});
  }

  // P2s before op k on d: those that fit in its wait, then one more if the wait exceeds what this
  // device may still idle (`extra`).
  void fill_wait(State& st, Kind k, int d, bool extra) const {
    const double input = input_end(st, k, d, st.count[u(d)][k]);
    auto& pending = st.pending_w[u(d)];
    while (!pending.empty() && input >= st.now[u(d)] + 1.0)
      place_w(st, d);
    if (extra && !pending.empty() && input - st.now[u(d)] > largest_bubble(st, d) - st.idle[u(d)])
      place_w(st, d);
  }

  double try_build(bool fill_b, bool fill_f, std::vector<double> allowance,
                   std::vector<std::vector<Action>>& out) const {
    State st = fresh(std::move(allowance));
    // 1. Warm-up.
    for (int d = 0; d < p_; ++d)
      place(st, f0, d);
    for (int d = p_ - 1; d >= 0; --d) {
      if (d < p_ - 1) {
        const double arrival = st.end[f1][u(d + 1)][0];
        while (st.memory[u(d)] + 2 * (2 + 2 * d) <= max_memory_ && st.now[u(d)] + 1.0 <= arrival &&
               st.count[u(d)][f0] < m_ - d) {
          for (int j = 0; j <= d; ++j)
            place(st, f0, j);
        }
      }
      place(st, f1, d);
    }
    // 2. Catch-up.
    Kind chunk = f0;
    for (int d = 1; d < p_; ++d) {
      const auto forwards = [&](int x) { return st.count[u(x)][f0] + st.count[u(x)][f1]; };
      while (forwards(d) < forwards(d - 1) ||
             (st.count[u(d)][f1] <= st.count[u(d - 1)][f1] && st.count[u(d - 1)][f1] < m_)) {
        for (int j = p_ - 1; j >= d; --j) {
          if (st.count[u(j)][chunk] < m_) place(st, chunk, j);
        }
        chunk = chunk == f0 ? f1 : f0;
      }
    }
    // 3. Rounds of one p1 and one forward per device.
    for (int round = 0; round < 2 * m_; ++round) {
      std::vector<std::pair<int, Kind>> backward;
      std::vector<int> first_half;
      for (int d = 0; d < p_; ++d) {
        const auto& c = st.count[u(d)];
        const bool second =
            c[b1] < c[b0] && (d == p_ - 1 || c[b0] >= m_ || st.end[b1][u(d + 1)][u(c[b1])] >= 0);
        if (second) {
          backward.insert(backward.begin(), {d, b1});  // last device first
        } else {
          first_half.push_back(d);
        }
      }
      for (const int d : first_half)
        backward.emplace_back(d, b0);
      for (const auto& [d, k] : backward) {
        if (st.count[u(d)][k] >= m_) continue;
        fill_wait(st, k, d, k == b1 || fill_b);
        place(st, k, d);
      }
      for (int d = 0; d < p_; ++d) {
        const auto& c = st.count[u(d)];
        if (c[f1] >= m_) continue;
        std::optional<Kind> next;
        if (c[f1] < c[f0] && (d == p_ - 1 || st.end[f1][u(d + 1)][u(c[f1])] >= 0)) {
          next = f1;  // chunk 1 has its input
        } else if (c[f1] >= c[f0] ||
                   (c[f0] < m_ && (d == 0 || st.end[f0][u(d - 1)][u(c[f0])] >= 0))) {
          next = f0;
        }
        if (!next) continue;
        while (st.memory[u(d)] + 2 > max_memory_) {
          if (st.pending_w[u(d)].empty())
            throw InternalError("zb-v out of memory on device " + std::to_string(d));
          place_w(st, d);
        }
        fill_wait(st, *next, d, fill_f);
        place(st, *next, d);
      }
    }
    for (int d = 0; d < p_; ++d) {
      while (!st.pending_w[u(d)].empty())
        place_w(st, d);
    }
    double bubble = *std::max_element(st.idle.begin(), st.idle.end());
    out = std::move(st.order);
    // Retry with this try's bubbles as allowances while that keeps lowering the largest one.
    const double allowed =
        st.allowance.empty() ? -1 : *std::max_element(st.allowance.begin(), st.allowance.end());
    if (allowed < 0 || bubble < allowed - 1e-9) {
      std::vector<std::vector<Action>> again;
      const double b = try_build(fill_b, fill_f, st.idle, again);
      if (b < bubble - 1e-9) {
        bubble = b;
        out = std::move(again);
      }
    }
    return bubble;
  }

  int p_, m_, max_memory_;
};

// The six passes one micro-batch makes on a device of the V, in dependency order.
enum class Pass { f0, f1, b1, b0, w1, w0 };
constexpr int kPasses = 6;  // also the repeat interval: one unit slot per pass

// V-Min's building block (arXiv 2405.15362, section 3): for micro-batch 0, the unit slot of every
// pass on every device. Each pass starts one slot after the pass it depends on (the forward of
// chunk 0 moves down the devices, chunk 1 back up, the p1s retrace the V, a p2 follows its p1) at
// the earliest slot whose residue mod 6 is still free on its device. Repeating the block every 6
// slots is then collision-free (no two passes of any micro-batches share a slot), and keeping
// every offset minimal keeps each pass's lifespan, hence the memory, minimal: a device holds
// ceil(lifespan / 6) micro-batches of a chunk, which gives the paper's (P + 4) / 3 micro-batches
// (rounded down) of activations. When 3 does not divide P the minimal offsets never collide.
std::vector<std::array<int, kPasses>> make_building_block(int devices) {
  std::vector<std::array<int, kPasses>> slot(static_cast<std::size_t>(devices));
  std::vector<std::array<bool, kPasses>> taken(static_cast<std::size_t>(devices),
                                               std::array<bool, kPasses>{});
  const auto place = [&](int d, Pass pass, int earliest) {
    const auto dd = static_cast<std::size_t>(d);
    while (taken[dd][static_cast<std::size_t>(earliest % kPasses)])
      ++earliest;
    taken[dd][static_cast<std::size_t>(earliest % kPasses)] = true;
    slot[dd][static_cast<std::size_t>(pass)] = earliest;
    return earliest;
  };
  const auto at = [&](int d, Pass pass) {
    return slot[static_cast<std::size_t>(d)][static_cast<std::size_t>(pass)];
  };
  const int last = devices - 1;
  for (int d = 0; d < devices; ++d)
    place(d, Pass::f0, d == 0 ? 0 : at(d - 1, Pass::f0) + 1);
  place(last, Pass::f1, at(last, Pass::f0) + 1);
  for (int d = last - 1; d >= 0; --d)
    place(d, Pass::f1, at(d + 1, Pass::f1) + 1);
  place(0, Pass::b1, at(0, Pass::f1) + 1);
  for (int d = 1; d < devices; ++d)
    place(d, Pass::b1, at(d - 1, Pass::b1) + 1);
  place(last, Pass::b0, at(last, Pass::b1) + 1);
  for (int d = last - 1; d >= 0; --d)
    place(d, Pass::b0, at(d + 1, Pass::b0) + 1);
  for (int d = 0; d < devices; ++d) {
    place(d, Pass::w1, at(d, Pass::b1) + 1);
    place(d, Pass::w0, at(d, Pass::b0) + 1);
  }
  return slot;
}

Action pass_action(Pass pass, int device, int devices, int microbatch) {
  const int chunk0 = device, chunk1 = 2 * devices - 1 - device;
  switch (pass) {
    case Pass::f0:
      return {OpType::F, chunk0, {microbatch}};
    case Pass::f1:
      return {OpType::F, chunk1, {microbatch}};
    case Pass::b1:
      return {OpType::P1, chunk1, {microbatch}};
    case Pass::b0:
      return {OpType::P1, chunk0, {microbatch}};
    case Pass::w1:
      return {OpType::P2, chunk1, {microbatch}};
    case Pass::w0:
      break;
  }
  return {OpType::P2, chunk0, {microbatch}};
}

// Repeats the block for every micro-batch (micro-batch k shifted by 6k slots) and gives each
// device its passes in slot order. Slots are distinct per device, so the order is total, and
// every dependency points to an earlier slot, so the order cannot deadlock.
void repeat_building_block(const std::vector<std::array<int, kPasses>>& block, Schedule& schedule) {
  const int devices = schedule.devices, m = schedule.microbatches;
  for (int d = 0; d < devices; ++d) {
    std::vector<std::pair<int, Action>> timed;
    timed.reserve(static_cast<std::size_t>(kPasses) * static_cast<std::size_t>(m));
    for (int mb = 0; mb < m; ++mb) {
      for (int p = 0; p < kPasses; ++p) {
        timed.emplace_back(
            block[static_cast<std::size_t>(d)][static_cast<std::size_t>(p)] + kPasses * mb,
            pass_action(static_cast<Pass>(p), d, devices, mb));
      }
    }
    std::sort(timed.begin(), timed.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    auto& actions = schedule.per_device[static_cast<std::size_t>(d)];
    for (auto& [slot, action] : timed)
      actions.push_back(std::move(action));
  }
}

Schedule v_skeleton(const ScheduleRequest& request, std::string_view family) {
  Schedule schedule = schedule_skeleton(request, family);
  schedule.backward = BackwardMode::twobp;
  const int p = request.devices;
  for (int v = 0; v < schedule.stage_count(); ++v)
    schedule.stage_device[static_cast<std::size_t>(v)] = v < p ? v : 2 * p - 1 - v;
  return schedule;
}

}  // namespace

Schedule make_v_schedule(const ScheduleRequest& request, std::string_view family, int cap) {
  Schedule schedule = v_skeleton(request, family);
  VScheduler(request, cap).run(schedule);
  return schedule;
}

int v_chunk_stash_cap(VFamily family, int devices) {
  int cap = 2 * devices;                                        // zb-v
  if (family == VFamily::v_half) cap = devices + 2;             // about half of 1F1B's
  if (family == VFamily::v_min) cap = 2 * ((devices + 4) / 3);  // the block's own peak
  return std::clamp(cap, 2, 2 * devices);
}

// The published construction with m >= P; with fewer micro-batches (its warm-up and catch-up
// phases assume at least P) the memory-capped greedy at 2P chunk stashes.
Schedule make_published_zb_v(const ScheduleRequest& request) {
  if (request.microbatches < request.devices)
    return make_v_schedule(request, "zb-v", v_chunk_stash_cap(VFamily::zb_v, request.devices));
  Schedule schedule = v_skeleton(request, "zb-v");
  schedule.per_device = PublishedZbv(request.devices, request.microbatches).build();
  return schedule;
}

Schedule make_v_min_building_block(const ScheduleRequest& request) {
  Schedule schedule = v_skeleton(request, "v-min");
  repeat_building_block(make_building_block(request.devices), schedule);
  return schedule;
}

}  // namespace pipeplan
