// V-Half (Qi et al., "Pipeline Parallelism with Controllable Memory", arXiv 2405.15362): the
// building block whose chunk-0 forwards and chunk-1 input gradients advance 2 slots per device
// and the others 1 (with 3 slots of slack at the top of the V when P is even, where the passes
// would otherwise collide), repeated every 6 unit slots (v_shape.cpp), then the paper's second
// squeeze of the cool-down with the p2s taken out (CoolDownSqueeze below). Its lifespans add up
// to about 6P slots per device, so a device holds floor((P + 2) / 2)·M_B of activations, half of
// 1F1B's P·M_B, and at F = B = W the largest stage span's bubble is floor((P - 1) / 2)(F + B + W)
// - F/2 from P = 3 on: within the paper's P/2 of (F + B + W), below 1F1B's (P - 1)(F + B + W) and
// its 2bp form's (P - 1)(F + B) (tests/schedules/zero_bubble_test.cpp).
#include <algorithm>
#include <cstddef>
#include <deque>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "schedules/families/v_shape.h"

namespace pipeplan {

namespace {

// The six passes of one micro-batch on a device of the V (v_shape.cpp's order): the chunk-0 and
// chunk-1 forwards, the chunk-1 and chunk-0 input gradients (p1), their weight gradients (p2).
enum VPass : int { kF0, kF1, kB1, kB0, kW1, kW0 };
constexpr int kVPasses = 6;

// The paper's last step (its reference scheduler reorders twice): after the ramps have been
// reordered with the p2s in place, the p2s are taken out, every p1 after device 0's last chunk-0
// forward moves, in slot order, to the earliest free slot after its inputs where the device stays
// within the cap (each p1's p2 counted as running in the first free slot after it), and the p2s go
// back into the first free slots, oldest p1 first. A p1 of the cool-down then no longer waits
// behind p2s that nothing needs yet, and the p1s that take its output start sooner: at
// F = B = W the bubble drops from about 7P/12 to about P/2 - 1 of (F + B + W), at the same peak.
// The forwards keep their slots: the paper's scheduler moves them as well, which gains nothing
// more at F = B = W and costs up to 3 % of the step where a forward outlasts a p1 and a p2.
// The slots are the unit-time schedule of the reordered ramps (each pass 1, comm 0), so every
// pass sits after its inputs and each device's slot order is deadlock-free for any costs.
class CoolDownSqueeze {
 public:
  CoolDownSqueeze(const Schedule& schedule, int cap)
      : p_(schedule.devices),
        m_(schedule.microbatches),
        cap_(cap),
        slot_(size(p_ * kVPasses * m_), -1) {
    unit_time_slots(schedule.per_device);
    int last_slot = 0;
    for (const int t : slot_)
      last_slot = std::max(last_slot, t);
    horizon_ = last_slot + 1;
    occupant_.assign(size(p_), std::vector<int>(size(horizon_), -1));
    for (int d = 0; d < p_; ++d)
      for (int pass = kF0; pass <= kB0; ++pass)
        for (int mb = 0; mb < m_; ++mb)
          occupant_[size(d)][size(slot(d, pass, mb))] = pass * m_ + mb;
    squeeze();
  }

