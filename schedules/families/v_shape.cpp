// V-shaped schedules with two chunks per device (Qi et al., "Zero Bubble Pipeline Parallelism",
// ICLR 2024, and "Pipeline Parallelism with Controllable Memory", arXiv 2405.15362): virtual
// stage v runs on device v for v < P and on device 2P - 1 - v after, so device 0 holds the first
// and the last chunk and a micro-batch's activations on one device are freed soonest.
//
// The controllable-memory paper builds a schedule from a building block: the passes of one
// micro-batch laid out in unit slots (one slot per pass, F = B = W), repeated every 6 slots,
// squeezed (each device runs its passes in slot order, as early as its inputs allow) and, in the
// warm-up and cool-down, reordered into earlier free slots as far as the block's own peak memory
// allows. The block's lifespans set the memory: a device holds ceil(lifespan / 6) micro-batches
// of each chunk. v-min (minimal offsets, v_min.cpp) and v-half (offsets of 2 on the chunk-0
// forwards and chunk-1 input gradients, v_half.cpp) are such blocks (make_v_from_block below).
//
// zb-v is Zero Bubble's published ZB-V (zb_v.cpp). With m < P it falls back to the deterministic
// list scheduler below, on unit times (F = P1 = P2 = 1 per chunk) with a memory cap of 2P chunk
// stashes (M_B / 2, one micro-batch on one chunk, from a forward to its p2), 1F1B's peak P·M_B.
// A micro-batch entering chunk 0 reserves its chunk-1 stash as well, so the cap never blocks
// the second half of a V that has started (no deadlock for any cap >= 2). On a device the
// scheduler prefers a ready P1 (later chunk first), then a ready F within the cap (later chunk
// first), then the oldest owed P2.
#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <string>
#include <tuple>
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
      case OpType::O:
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

// The six passes of one micro-batch on a device of the V: the four of the block, then the two p2.
enum VPass : int { kF0, kF1, kB1, kB0, kW1, kW0 };
constexpr int kVPasses = 6;  // also the repeat interval: one unit slot per pass

// The repeated block on a slot timeline per device, reordered in the ramps within a memory cap
// (and, optionally, its cool-down squeezed a second time: squeeze_cool_down()).
class BlockTimeline {
 public:
  BlockTimeline(int devices, int microbatches, const VBlock& block, int cap)
      : p_(devices), m_(microbatches), cap_(cap), slot_(size(p_ * kVPasses * m_), -1) {
    int last_slot = 0;
    for (const auto& passes : block)
      last_slot = std::max(last_slot, *std::max_element(passes.begin(), passes.end()));
    // Every p2 fits in the free slots of the repeated block or in the 2m slots after it.
    horizon_ = last_slot + kVPasses * m_ + 2 * m_ + 1;
    occupant_.assign(size(p_), std::vector<int>(size(horizon_), -1));
    live_.assign(size(p_), std::vector<int>(size(horizon_), 0));
    repeat(block);
    for (int d = 0; d < p_; ++d)
      place_p2(d);
    count_live();
    reorder_ramps();
  }

  // Each device's passes in slot order; after squeeze_cool_down(), each p2 in the first free slot
  // after its p1 (oldest first) or after the device's last pass.
  std::vector<std::vector<Action>> orders() const {
    std::vector<std::vector<Action>> out(size(p_));
    for (int d = 0; d < p_; ++d) {
      std::vector<Action>& actions = out[size(d)];
      actions.reserve(size(kVPasses * m_));
      std::deque<std::pair<int, int>> owed;  // (p2 pass, micro-batch)
      for (const int who : occupant_[size(d)]) {
        if (who < 0) {
          if (!owed.empty()) {
            actions.push_back(action(d, owed.front().first, owed.front().second));
            owed.pop_front();
          }
          continue;
        }
        const int pass = who / m_, mb = who % m_;
        actions.push_back(action(d, pass, mb));
        if (p2s_out_ && pass == kB1) owed.emplace_back(kW1, mb);
        if (p2s_out_ && pass == kB0) owed.emplace_back(kW0, mb);
      }
      for (const auto& [pass, mb] : owed)
        actions.push_back(action(d, pass, mb));
    }
    return out;
  }

