// Exact minimum step time for small instances (P <= 4, m <= 8 in the tests) by branch and bound,
// to measure how far `auto` is from the optimum (docs/design/auto-schedule.md).
//
// The class searched: one stage per device; every backward split into P1 and an unconcatenated
// P2; a transfer is a pure latency c_j = latency + bytes / bandwidth on each cross-stage edge
// (no queueing on a link; with comm = 0 this is exactly the simulator's model); memory limits per
// device in the validator's order semantics, each op charged as lower() charges it (its
// allocation, a P1 only its growth over the stash, and its own working memory must fit before
// its release), so that every order the validator accepts is in the class.
// The search enumerates every semi-active schedule once, in non-decreasing (start, device)
// order, and prunes with the longest remaining path and each device's remaining work. Without
// memory limits only active schedules are kept (no op may finish before another one on the same
// device starts), which are dominant for the makespan.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/graph/taskgraph.h"
#include "profiles/partition.h"
#include "schedules/schedule.h"

namespace pipeplan {

struct ExactResult {
  double makespan_us = 0;  // the optimum when `proven`, else the best found
  Schedule schedule;       // empty when nothing beat the incumbent
  bool proven = false;     // the search finished within the node limit
  std::int64_t nodes = 0;
};

// `incumbent_us`: a known feasible step time (e.g. auto's); only strictly better schedules are
// returned, and makespan_us stays at the incumbent when none exists. Throws Error naming
// --stages or --microbatches when the instance is too large (P > 6 or m > 12).
ExactResult exact_schedule(const std::vector<StageCost>& costs, const PlanMeta& meta,
                           double incumbent_us, std::int64_t node_limit = 2'000'000);

}  // namespace pipeplan
