// A provable lower bound on a plan's step time from its inputs alone (stage costs, stage ->
// device map, link, micro-batch count), valid for every schedule, backward mode and memory limit
// (docs/design/auto-schedule.md derives it). For device d holding stages S_d:
//
//   head_d  = min over s in S_d of  sum_{j<s} (F_j + c_j)          earliest first op on d
//   work_d  = sum over s in S_d of  m (F_s + P1_s) + m * w_s        w_s = min_k p2_s(k) / k
//   bound_d = head_d + work_d + ramp-up_d, with the P2 term m Σ w_s raised to ramp-down_d
//     ramp-up:   a P1 of stage s waits for the round trip r_s = sum_{j>s} (F_j + P1_j) + 2
//                sum_{j>=s} c_j after its F, so d's first P1 starts no sooner than
//                e_d = min over s in S_d of (head_s + F_s + r_s), and before it only F's run:
//                + max(0, e_d - head_d - m sum_{s in S_d} F_s)
//     ramp-down: after d's last P1 (of some stage s) the gradient still crosses every stage
//                below s and stage 0 runs at least one p2: t_s = sum_{j<s} (c_j + P1_j) + w_0;
//                only P2s run on d in that time, and the device of stage 0 then steps its
//                optimizer, so the P2 term and d's optimizer step O_d become
//                max(m sum w_s + O_d, min over s in S_d of (t_s + O_{dev(0)}))
//   chain   = sum_s (F_s + P1_s) + 2 sum_j c_j + w_0 + O_{dev(0)}    one micro-batch's path
//   step time >= max(chain, max_d bound_d)
// O_d, the optimizer step of device d (StageCost::optimizer_us summed over S_d), runs after every
// op of its device: it ends bound_d's work and the chain.
// With R copies of the model (Schedule::replicas, DualPipe), each copy's stages form their own
// chain (sums over j run from the copy's first stage, w_0 is the copy's first stage's, the chain
// is the longest copy's) and m / R micro-batches pass each stage.
// One stage per device, a V and interleaved chunks alike. c_j = latency + send_bytes_j /
// bandwidth when stages j and j+1 sit on different devices, else 0.
// Largest stage span >= max_d (work_d + ramp-up_d): a span starts at the device's own first op,
// which runs its lowest stage, and the ramp-up holds relative to it.
// Overlapped pairs (profiles/overlap.h, efficiency e > 0) save at most e·min(F, B) each, and each
// F and each backward is in one pair at most, so work_d drops by at most
//   e · m · min(sum_{s in S_d} F_s, sum_{s in S_d} (P1_s + P2_s)),
// which the bound subtracts when given e (the chain stands: a pair lasts at least its longer op).
// The sustained-load term (profiles/contention.h, on a shared GPU or per separate GPU) divides
// an op's rate by 1 + factor * H >= 1 (factor >= 0, H in [0, 1]): every op then takes at least
// its profiled time, each term above stays a time that must pass, and the bound holds unchanged.
#pragma once

#include <vector>

#include "profiles/partition.h"
#include "profiles/profile.h"

namespace pipeplan {

struct LowerBound {
  double makespan_us = 0;    // global step time
  double stage_span_us = 0;  // largest per-device span
  int binding_device = -1;   // device whose bound is the largest (-1: the one-micro-batch chain)
};

LowerBound step_time_lower_bound(const std::vector<StageCost>& costs,
                                 const std::vector<int>& stage_device, const P2pLink& link,
                                 int microbatches, double overlap_efficiency = 0, int replicas = 1);

// (value - bound) / bound; 0 when bound <= 0.
double gap_to_bound(double value_us, double bound_us);

}  // namespace pipeplan
