#include "planner/graph/evaluate.h"

#include <future>
#include <utility>

namespace pipeplan {

CheckedSimulation validate_and_simulate(const TaskGraph& graph) {
  CheckedSimulation out;
  if (graph.node_count() < kConcurrentEvaluationNodes) {
    out.violation = find_violation(graph);
    if (!out.violation) out.sim = simulate(graph);
    return out;
  }
  graph.graph();  // build the shared Boost.Graph view once, before either side wants it
  std::future<SimResult> simulated =
      std::async(std::launch::async, [&graph] { return simulate(graph); });
  out.violation = find_violation(graph);
  if (out.violation) {
    // An invalid graph may not simulate at all (a cycle); its outcome does not matter.
    simulated.wait();
    return out;
  }
  out.sim = simulated.get();
  return out;
}

}  // namespace pipeplan