  // The paper's last step (its reference scheduler reorders twice): after the ramps have been
  // reordered with the p2s in place, the p2s are taken out, every p1 after device 0's last chunk-0
  // forward moves, in slot order, to the earliest free slot after its inputs where the device
  // stays within the cap (each p1's p2 counted as running in the first free slot after it), and
  // the p2s go back into the first free slots, oldest p1 first (orders()). A p1 of the cool-down
  // then no longer waits behind p2s that nothing needs yet, and the p1s that take its output start
  // sooner: at F = B = W the bubble drops from about 7P/12 to about P/2 - 1 of (F + B + W), at the
  // same peak. The forwards keep their slots: the paper's scheduler moves them as well, which
  // gains nothing more at F = B = W and costs up to 3 % of the step where a forward outlasts a p1
  // and a p2. The slots are the unit-time schedule of the reordered ramps (each pass 1, comm 0),
  // so every pass sits after its inputs and each device's slot order is deadlock-free for any
  // costs.
  void squeeze_cool_down() {
    std::vector<std::vector<int>> order(size(p_));  // per device: pass * m + micro-batch
    for (int d = 0; d < p_; ++d)
      for (const int who : occupant_[size(d)]) {
        if (who >= 0) order[size(d)].push_back(who);
      }
    std::fill(slot_.begin(), slot_.end(), -1);
    unit_time_slots(order);
    int last_slot = 0;
    for (const int t : slot_)
      last_slot = std::max(last_slot, t);
    horizon_ = last_slot + 1;
    occupant_.assign(size(p_), std::vector<int>(size(horizon_), -1));
    for (int d = 0; d < p_; ++d)
      for (int pass = kF0; pass <= kB0; ++pass)
        for (int mb = 0; mb < m_; ++mb)
          occupant_[size(d)][size(slot(d, pass, mb))] = pass * m_ + mb;
    p2s_out_ = true;
    squeeze_p1s();
  }

 private:
  static std::size_t size(int n) { return static_cast<std::size_t>(n); }
  int& slot(int d, int pass, int mb) { return slot_[size((d * kVPasses + pass) * m_ + mb)]; }
  int slot(int d, int pass, int mb) const { return slot_[size((d * kVPasses + pass) * m_ + mb)]; }

  void put(int d, int pass, int mb, int t) {
    if (t >= horizon_ || occupant_[size(d)][size(t)] >= 0) {
      throw InternalError("V building block passes collide on device " + std::to_string(d));
    }
    occupant_[size(d)][size(t)] = pass * m_ + mb;
    slot(d, pass, mb) = t;
  }

  void repeat(const VBlock& block) {
    for (int d = 0; d < p_; ++d)
      for (int pass = 0; pass < 4; ++pass)
        for (int mb = 0; mb < m_; ++mb)
          put(d, pass, mb, block[size(d)][size(pass)] + kVPasses * mb);
  }

  // Each p2 in the first free slot after its p1, oldest p1 first.
  void place_p2(int d) {
    std::deque<std::pair<int, int>> pending;  // (p2 pass, micro-batch)
    int placed = 0;
    for (int t = 0; t < horizon_ && placed < 2 * m_; ++t) {
      const int who = occupant_[size(d)][size(t)];
      if (who >= 0) {
        const int pass = who / m_;
        if (pass == kB1) pending.emplace_back(kW1, who % m_);
        if (pass == kB0) pending.emplace_back(kW0, who % m_);
      } else if (!pending.empty()) {
        put(d, pending.front().first, pending.front().second, t);
        pending.pop_front();
        ++placed;
      }
    }
    if (placed != 2 * m_) throw InternalError("V building block left p2s unplaced");
  }

  // live_[d][t]: chunk stashes alive on d after slot t (+1 from a forward, -1 after its p2).
  void count_live() {
    for (int d = 0; d < p_; ++d) {
      int live = 0;
      for (int t = 0; t < horizon_; ++t) {
        const int who = occupant_[size(d)][size(t)];
        if (who >= 0) live += stash_delta(who / m_);
        live_[size(d)][size(t)] = live;
      }
    }
  }
  static int stash_delta(int pass) {
    if (pass == kF0 || pass == kF1) return 1;
    return pass == kW0 || pass == kW1 ? -1 : 0;
  }

  // The passes (device, pass) whose output `pass` on device d takes, each handed to need, besides
  // the same pass of the previous micro-batch: one device up or down the V, or the pass before it
  // on this device.
  template <typename Need>
  void inputs(int d, int pass, Need need) const {
    const int last = p_ - 1;
    switch (pass) {
      case kF0:
        if (d > 0) need(d - 1, kF0);
        break;
      case kF1:
        need(d, kF0);
        if (d < last) need(d + 1, kF1);
        break;
      case kB1:
        need(d, kF1);
        if (d > 0) need(d - 1, kB1);
        break;
      case kB0:
        need(d, kB1);
        if (d < last) need(d + 1, kB0);
        break;
      case kW1:
        need(d, kB1);
        break;
      default:
        need(d, kB0);
        break;
    }
  }

