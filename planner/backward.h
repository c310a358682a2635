// Backward modes: how a schedule's fused backwards (B) become p1/p2 actions.
//   fused    — B stays one op: p2 right after p1, the gradient leaves after both (autograd).
//   2bp      — B becomes P1; every P2 runs at the end of the step, concatenated up to K
//              micro-batches per call (per virtual stage), as in Rae et al. (2BP).
//   2bp-fill — as 2bp, then P2s move into idle gaps of the simulated timeline as early as they
//              fit without delaying anything; the rest run concatenated at the end.
#pragma once

#include <vector>

#include "planner/partition.h"
#include "planner/schedule.h"
#include "planner/taskgraph.h"

namespace pipeplan {

// fused and 2bp only (pure reordering).
Schedule apply_backward_mode(const Schedule& fused_schedule, BackwardMode mode, int p2_concat);

// 2bp-fill: needs the costs to find the gaps.
Schedule fill_p2_into_gaps(const Schedule& fused_schedule, const std::vector<StageCost>& costs,
                           const PlanMeta& meta, int p2_concat);

}  // namespace pipeplan
