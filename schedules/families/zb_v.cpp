// ZB-V (Qi et al., ICLR 2024, arXiv 2401.10241): two chunks per device in a V, the published
// order (PublishedZbv below): zero bubble per stage span at T_F = T_B = T_W, comm 0 and m >= 2P, at
// 1F1B's peak P·M_B. With m < P it falls back to the memory-capped greedy of v_shape.cpp.
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
    Order best;
    double best_bubble = std::numeric_limits<double>::infinity();
    for (const bool fill_b : {true, false}) {
      for (const bool fill_f : {true, false}) {
        Order order;
        const double b = try_build(fill_b, fill_f, {}, order);
        if (b < best_bubble - 1e-9) {
          best_bubble = b;
          best = std::move(order);
        }
      }
    }
    std::vector<std::vector<Action>> out(best.size());
    for (std::size_t d = 0; d < best.size(); ++d) {
      out[d].reserve(best[d].size());
      for (const Op& op : best[d])
        out[d].push_back({op.op, op.stage, {op.mb}});
    }
    return out;
  }

 private:
  enum Kind { f0, f1, b0, b1, kKinds };

  // An action of a try, made an Action for the winning try only.
  struct Op {
    OpType op;
    int stage;
    int mb;
  };
  using Order = std::vector<std::vector<Op>>;  // per device

  struct State {
    std::array<std::vector<std::vector<double>>, kKinds> end;  // [kind][device][mb], -1 unset
    std::vector<std::array<int, kKinds>> count;
    std::vector<double> now, idle;
    double most_idle = 0;  // the largest of idle
    std::vector<int> memory;
    std::vector<std::deque<std::pair<Kind, int>>> pending_w;  // (b0 | b1, micro-batch)
    Order order;
    std::vector<double> allowance;  // per device, from the previous try (empty: none)
    double most_allowed = 0;        // the largest of allowance
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
    if (!st.allowance.empty())
      st.most_allowed = *std::max_element(st.allowance.begin(), st.allowance.end());
    for (std::vector<Op>& order : st.order)
      order.reserve(u(6 * m_));
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
    double worst = st.most_idle;
    if (!st.allowance.empty()) worst = std::max(worst, st.most_allowed - st.allowance[u(d)]);
    return worst;
  }

  void place_w(State& st, int d) const {
    const auto [kind, mb] = st.pending_w[u(d)].front();
    st.pending_w[u(d)].pop_front();
    st.now[u(d)] += 1.0;
    st.memory[u(d)] -= 1;
    st.order[u(d)].push_back({OpType::P2, stage_of(kind, d), mb});
  }

  void place(State& st, Kind k, int d) const {
    const int mb = st.count[u(d)][k];
    if (mb >= m_) throw InternalError("zb-v placed too many ops on device " + std::to_string(d));
    const double input = input_end(st, k, d, mb);
    if (input < 0) throw InternalError("zb-v op before its input on device " + std::to_string(d));
    const double start = std::max(st.now[u(d)], input);
    if (st.count[u(d)][f0] > 0) {
      st.idle[u(d)] += start - st.now[u(d)];
      st.most_idle = std::max(st.most_idle, st.idle[u(d)]);
    }
    st.now[u(d)] = start + 1.0;
    st.end[k][u(d)][u(mb)] = start + 1.0;
    ++st.count[u(d)][k];
    const bool forward = k == f0 || k == f1;
    st.memory[u(d)] += forward ? 2 : -1;
    if (!forward) st.pending_w[u(d)].emplace_back(k, mb);
    st.order[u(d)].push_back({forward ? OpType::F : OpType::P1, stage_of(k, d), mb});
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

  double try_build(bool fill_b, bool fill_f, std::vector<double> allowance, Order& out) const {
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
    std::vector<std::pair<int, Kind>> backward;
    std::vector<char> second(u(p_));
    for (int round = 0; round < 2 * m_; ++round) {
      // The second p1s last device first, then the first ones.
      backward.clear();
      for (int d = p_ - 1; d >= 0; --d) {
        const auto& c = st.count[u(d)];
        second[u(d)] = static_cast<char>(
            c[b1] < c[b0] && (d == p_ - 1 || c[b0] >= m_ || st.end[b1][u(d + 1)][u(c[b1])] >= 0));
        if (second[u(d)] != 0) backward.emplace_back(d, b1);
      }
      for (int d = 0; d < p_; ++d) {
        if (second[u(d)] == 0) backward.emplace_back(d, b0);
      }
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
      Order again;
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

// The published construction with m >= P; with fewer micro-batches (its warm-up and catch-up
// phases assume at least P) the memory-capped greedy at 2P chunk stashes.
Schedule make_published_zb_v(const ScheduleRequest& request) {
  if (request.microbatches < request.devices)
    return make_v_schedule(request, "zb-v", v_chunk_stash_cap(VFamily::zb_v, request.devices));
  Schedule schedule = v_skeleton(request, "zb-v");
  schedule.per_device = PublishedZbv(request.devices, request.microbatches).build();
  return schedule;
}

const ScheduleFamilyRegistration kZbV(
    {.name = "zb-v",
     .description = "ZB-V (Qi et al. 2024): --chunks 2 in a V (virtual stage v on device v, then "
                    "2P-1-v), the published order: zero bubble per stage span at F=B=W with "
                    "m >= 2P, at 1F1B's memory P*M_B (m < P: memory-capped greedy); needs "
                    "--backward 2bp",
     .listing_order = 70,
     .p2 = P2Placement::by_family,
     .chunks = {.min = 2, .max = 2, .preferred = 2},
     .memory = {"min(P, m)", [](int p, int, int m) { return v_peak_stashes(VFamily::zb_v, p, m); }},
     .folded_stages = true},
    make_published_zb_v);

}  // namespace

}  // namespace pipeplan
