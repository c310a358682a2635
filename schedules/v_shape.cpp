// V-shaped schedules with two chunks per device (Qi et al., "Zero Bubble Pipeline Parallelism",
// ICLR 2024, and "Pipeline Parallelism with Controllable Memory", arXiv 2405.15362): virtual
// stage v runs on device v for v < P and on device 2P - 1 - v after, so device 0 holds the first
// and the last chunk and a micro-batch's activations on one device are freed soonest.
//
// The papers build their V schedules from a repeated building block. Here one deterministic
// list scheduler, run once on unit times (F = P1 = P2 = 1 per chunk), produces all three; they
// differ only in the memory cap, counted in chunk stashes (M_B / 2, one micro-batch on one
// chunk) from a forward to its p2:
//   zb-v   2P             1F1B's peak P·M_B
//   v-half P + 2          about half of it, (P/2 + 1)·M_B
//   v-min  ceil(2P/3) + 2 about a third, (P/3 + 1)·M_B
// A micro-batch entering chunk 0 reserves its chunk-1 stash as well, so the cap never blocks
// the second half of a V that has started (no deadlock for any cap >= 2). On a device the
// scheduler prefers a ready P1 (later chunk first), then a ready F within the cap (later chunk
// first), then the oldest owed P2. The order is then simulated with the real costs like every
// other schedule. Bubbles are those of this greedy, not the papers' figures (docs/schedules.md).
#include <algorithm>
#include <deque>
#include <limits>
#include <string>

#include "planner/error.h"
#include "schedules/registry.h"

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
        throw Error("internal: V schedule stalled at op " + std::to_string(scheduled));
      commit(best_device, best, best_start);
      schedule.per_device[size(best_device)].push_back(best.action);
    }
  }

  int device_of(int stage) const { return stage < devices_ ? stage : stages_ - 1 - stage; }

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

Schedule make_v_schedule(const ScheduleRequest& request, std::string_view family, int cap) {
  check_schedule_request(request, family, true);
  if (request.chunks != 2)
    throw Error("--chunks: schedule '" + std::string(family) +
                "' runs exactly 2 chunks per device (V shape), got " +
                std::to_string(request.chunks));
  Schedule schedule = schedule_skeleton(request, family);
  schedule.backward = BackwardMode::twobp;
  VScheduler scheduler(request, cap);
  for (int v = 0; v < schedule.stage_count(); ++v)
    schedule.stage_device[static_cast<std::size_t>(v)] = scheduler.device_of(v);
  scheduler.run(schedule);
  return schedule;
}

}  // namespace

int v_shape_cap(std::string_view family, int devices) {
  int cap = (2 * devices + 2) / 3 + 2;  // v-min: ceil(2P/3) + 2
  if (family == "zb-v") cap = 2 * devices;
  if (family == "v-half") cap = devices + 2;
  return std::clamp(cap, 2, 2 * devices);
}

Schedule make_zb_v(const ScheduleRequest& request) {
  return make_v_schedule(request, "zb-v", v_shape_cap("zb-v", request.devices));
}

Schedule make_v_half(const ScheduleRequest& request) {
  return make_v_schedule(request, "v-half", v_shape_cap("v-half", request.devices));
}

Schedule make_v_min(const ScheduleRequest& request) {
  return make_v_schedule(request, "v-min", v_shape_cap("v-min", request.devices));
}

}  // namespace pipeplan
