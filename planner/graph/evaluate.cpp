#include "planner/graph/evaluate.h"

#include <exception>
#include <future>
#include <utility>

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
    graph.graph();  // build the shared Boost.Graph view once, before either side wants it
    std::future<SimResult> simulated = std::async(std::launch::async, run);
    const std::optional<Violation> other = find_violation(graph, true);
    out.sim = simulated.get();
    out.violation = stuck == nullptr ? other : find_violation(graph);
  }
  if (out.violation) {
    out.sim = SimResult{};  // an invalid graph's outcome does not matter
    return out;
  }
  if (stuck) std::rethrow_exception(stuck);
  return out;
}

}  // namespace pipeplan
