// validate_and_simulate gives what find_violation and simulate give, on one thread (small graphs)
// and on two (large ones), an invalid graph's violation even where it cannot be simulated, and
// the timeline of a graph whose only fault is its memory.
#include "planner/graph/evaluate.h"

#include <gtest/gtest.h>

#include "planner/base/error.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

using testing::uniform_plan;

// 1F1B with 2BP over 8 stages: 2,200 nodes at m = 32, 17,000 at m = 256.
TaskGraph plan_graph(int microbatches) {
  return uniform_plan({.devices = 8,
                       .microbatches = microbatches,
                       .backward = BackwardMode::twobp,
                       .comm = 0.05})
      .graph;
}

int find_compute(const TaskGraph& g, const std::string& label) {
  for (int id = 0; id < g.node_count(); ++id) {
    if (g.node(id).kind == NodeKind::compute && node_label(g.node(id)) == label) return id;
  }
  ADD_FAILURE() << "no node " << label;
  return -1;
}

TEST(ValidateAndSimulate, SameTimesAsSimulateOnBothPaths) {
  for (const int m : {32, 256}) {
    const TaskGraph g = plan_graph(m);
    EXPECT_EQ(g.node_count() >= kConcurrentEvaluationNodes, m == 256) << g.node_count();
    const CheckedSimulation checked = validate_and_simulate(g);
    ASSERT_FALSE(checked.violation.has_value()) << checked.violation->message;
    const SimResult alone = simulate(g);
    ASSERT_EQ(checked.sim.times.size(), alone.times.size());
    for (std::size_t id = 0; id < alone.times.size(); ++id) {
      ASSERT_EQ(checked.sim.times[id].start_us, alone.times[id].start_us);
      ASSERT_EQ(checked.sim.times[id].end_us, alone.times[id].end_us);
    }
    EXPECT_EQ(checked.sim.makespan_us, alone.makespan_us);
    EXPECT_EQ(checked.sim.peak_memory_bytes(), alone.peak_memory_bytes());
  }
}

// A cycle: the simulation throws, yet the caller gets the validator's violation.
TEST(ValidateAndSimulate, ReportsTheViolationOfAGraphThatCannotRun) {
  for (const int m : {32, 256}) {
    TaskGraph g = plan_graph(m);
    g.add_data_edge(find_compute(g, "1P1_0"), find_compute(g, "1F0"));
    EXPECT_THROW(simulate(g), Error);
    CheckedSimulation checked;
    ASSERT_NO_THROW(checked = validate_and_simulate(g));
    ASSERT_TRUE(checked.violation.has_value());
    EXPECT_EQ(checked.violation->rule, "acyclic");
    EXPECT_EQ(checked.violation->message, find_violation(g)->message);
    EXPECT_TRUE(checked.sim.times.empty());
  }
}

// Over its memory limit a well-formed graph keeps its timeline: the peaks the BPipe retry reads.
TEST(ValidateAndSimulate, KeepsTheTimelineOfAGraphOverItsMemoryLimit) {
  for (const int m : {32, 256}) {
    TaskGraph g = plan_graph(m);
    const SimResult alone = simulate(g);
    const std::vector<std::int64_t> peaks = alone.peak_memory_bytes();
    g.meta.memory_limit_bytes.assign(peaks.size(), 0.0);
    g.meta.memory_limit_bytes[1] = static_cast<double>(peaks[1]) / 2;  // device 1 only
    const CheckedSimulation checked = validate_and_simulate(g);
    ASSERT_TRUE(checked.violation.has_value());
    EXPECT_EQ(checked.violation->rule, "memory-limit");
    EXPECT_EQ(checked.sim.makespan_us, alone.makespan_us);
    EXPECT_EQ(checked.sim.peak_memory_bytes(), peaks);
  }
}

}  // namespace
}  // namespace pipeplan
