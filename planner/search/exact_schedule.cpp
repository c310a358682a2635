#include "planner/search/exact_schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "planner/base/error.h"
#include "planner/search/auto_schedule.h"

namespace pipeplan {

namespace {

constexpr double kEps = 1e-9;
enum Type { kF = 0, kP1 = 1, kP2 = 2 };

struct Op {
  int stage = 0, mb = 0, type = kF;
  double duration = 0;
  std::vector<std::pair<int, double>> preds;  // (op, lag)
  std::vector<std::pair<int, double>> succs;
  double tail = 0;  // longest path from this op's start to the end
};

class BranchAndBound {
 public:
  BranchAndBound(const std::vector<StageCost>& costs, const PlanMeta& meta, double incumbent,
                 std::int64_t node_limit)
      : costs_(costs),
        p_(meta.devices),
        m_(meta.microbatches),
        best_(incumbent),
        node_limit_(node_limit) {
    for (int d = 0; d < p_; ++d) {
      const auto dd = static_cast<std::size_t>(d);
      limit_.push_back(dd < meta.memory_limit_bytes.size() ? meta.memory_limit_bytes[dd] : 0.0);
      memory_.push_back(dd < meta.static_bytes.size() ? meta.static_bytes[dd] : 0);
      if (limit_.back() > 0) any_limit_ = true;
      if (d + 1 < p_) comm_.push_back(boundary_transfer_us(meta.link, costs[dd]));
    }
    build_ops();
  }

  ExactResult run() {
    const std::size_t n = ops_.size();
    end_.assign(n, -1.0);
    avail_.assign(static_cast<std::size_t>(p_), 0.0);
    remaining_.assign(static_cast<std::size_t>(p_), 0.0);
    for (const Op& o : ops_)
      remaining_[static_cast<std::size_t>(o.stage)] += o.duration;
    order_.assign(static_cast<std::size_t>(p_), {});
    search(0, 0.0, -1, 0.0);
    ExactResult r;
    r.makespan_us = best_;
    r.proven = nodes_ <= node_limit_;
    r.nodes = nodes_;
    if (!best_order_.empty()) {
      r.schedule.family = "exact";
      r.schedule.backward = BackwardMode::twobp;
      r.schedule.devices = p_;
      r.schedule.microbatches = m_;
      for (int d = 0; d < p_; ++d)
        r.schedule.stage_device.push_back(d);
      for (const auto& ids : best_order_) {
        std::vector<Action> actions;
        for (const int id : ids) {
          const Op& o = ops_[static_cast<std::size_t>(id)];
          actions.push_back(Action{op_type(o), o.stage, {o.mb}});
        }
        r.schedule.per_device.push_back(std::move(actions));
      }
    }
    return r;
  }

 private:
  int id(int stage, int mb, int type) const { return (stage * m_ + mb) * 3 + type; }

  void build_ops() {
    ops_.resize(static_cast<std::size_t>(p_) * static_cast<std::size_t>(m_) * 3);
    for (int s = 0; s < p_; ++s) {
      const StageCost& c = costs_[static_cast<std::size_t>(s)];
      for (int x = 0; x < m_; ++x) {
        const double durations[3] = {c.forward_us, c.p1_us, c.p2_time_us(1)};
        for (int t = 0; t < 3; ++t) {
          Op& o = ops_[static_cast<std::size_t>(id(s, x, t))];
          o.stage = s;
          o.mb = x;
          o.type = t;
          o.duration = durations[t];
        }
      }
    }
    auto edge = [&](int from, int to, double lag) {
      ops_[static_cast<std::size_t>(to)].preds.emplace_back(from, lag);
      ops_[static_cast<std::size_t>(from)].succs.emplace_back(to, lag);
    };
    for (int x = 0; x < m_; ++x) {
      for (int s = 0; s < p_; ++s) {
        if (s > 0) edge(id(s - 1, x, kF), id(s, x, kF), comm_[static_cast<std::size_t>(s) - 1]);
        edge(id(s, x, kF), id(s, x, kP1), 0);
        if (s + 1 < p_) edge(id(s + 1, x, kP1), id(s, x, kP1), comm_[static_cast<std::size_t>(s)]);
        edge(id(s, x, kP1), id(s, x, kP2), 0);
      }
      // Topological order within a micro-batch: F up, P1 down, then P2.
      for (int s = 0; s < p_; ++s)
        topo_.push_back(id(s, x, kF));
      for (int s = p_ - 1; s >= 0; --s)
        topo_.push_back(id(s, x, kP1));
      for (int s = 0; s < p_; ++s)
        topo_.push_back(id(s, x, kP2));
    }
    for (std::size_t i = topo_.size(); i-- > 0;) {  // reverse topological order
      Op& o = ops_[static_cast<std::size_t>(topo_[i])];
      double after = 0;
      for (const auto& [next, lag] : o.succs)
        after = std::max(after, lag + ops_[static_cast<std::size_t>(next)].tail);
      o.tail = o.duration + after;
    }
  }