  // The slots a pass must follow: its inputs and the same pass of the previous micro-batch.
  int earliest(int d, int pass, int mb) const {
    int after = mb > 0 ? slot(d, pass, mb - 1) : -1;
    inputs(d, pass, [&](int dev, int p) { after = std::max(after, slot(dev, p, mb)); });
    return after + 1;
  }

  // The paper's optional reordering: in the warm-up (before micro-batch 0's chunk-0 input
  // gradient on device 0) and the cool-down (after the last micro-batch's chunk-0 forward there),
  // every pass, in slot order, moves to the earliest free slot after its inputs that keeps its
  // device within the cap. The steady state keeps the block's pattern.
  void reorder_ramps() {
    const int steady_begin = slot(0, kB0, 0), steady_end = slot(0, kF0, m_ - 1);
    // The ramps' passes by (slot, device, pass, micro-batch): a counting sort on the slot over
    // the passes taken in (device, pass, micro-batch) order.
    std::vector<std::size_t> first(size(horizon_) + 1, 0);
    const auto ramp = [&](int t) { return t < steady_begin || t > steady_end; };
    for (const int t : slot_) {
      if (ramp(t)) ++first[size(t) + 1];
    }
    for (std::size_t t = 1; t < first.size(); ++t)
      first[t] += first[t - 1];
    std::vector<std::tuple<int, int, int, int>> passes(first.back());
    for (int d = 0; d < p_; ++d)
      for (int pass = 0; pass < kVPasses; ++pass)
        for (int mb = 0; mb < m_; ++mb) {
          const int t = slot(d, pass, mb);
          if (ramp(t)) passes[first[size(t)]++] = {t, d, pass, mb};
        }
    for (const auto& [t, d, pass, mb] : passes) {
      const int from = earliest(d, pass, mb);
      const int delta = stash_delta(pass);
      std::vector<int>& live = live_[size(d)];
      int best = -1, peak = 0;
      for (int c = t - 1; c >= from && c >= 0; --c) {
        peak = std::max(peak, live[size(c)]);
        if (delta > 0 && peak + delta > cap_) break;
        if (occupant_[size(d)][size(c)] < 0) best = c;
      }
      if (best < 0) continue;
      occupant_[size(d)][size(t)] = -1;
      occupant_[size(d)][size(best)] = pass * m_ + mb;
      slot(d, pass, mb) = best;
      for (int c = best; c < t; ++c)
        live[size(c)] += delta;
    }
  }

  // Each pass's slot when every pass takes one unit, comm 0, in each device's order (pass * m +
  // micro-batch).
  void unit_time_slots(const std::vector<std::vector<int>>& per_device) {
    std::vector<std::size_t> next(size(p_), 0);
    std::vector<int> free_at(size(p_), 0);
    std::size_t left = 0;
    for (const auto& passes : per_device)
      left += passes.size();
    while (left > 0) {
      bool progressed = false;
      for (int d = 0; d < p_; ++d) {
        const std::vector<int>& passes = per_device[size(d)];
        for (std::size_t& i = next[size(d)]; i < passes.size(); ++i) {
          const int pass = passes[i] / m_, mb = passes[i] % m_;
          int start = free_at[size(d)];
          bool ready = true;
          inputs(d, pass, [&](int from, int input) {
            const int t = slot(from, input, mb);
            ready = ready && t >= 0;
            start = std::max(start, t + 1);
          });
          if (!ready) break;
          slot(d, pass, mb) = start;
          free_at[size(d)] = start + 1;
          --left;
          progressed = true;
        }
      }
      if (!progressed) throw InternalError("v-half: the reordered ramps deadlock");
    }
  }

  // The most chunk stashes alive on d with each p2 in the first free slot after its p1.
  int peak_with_p2s_deferred(int d) const {
    int live = 0, owed = 0, peak = 0;
    for (const int who : occupant_[size(d)]) {
      if (who < 0) {
        if (owed > 0) {
          --owed;
          --live;
        }
        continue;
      }
      const int pass = who / m_;
      if (pass == kF0 || pass == kF1) ++live;
      if (pass == kB0 || pass == kB1) ++owed;
      peak = std::max(peak, live);
    }
    return peak;
  }

