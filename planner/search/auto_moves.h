// `auto`'s scores and its local search on an order (docs/design/auto-schedule.md): candidates are
// evaluated on compact arrays (planner/graph/schedule_sim.h), never as task graphs, and ranked by
// the objective with the other figure breaking ties.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/graph/metrics.h"
#include "planner/graph/taskgraph.h"
#include "profiles/partition.h"
#include "schedules/family.h"
#include "schedules/schedule.h"

namespace pipeplan {

// Step time, largest stage span, and the sum of the devices' last end times: the last lets the
// local search cross plateaus where an earlier finish on one device does not yet shorten either.
struct AutoScore {
  double makespan_us = 0;
  double span_us = 0;
  double sum_last_end_us = 0;
  double peak_bytes = 0;  // the largest per-device peak memory
};

// a before b under `objective`: step (makespan, span, sum), steady (span, makespan, sum).
bool better(const AutoScore& a, const AutoScore& b, Objective objective);
// The order a search returns: as `better`, but of two orders equal on both figures the one with
// the lower peak memory (then the smaller sum).
bool preferred(const AutoScore& a, const AutoScore& b, Objective objective);

// A scored order and, per device, the start and end of each of its actions in order.
struct AutoEval {
  AutoScore score;
  std::vector<std::vector<NodeTime>> times;
};

// The costs and limits a layout's candidates are evaluated under.
struct EvalContext {
  const std::vector<StageCost>* costs = nullptr;
  const PlanMeta* meta = nullptr;  // devices, micro-batches, link, static bytes, limits
  Objective objective = Objective::step;
};

// Evaluates an order (memory limits included); nullopt when it breaks one or cannot run, with the
// first message kept in `first_error` for the error that reports no feasible order at all.
std::optional<AutoEval> evaluate_order(const Schedule& schedule, const EvalContext& context,
                                       bool keep_times, std::string& first_error);

// First-improvement hill climbing (docs/design/auto-schedule.md): moves aimed at the idle gaps of
// the current timeline, then any action up to four places earlier or later, an overlapped pair
// (an F and the B or P1 it runs with) also as a whole; a move that would break a pair's form is
// not tried. Each move evaluated and kept when it improves the score. Spends at most `budget`
// evaluations (decremented); returns the number of moves kept. `current` must hold the times of
// `schedule`.
int improve_by_moves(Schedule& schedule, AutoEval& current, const EvalContext& context,
                     std::string& first_error, int& budget);

}  // namespace pipeplan
