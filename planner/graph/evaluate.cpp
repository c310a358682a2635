#include "planner/graph/evaluate.h"

#include <exception>

#include "planner/base/concurrent.h"
#include "planner/base/error.h"

namespace pipeplan {

// A simulation that runs every node proves the graph acyclic, so the validator skips its cycle
// check and runs it only when the simulation got stuck (to report the cycle as the rule it
// breaks, in the validator's order). The result is what find_violation and then simulate give.
CheckedSimulation validate_and_simulate(const TaskGraph& graph) {
  CheckedSimulation out;
  std::exception_ptr stuck;
  const auto run = [&graph, &stuck] {
    SimResult sim;
    try {
      sim = simulate(graph);
    } catch (const Error&) {
      stuck = std::current_exception();
    }
    return sim;
  };
  if (graph.node_count() < kConcurrentEvaluationNodes) {
    out.sim = run();
    out.violation = find_violation(graph, stuck == nullptr);
  } else {
    // The validation is offered to the helper thread, which first builds the shared Boost.Graph
    // view (once, under a lock) while the simulation here makes its pass over the nodes; this
    // thread validates after the simulation if the helper has not started on it by then.
    std::optional<Violation> other;
    run_beside(
        [&graph, &other] {
          graph.graph();
          other = find_violation(graph, true);
        },
        [&] { out.sim = run(); });
    out.violation = stuck == nullptr ? other : find_violation(graph);
  }
  if (out.violation) {
    // An invalid graph's outcome does not matter; one over its memory limit still ran as planned.
    if (out.violation->rule != "memory-limit" || stuck) out.sim = SimResult{};
    return out;
  }
  if (stuck) std::rethrow_exception(stuck);
  return out;
}

}  // namespace pipeplan
