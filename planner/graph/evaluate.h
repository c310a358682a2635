// Validation and simulation of one task graph, the two steps every plan goes through. Both only
// read the graph, so on large graphs they can run at once on two threads (the simulation here,
// the validation on a helper thread when it gets a core in time, else here after it); a
// simulation that runs every node proves the graph acyclic, which spares the validator its cycle
// check. The result is what find_violation and then simulate give.
#pragma once

#include <optional>

#include "planner/graph/simulator.h"
#include "planner/graph/validator.h"

namespace pipeplan {

struct CheckedSimulation {
  // The first broken rule. `sim` is then left empty, except under "memory-limit": the graph is
  // well formed and only needs more memory than it has, so its timeline is kept (the BPipe
  // retry in make_plan.cpp reads the peaks from it).
  std::optional<Violation> violation;
  SimResult sim;
};

// Graphs with at least this many nodes are validated and simulated concurrently; below it a
// thread costs more than it saves.
inline constexpr int kConcurrentEvaluationNodes = 4096;

// An Error thrown by the simulation of a valid graph propagates; on an invalid graph the
// violation is returned and whatever the simulation did is dropped, unless the one rule broken is
// memory-limit (see CheckedSimulation).
CheckedSimulation validate_and_simulate(const TaskGraph& graph);

}  // namespace pipeplan
