// The overlap efficiency measured node times show (profiles/overlap.h): per overlapped pair
// (Node::overlaps_next), the efficiency that gives its time, from the first start to the last end
// of its two ops, beside the median times of the same stage's same ops run alone (not in a pair)
// in the same step; overlapped_time_us inverted, the simulator's one formula. `pipeplan diff`
// reports their median for a run, `pipeplan calibrate fit --overlap` over several runs.
#pragma once

#include <span>
#include <vector>

#include "planner/graph/metrics.h"
#include "planner/graph/taskgraph.h"

namespace pipeplan {

// A pair's time in `times` (by node id): from the first start to the last end of its two ops.
NodeTime pair_time(const OverlapPair& pair, std::span<const NodeTime> times);

// One per pair whose two ops' (stage, op) also ran alone in `times` (by node id), in the order of
// overlap_pairs(graph); each in [0, 1]. Empty when there is none.
std::vector<double> pair_efficiencies(const TaskGraph& graph, std::span<const NodeTime> times);

}  // namespace pipeplan
