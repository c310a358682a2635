// Backward modes: how a schedule's fused backwards (B) become p1/p2 actions.
//   fused    — B stays one op: p2 right after p1, the gradient leaves after both (autograd).
//   2bp      — B becomes P1; every P2 runs at the end of the step, concatenated up to K
//              micro-batches per call (per virtual stage), as in Rae et al. (2BP).
//   2bp-fill — as 2bp, then P2s move into idle gaps of the simulated timeline as early as they
//              fit without delaying anything; the rest run concatenated at the end. It needs the
//              simulator, a layer above this one: planner/plan/backward_fill.h.
#pragma once

#include <vector>

#include "schedules/schedule.h"

namespace pipeplan {

// fused and 2bp only (pure reordering).
Schedule apply_backward_mode(const Schedule& fused_schedule, BackwardMode mode, int p2_concat);

// Throws Error naming --p2-concat when negative (0 means all micro-batches in one call).
void check_p2_concat(int p2_concat);

// The deferred p2s of one device, appended at the end of its list: stage by stage in the order
// their last p1 ran, micro-batches in p1 order, grouped `p2_concat` at a time (0: all).
void append_deferred_p2(std::vector<Action>& actions, const std::vector<Action>& pending,
                        int p2_concat);

}  // namespace pipeplan
