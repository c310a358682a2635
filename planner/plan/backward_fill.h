// 2bp-fill (schedules/backward.h): the 2bp order, then every p2 moved into the first idle gap of
// the simulated timeline that holds it whole; the rest run concatenated at the end.
#pragma once

#include <vector>

#include "planner/graph/taskgraph.h"
#include "profiles/partition.h"
#include "schedules/schedule.h"

namespace pipeplan {

Schedule fill_p2_into_gaps(const Schedule& fused_schedule, const std::vector<StageCost>& costs,
                           const PlanMeta& meta, int p2_concat);

}  // namespace pipeplan