  // Earliest start of an op whose predecessors are scheduled (-1 when one is not).
  double ready_time(int op) const {
    const Op& o = ops_[static_cast<std::size_t>(op)];
    double t = avail_[static_cast<std::size_t>(o.stage)];
    for (const auto& [pred, lag] : o.preds) {
      const double e = end_[static_cast<std::size_t>(pred)];
      if (e < 0) return -1;
      t = std::max(t, e + lag);
    }
    return t;
  }

  double bound(double floor) {
    est_.assign(ops_.size(), 0.0);
    std::vector<double> first(static_cast<std::size_t>(p_), std::numeric_limits<double>::max());
    double lb = 0;
    for (const int op : topo_) {
      const auto i = static_cast<std::size_t>(op);
      if (end_[i] >= 0) continue;
      const Op& o = ops_[i];
      double t = std::max(avail_[static_cast<std::size_t>(o.stage)], floor);
      for (const auto& [pred, lag] : o.preds) {
        const auto pi = static_cast<std::size_t>(pred);
        const double e = end_[pi] >= 0 ? end_[pi] : est_[pi] + ops_[pi].duration;
        t = std::max(t, e + lag);
      }
      est_[i] = t;
      lb = std::max(lb, t + o.tail);
      first[static_cast<std::size_t>(o.stage)] =
          std::min(first[static_cast<std::size_t>(o.stage)], t);
    }
    for (int d = 0; d < p_; ++d) {
      const auto dd = static_cast<std::size_t>(d);
      if (remaining_[dd] > 0) lb = std::max(lb, first[dd] + remaining_[dd]);
    }
    return lb;
  }

  // What op `o` does to its device's memory (op_memory: as lower() charges it and schedule_sim
  // steps it); one micro-batch a P2: the class searched concatenates none.
  OpMemory memory_of(const Op& o) const {
    return op_memory(costs_[static_cast<std::size_t>(o.stage)], op_type(o), 1);
  }
  // Whether op `o` fits its device: the validator's rule (its allocation at its start and its
  // own working memory while it runs).
  bool fits(const Op& o) const {
    const auto d = static_cast<std::size_t>(o.stage);
    const double limit = limit_[d];
    if (limit <= 0) return true;
    const OpMemory m = memory_of(o);
    return static_cast<double>(memory_[d] + m.alloc + m.work) <= limit;
  }
  // What op `o` leaves allocated once it has run (its allocation less its release).
  std::int64_t net(const Op& o) const {
    const OpMemory m = memory_of(o);
    return m.alloc - m.release;
  }
  static OpType op_type(const Op& o) {
    return o.type == kF ? OpType::F : o.type == kP1 ? OpType::P1 : OpType::P2;
  }

  struct Candidate {
    double start;
    int op;
  };

