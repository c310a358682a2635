// `--schedule auto`: a per-device action order built from the real per-stage costs and the
// per-device memory limits (docs/auto-schedule.md).
//
// A list scheduler replays the pipeline as an event simulation: at each decision point the
// device that can act earliest picks P1 (a waiting gradient: the upstream stages' critical path),
// then F (when memory holds it and the device is below its warm-up depth), then P2 (when memory
// forces it, to fill an idle gap it fits, or concatenated at the end when the profile says
// concatenation is faster). A handful of variants (warm-up depth per device, P2 fill policy, and
// fused B for memory too tight to retain any p2) are
// lowered and run through the real simulator, together with every one-chunk fixed family as a
// seed. Unless the best already meets the lower bound, a budgeted local search moves actions into
// the idle gaps of the simulated timeline (then any action up to four places). The best (step
// time, then largest stage span) wins. Deterministic: no randomness, ties resolve by order.
//
// Scope: one chunk per device (stage s on device s). Unlike Zero Bubble's automatic scheduler no
// figure is collapsed to a median: each stage keeps its own F/P1/P2 times, p2 concatenation
// table, memory deltas and boundary transfer time, and each device its own memory limit.
#pragma once

#include <string>
#include <vector>

#include "planner/graph/taskgraph.h"
#include "profiles/partition.h"
#include "schedules/schedule.h"

namespace pipeplan {

inline constexpr const char* kAutoScheduleName = "auto";

struct AutoResult {
  Schedule schedule;
  std::string variant;  // the winning heuristic variant, e.g. "depth=2.0x fill=fit"
  double makespan_us = 0;
  double max_stage_span_us = 0;
  int variants_tried = 0;
};

// `meta` supplies devices, micro-batches, the link, the per-device memory limits and static
// bytes. `mode` fused keeps B whole; 2bp and 2bp-fill split it (the scheduler places every P2).
// `p2_concat`: the largest P2 group (0 = any). Throws Error naming --memory when no order fits a
// device's limit, --chunks when costs.size() != devices.
AutoResult make_auto_schedule(const std::vector<StageCost>& costs, const PlanMeta& meta,
                              BackwardMode mode, int p2_concat);

// Boundary transfer time of stage s -> s+1 (and of the gradient back): latency + bytes/bandwidth.
double boundary_transfer_us(const P2pLink& link, const StageCost& sender);

}  // namespace pipeplan
