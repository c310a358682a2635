// The plan loader (every version) and everything `pipeplan show` does with what it loads: validate,
// simulate, draw the timeline and summary, write the trace.
#include "planner/base/io.h"
#include "planner/graph/evaluate.h"
#include "planner/graph/taskgraph.h"
#include "planner/graph/trace.h"
#include "tests/fuzz/fuzz_support.h"
#include "tools/timeline.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipeplan;
  return fuzz::run([&] {
    const TaskGraph graph = plan_from_text(fuzz::text_of(data, size), "p.json");
    CheckedSimulation checked = validate_and_simulate(graph);
    if (checked.violation) return;
    static_cast<void>(render_timeline(graph, checked.sim, 100, true));
    static_cast<void>(render_summary(graph, checked.sim));
    static_cast<void>(perfetto_trace(graph, checked.sim, "fuzz"));
  });
}