  void search(int scheduled, double last_start, int last_device, double makespan) {
    if (++nodes_ > node_limit_) return;
    if (scheduled == static_cast<int>(ops_.size())) {
      if (makespan < best_ - kEps) {
        best_ = makespan;
        best_order_ = order_;
      }
      return;
    }
    if (std::max(makespan, bound(last_start)) >= best_ - kEps) return;
    std::vector<Candidate> candidates;
    for (int d = 0; d < p_; ++d) {
      int p2_taken = 0;
      bool earlier_f0_pending = false;  // micro-batches are interchangeable: stage 0 keeps order
      for (int x = 0; x < m_; ++x) {
        for (int t = 0; t < 3; ++t) {
          const int op = id(d, x, t);
          if (end_[static_cast<std::size_t>(op)] >= 0) continue;
          if (d == 0 && t == kF && earlier_f0_pending) continue;
          if (t == kP2 && ready_time(op) >= 0 && p2_taken++ > 0) continue;  // identical P2s
          const double start = ready_time(op);
          if (start < 0) continue;
          if (start < last_start - kEps) continue;
          if (std::abs(start - last_start) <= kEps && d < last_device) continue;
          if (!fits(ops_[static_cast<std::size_t>(op)])) continue;
          candidates.push_back({start, op});
        }
        if (d == 0 && end_[static_cast<std::size_t>(id(0, x, kF))] < 0) earlier_f0_pending = true;
      }
    }
    if (!any_limit_) {
      // Active schedules only: drop an op that another op on its device could precede.
      std::vector<double> earliest_end(static_cast<std::size_t>(p_),
                                       std::numeric_limits<double>::max());
      for (const Candidate& c : candidates) {
        const Op& o = ops_[static_cast<std::size_t>(c.op)];
        auto& e = earliest_end[static_cast<std::size_t>(o.stage)];
        e = std::min(e, c.start + o.duration);
      }
      std::erase_if(candidates, [&](const Candidate& c) {
        const Op& o = ops_[static_cast<std::size_t>(c.op)];
        return c.start >= earliest_end[static_cast<std::size_t>(o.stage)] - kEps;
      });
    }
    std::stable_sort(
        candidates.begin(), candidates.end(), [&](const Candidate& a, const Candidate& b) {
          if (a.start != b.start) return a.start < b.start;
          const int ta = ops_[static_cast<std::size_t>(a.op)].type;
          const int tb = ops_[static_cast<std::size_t>(b.op)].type;
          return (ta == kP1 ? 0 : ta == kF ? 1 : 2) < (tb == kP1 ? 0 : tb == kF ? 1 : 2);
        });
    for (const Candidate& c : candidates) {
      const auto i = static_cast<std::size_t>(c.op);
      const Op& o = ops_[i];
      const auto d = static_cast<std::size_t>(o.stage);
      const double saved_avail = avail_[d];
      end_[i] = c.start + o.duration;
      avail_[d] = end_[i];
      remaining_[d] -= o.duration;
      memory_[d] += net(o);
      order_[d].push_back(c.op);
      search(scheduled + 1, c.start, o.stage, std::max(makespan, end_[i]));
      order_[d].pop_back();
      memory_[d] -= net(o);
      remaining_[d] += o.duration;
      avail_[d] = saved_avail;
      end_[i] = -1;
      if (nodes_ > node_limit_) return;
    }
  }

  const std::vector<StageCost>& costs_;
  int p_, m_;
  double best_;
  std::int64_t node_limit_;
  std::int64_t nodes_ = 0;
  bool any_limit_ = false;
  std::vector<double> comm_, limit_, end_, avail_, remaining_, est_;
  std::vector<std::int64_t> memory_;
  std::vector<Op> ops_;
  std::vector<int> topo_;
  std::vector<std::vector<int>> order_, best_order_;
};

}  // namespace

ExactResult exact_schedule(const std::vector<StageCost>& costs, const PlanMeta& meta,
                           double incumbent_us, std::int64_t node_limit) {
  if (meta.devices < 1 || meta.devices > 6 || static_cast<int>(costs.size()) != meta.devices)
    throw FieldError("devices", "exact search takes 1 to 6 devices with one stage each, got " +
                                    std::to_string(meta.devices));
  if (meta.microbatches < 1 || meta.microbatches > 12)
    throw FieldError("microbatches", "exact search takes 1 to 12 micro-batches, got " +
                                         std::to_string(meta.microbatches));
  return BranchAndBound(costs, meta, incumbent_us, node_limit).run();
}

}  // namespace pipeplan
