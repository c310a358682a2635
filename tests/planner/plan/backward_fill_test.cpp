// 2bp-fill: p2s moved into the simulated idle gaps.
#include "planner/plan/backward_fill.h"

#include <map>
#include <string>

#include <gtest/gtest.h>

#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

TEST(BackwardModes, FillPutsP2IntoBubblesWithoutDelay) {
  const Plan twobp = testing::uniform_plan(
      {.devices = 4, .microbatches = 8, .backward = BackwardMode::twobp, .p2_concat = 1});
  const Plan fill = testing::uniform_plan(
      {.devices = 4, .microbatches = 8, .backward = BackwardMode::twobp_fill, .p2_concat = 1});
  // The first device idles during the cool-down while gradients come back: p2s go there.
  const auto& first = fill.graph.schedule.per_device[0];
  std::size_t last_p1 = 0, first_p2 = first.size();
  for (std::size_t i = 0; i < first.size(); ++i) {
    if (first[i].op == OpType::P1) last_p1 = i;
    if (first[i].op == OpType::P2 && first_p2 == first.size()) first_p2 = i;
  }
  EXPECT_LT(first_p2, last_p1);
  EXPECT_LT(fill.sim.makespan_us, twobp.sim.makespan_us);
  // Filling frees retained memory earlier, never later.
  for (std::size_t d = 0; d < 4; ++d) {
    EXPECT_LE(fill.sim.devices[d].peak_memory_bytes, twobp.sim.devices[d].peak_memory_bytes);
  }
  // The F and P1 ops keep their 2bp start times: a p2 only goes where it fits.
  std::map<std::string, double> starts;
  for (int id = 0; id < twobp.graph.node_count(); ++id) {
    const Node& n = twobp.graph.node(id);
    if (n.kind == NodeKind::compute && n.op != OpType::P2) {
      starts[node_label(n)] = twobp.sim.times[static_cast<std::size_t>(id)].start_us;
    }
  }
  for (int id = 0; id < fill.graph.node_count(); ++id) {
    const Node& n = fill.graph.node(id);
    if (n.kind == NodeKind::compute && n.op != OpType::P2) {
      EXPECT_DOUBLE_EQ(fill.sim.times[static_cast<std::size_t>(id)].start_us, starts[node_label(n)])
          << node_label(n);
    }
  }
}

}  // namespace
}  // namespace pipeplan