  void squeeze_p1s() {
    // The cool-down's p1s: those after device 0's last chunk-0 forward, by (slot, device, pass,
    // micro-batch).
    const std::tuple<int, int, int, int> begin{slot(0, kF0, m_ - 1), 0, kF0, m_ - 1};
    std::vector<std::tuple<int, int, int, int>> passes;
    for (int d = 0; d < p_; ++d)
      for (const int pass : {kB1, kB0})
        for (int mb = 0; mb < m_; ++mb) {
          const std::tuple<int, int, int, int> key{slot(d, pass, mb), d, pass, mb};
          if (key > begin) passes.push_back(key);
        }
    std::sort(passes.begin(), passes.end());
    for (const auto& [t, d, pass, mb] : passes) {
      const int from = earliest(d, pass, mb);
      std::vector<int>& occupant = occupant_[size(d)];
      for (int c = from; c < t; ++c) {
        if (occupant[size(c)] >= 0) continue;
        std::swap(occupant[size(c)], occupant[size(t)]);
        if (peak_with_p2s_deferred(d) <= cap_) {
          slot(d, pass, mb) = c;
          break;
        }
        std::swap(occupant[size(c)], occupant[size(t)]);
      }
    }
  }

  Action action(int d, int pass, int mb) const {
    const int chunk0 = d, chunk1 = 2 * p_ - 1 - d;
    switch (pass) {
      case kF0:
        return {OpType::F, chunk0, {mb}};
      case kF1:
        return {OpType::F, chunk1, {mb}};
      case kB1:
        return {OpType::P1, chunk1, {mb}};
      case kB0:
        return {OpType::P1, chunk0, {mb}};
      case kW1:
        return {OpType::P2, chunk1, {mb}};
      default:
        return {OpType::P2, chunk0, {mb}};
    }
  }

  int p_, m_, cap_, horizon_ = 0;
  bool p2s_out_ = false;                    // squeeze_cool_down(): occupant_ holds no p2s
  std::vector<int> slot_;                   // [device][pass][micro-batch] -> slot
  std::vector<std::vector<int>> occupant_;  // [device][slot] -> pass * m + micro-batch, or -1
  std::vector<std::vector<int>> live_;      // [device][slot] -> chunk stashes alive after it
};

}  // namespace

Schedule v_skeleton(const ScheduleRequest& request, std::string_view family) {
  Schedule schedule = schedule_skeleton(request, family);
  schedule.backward = BackwardMode::twobp;
  schedule.stage_device = v_stage_device(request.devices);
  return schedule;
}

Schedule make_v_schedule(const ScheduleRequest& request, std::string_view family, int cap) {
  Schedule schedule = v_skeleton(request, family);
  VScheduler(request, cap).run(schedule);
  return schedule;
}

int v_chunk_stash_cap(VFamily family, int devices) {
  int cap = 2 * devices;                                         // zb-v
  if (family == VFamily::v_half) cap = 2 * ((devices + 2) / 2);  // about half of 1F1B's
  if (family == VFamily::v_min) cap = 2 * ((devices + 4) / 3);   // about a third
  return std::clamp(cap, 2, 2 * devices);
}

VBlock v_building_block(int devices, const VBlockOffsets& o) {
  const auto d_of = [](int d) { return static_cast<std::size_t>(d); };
  const int last = devices - 1;
  VBlock block(d_of(devices));
  for (int d = 0; d < devices; ++d)
    block[d_of(d)][kF0] = d * o.f0_step;
  block[d_of(last)][kF1] = block[d_of(last)][kF0] + o.f1_step;
  for (int d = last - 1; d >= 0; --d)
    block[d_of(d)][kF1] = block[d_of(d + 1)][kF1] + o.f1_step;
  block[0][kB1] = block[0][kF1] + 1 + o.top_gap;
  for (int d = 1; d < devices; ++d)
    block[d_of(d)][kB1] = block[d_of(d - 1)][kB1] + o.b1_step;
  block[d_of(last)][kB0] = block[d_of(last)][kB1] + o.b1_step;
  for (int d = last - 1; d >= 0; --d)
    block[d_of(d)][kB0] = block[d_of(d + 1)][kB0] + o.b0_step;
  return block;
}

Schedule make_v_from_block(const ScheduleRequest& request, std::string_view family,
                           const VBlock& block, int cap, const VFromBlockOptions& options) {
  Schedule schedule = v_skeleton(request, family);
  BlockTimeline timeline(request.devices, request.microbatches, block, cap);
  if (options.squeeze_cool_down) timeline.squeeze_cool_down();
  schedule.per_device = timeline.orders();
  return schedule;
}

}  // namespace pipeplan
