// Backward modes: where the p2s go.
#include "planner/backward.h"

#include <gtest/gtest.h>

#include "planner/error.h"
#include "schedules/registry.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

TEST(BackwardModes, FusedKeepsTheSchedule) {
  const Schedule fused = make_1f1b({.devices = 3, .chunks = 1, .microbatches = 5});
  const Schedule out = apply_backward_mode(fused, BackwardMode::fused, 1);
  EXPECT_EQ(out.per_device, fused.per_device);
}

TEST(BackwardModes, TwoBpDefersAndConcatenates) {
  const Schedule fused = make_1f1b({.devices = 2, .chunks = 1, .microbatches = 8});
  const Schedule out = apply_backward_mode(fused, BackwardMode::twobp, 3);
  check_schedule(out);
  for (const auto& actions : out.per_device) {
    // Every B became a P1 in place; the tail holds P2 groups of 3, 3, 2 in p1 order.
    ASSERT_EQ(actions.size(), 16u + 3u);
    for (std::size_t i = 0; i < 16; ++i)
      EXPECT_NE(actions[i].op, OpType::P2);
    EXPECT_EQ(actions[16].microbatches, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(actions[17].microbatches, (std::vector<int>{3, 4, 5}));
    EXPECT_EQ(actions[18].microbatches, (std::vector<int>{6, 7}));
  }
  const Schedule all = apply_backward_mode(fused, BackwardMode::twobp, 0);
  EXPECT_EQ(all.per_device[0].back().microbatches.size(), 8u);
  EXPECT_THROW(apply_backward_mode(fused, BackwardMode::twobp, -1), Error);
}

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
      starts[n.label] = twobp.sim.times[static_cast<std::size_t>(id)].start_us;
    }
  }
  for (int id = 0; id < fill.graph.node_count(); ++id) {
    const Node& n = fill.graph.node(id);
    if (n.kind == NodeKind::compute && n.op != OpType::P2) {
      EXPECT_DOUBLE_EQ(fill.sim.times[static_cast<std::size_t>(id)].start_us, starts[n.label])
          << n.label;
    }
  }
}

}  // namespace
}  // namespace pipeplan
