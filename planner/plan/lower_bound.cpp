#include "planner/plan/lower_bound.h"

#include <algorithm>
#include <limits>

#include "planner/base/error.h"
#include "profiles/link.h"

namespace pipeplan {

namespace {

// Cheapest p2 time per micro-batch over every group size the profile knows (beyond the table the
// time is linear in k, so the ratio does not improve). A p2 group over k micro-batches lasts
// p2(k) >= k * min_j p2(j) / j, so m of them take at least m times this.
double p2_per_microbatch_us(const StageCost& c) {
  double best = c.p2_us;
  for (std::size_t k = 1; k <= c.p2_concat_us.size(); ++k) {
    best = std::min(best, c.p2_concat_us[k - 1] / static_cast<double>(k));
  }
  return std::max(0.0, best);
}

}  // namespace

LowerBound step_time_lower_bound(const std::vector<StageCost>& costs,
                                 const std::vector<int>& stage_device, const P2pLink& link,
                                 int microbatches, double overlap_efficiency, int replicas) {
  if (costs.size() != stage_device.size() || costs.empty()) {
    throw Error("lower bound: " + std::to_string(costs.size()) + " stage costs for " +
                std::to_string(stage_device.size()) + " stages");
  }
  const std::size_t stages = costs.size();
  // Each copy of the model is its own chain of stages, passed by its share of the micro-batches.
  const std::size_t length = replicas < 1 ? 0 : stages / static_cast<std::size_t>(replicas);
  if (length == 0 || length * static_cast<std::size_t>(replicas) != stages) {
    throw Error("lower bound: " + std::to_string(stages) + " stages do not hold " +
                std::to_string(replicas) + " copies of the model");
  }
  const auto copy_start = [length](std::size_t s) { return s - s % length; };
  const double m = static_cast<double>(microbatches) / replicas;
  int devices = 0;
  for (const int d : stage_device)
    devices = std::max(devices, d + 1);

  // comm[j]: transfer across boundary j -> j+1 (0 inside one device).
  std::vector<double> comm(stages, 0.0);
  for (std::size_t j = 0; j + 1 < stages; ++j) {
    if (stage_device[j] == stage_device[j + 1] || (j + 1) % length == 0) continue;
    comm[j] = transfer_time_us(link, costs[j].send_bytes);
  }
  std::vector<double> w(stages), head(stages, 0.0), down(stages, 0.0), up(stages, 0.0);
  for (std::size_t s = 0; s < stages; ++s)
    w[s] = p2_per_microbatch_us(costs[s]);
  // head[s]: earliest start of any F on stage s; up[s]: gradient path from stage s's P1 end to
  // the end of one p2 on stage 0.
  for (std::size_t s = 1; s < stages; ++s) {
    if (s % length == 0) continue;  // a copy's first stage
    head[s] = head[s - 1] + costs[s - 1].forward_us + comm[s - 1];
    up[s] = up[s - 1] + comm[s - 1] + costs[s - 1].p1_us;
  }
  for (std::size_t s = 0; s < stages; ++s)
    up[s] += w[copy_start(s)];
  // down[s]: from the end of F_s of one micro-batch to the start of its P1_s.
  for (std::size_t s = stages - 1; s-- > 0;) {
    if ((s + 1) % length == 0) continue;  // a copy's last stage
    down[s] = down[s + 1] + comm[s] + costs[s + 1].forward_us + costs[s + 1].p1_us + comm[s];
  }

  LowerBound bound;
  // Each device's optimizer step (lowering's last node on its compute stream), after all its work.
  const std::vector<double> optimizer = device_optimizer_us(costs, stage_device, devices);
  // One micro-batch's path: every F, every P1 and both transfers of each boundary, one p2, and
  // the optimizer step of the device that runs that p2.
  for (std::size_t last = length - 1; last < stages; last += length) {
    const double chain = head[last] + costs[last].forward_us + costs[last].p1_us + up[last] +
                         optimizer[static_cast<std::size_t>(stage_device[copy_start(last)])];
    bound.makespan_us = std::max(bound.makespan_us, chain);
  }

  for (int d = 0; d < devices; ++d) {
    double first = std::numeric_limits<double>::infinity();
    double first_p1 = first, tail = first;  // tail: the ramp-down to its device's optimizer
    double non_p2 = 0, p2 = 0, forwards = 0, backwards = 0;
    int count = 0;
    for (std::size_t s = 0; s < stages; ++s) {
      if (stage_device[s] != d) continue;
      first = std::min(first, head[s]);
      first_p1 = std::min(first_p1, head[s] + costs[s].forward_us + down[s]);
      tail =
          std::min(tail, up[s] + optimizer[static_cast<std::size_t>(stage_device[copy_start(s)])]);
      non_p2 += m * (costs[s].forward_us + costs[s].p1_us);
      forwards += m * costs[s].forward_us;
      backwards += m * (costs[s].p1_us + costs[s].p2_us);
      p2 += m * w[s];
      ++count;
    }
    if (count == 0) continue;
    // Before its first P1 a device can only run forwards; after its last P1, only P2s and its
    // optimizer, while that P1's gradient still crosses every stage below it (the closest to
    // stage 0 is the least) and the device of the copy's first stage then steps its optimizer.
    const double ramp_up = std::max(0.0, first_p1 - first - forwards);
    const double saved = overlap_efficiency * std::min(forwards, backwards);  // overlapped pairs
    const double step = optimizer[static_cast<std::size_t>(d)];
    const double device_bound = first + non_p2 + ramp_up - saved + std::max(p2 + step, tail);
    if (device_bound > bound.makespan_us) {
      bound.makespan_us = device_bound;
      bound.binding_device = d;
    }
    bound.stage_span_us = std::max(bound.stage_span_us, non_p2 + p2 + ramp_up - saved + step);
  }
  return bound;
}

double gap_to_bound(double value_us, double bound_us) {
  return bound_us > 0 ? (value_us - bound_us) / bound_us : 0.0;
}

}  // namespace pipeplan