  // Each device's passes in slot order, each p2 in the first free slot after its p1 (oldest
  // first) or after the device's last pass.
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
        if (pass == kB1) owed.emplace_back(kW1, mb);
        if (pass == kB0) owed.emplace_back(kW0, mb);
      }
      for (const auto& [pass, mb] : owed)
        actions.push_back(action(d, pass, mb));
    }
    return out;
  }

 private:
  static std::size_t size(int n) { return static_cast<std::size_t>(n); }
  int& slot(int d, int pass, int mb) { return slot_[size((d * kVPasses + pass) * m_ + mb)]; }
  int slot(int d, int pass, int mb) const { return slot_[size((d * kVPasses + pass) * m_ + mb)]; }

  // The passes (device, pass) whose output `pass` on device d takes, besides the same pass of the
  // previous micro-batch: one device up or down the V, or the pass before it on this device.
  std::vector<std::pair<int, int>> inputs(int d, int pass) const {
    std::vector<std::pair<int, int>> in;
    const int last = p_ - 1;
    switch (pass) {
      case kF0:
        if (d > 0) in.emplace_back(d - 1, kF0);
        break;
      case kF1:
        in.emplace_back(d, kF0);
        if (d < last) in.emplace_back(d + 1, kF1);
        break;
      case kB1:
        in.emplace_back(d, kF1);
        if (d > 0) in.emplace_back(d - 1, kB1);
        break;
      case kB0:
        in.emplace_back(d, kB1);
        if (d < last) in.emplace_back(d + 1, kB0);
        break;
      case kW1:
        in.emplace_back(d, kB1);
        break;
      default:
        in.emplace_back(d, kB0);
        break;
    }
    return in;
  }

  int pass_of(int d, const Action& a) const {
    const bool chunk0 = a.stage == d;
    switch (a.op) {
      case OpType::F:
        return chunk0 ? kF0 : kF1;
      case OpType::P1:
        return chunk0 ? kB0 : kB1;
      case OpType::P2:
        return chunk0 ? kW0 : kW1;
      case OpType::B:
      case OpType::O:
        break;
    }
    throw InternalError("v-half: unexpected action " + format_action(a));
  }

  // Each pass's slot when every pass takes one unit, comm 0, in each device's order.
  void unit_time_slots(const std::vector<std::vector<Action>>& per_device) {
    std::vector<std::size_t> next(size(p_), 0);
    std::vector<int> free_at(size(p_), 0);
    std::size_t left = 0;
    for (const auto& actions : per_device)
      left += actions.size();
    while (left > 0) {
      bool progressed = false;
      for (int d = 0; d < p_; ++d) {
        const std::vector<Action>& actions = per_device[size(d)];
        for (std::size_t& i = next[size(d)]; i < actions.size(); ++i) {
          const int pass = pass_of(d, actions[i]), mb = actions[i].microbatches[0];
          int start = free_at[size(d)];
          bool ready = true;
          for (const auto& [from, input] : inputs(d, pass)) {
            const int t = slot(from, input, mb);
            ready = ready && t >= 0;
            start = std::max(start, t + 1);
          }
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

  void squeeze() {
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
      int from = mb > 0 ? slot(d, pass, mb - 1) + 1 : 0;
      for (const auto& [dev, input] : inputs(d, pass))
        from = std::max(from, slot(dev, input, mb) + 1);
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
  std::vector<int> slot_;                   // [device][pass][micro-batch] -> slot
  std::vector<std::vector<int>> occupant_;  // [device][slot] -> pass * m + micro-batch, or -1
};

Schedule make_v_half(const ScheduleRequest& request) {
  const int p = request.devices;
  const VBlockOffsets offsets{
      .f0_step = 2, .f1_step = 1, .b1_step = 2, .b0_step = 1, .top_gap = p % 2 == 0 ? 3 : 0};
  const int cap = v_chunk_stash_cap(VFamily::v_half, p);
  Schedule schedule = make_v_from_block(request, "v-half", v_building_block(p, offsets), cap);
  schedule.per_device = CoolDownSqueeze(schedule, cap).orders();
  return schedule;
}

const ScheduleFamilyRegistration kVHalf(
    {.name = "v-half",
     .description = "V-Half (Qi et al. 2405.15362): the paper's building block at half of 1F1B's "
                    "memory, (P+2)/2*M_B, bubble below P/2 of (F+B+W) at F=B=W (fixed unit "
                    "slots); --chunks 2; needs --backward 2bp",
     .listing_order = 80,
     .p2 = P2Placement::by_family,
     .chunks = {.min = 2, .max = 2, .preferred = 2},
     .memory = {"min(floor((P + 2) / 2), m)",
                [](int p, int, int m) { return v_peak_stashes(VFamily::v_half, p, m); }},
     .folded_stages = true},
    make_v_half);

}  // namespace

}  // namespace pipeplan
