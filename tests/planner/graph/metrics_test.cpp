// Step metrics from node times (planner/graph/metrics.h): by hand on a small graph, and equal to
// the simulator's on its own times.
#include "planner/graph/metrics.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/base/error.h"
#include "planner/graph/simulator.h"
#include "tests/planner/graph/same_metrics.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

// Two devices. Device 0: F (alloc 4) at 0-10, B (free 4) at 30-40; device 1: F (alloc 2) at
// 12-20, B (free 2) at 20-28, and a second F (alloc 3) starting when that B ends. One send/recv
// pair 10-12 between them (no compute time).
struct Small {
  TaskGraph graph;
  std::vector<NodeTime> times;
  int add(int device, NodeKind kind, std::int64_t alloc, std::int64_t free, double start,
          double end) {
    Node n;
    n.kind = kind;
    n.device = device;
    n.peer = kind == NodeKind::compute ? -1 : 1 - device;
    n.stream = kind == NodeKind::compute ? graph.stream(device, StreamRole::compute)
               : kind == NodeKind::send  ? graph.stream(device, StreamRole::send, 1 - device)
                                         : graph.stream(device, StreamRole::recv, 1 - device);
    n.alloc_bytes = alloc;
    n.free_bytes = free;
    times.push_back({start, end});
    return graph.add_node(std::move(n));
  }
};

Small small() {
  Small s;
  s.graph.meta.devices = 2;
  s.graph.meta.microbatches = 4;
  s.graph.meta.mbs = 2;
  s.graph.meta.seq = 1000;
  s.graph.meta.static_bytes = {100, 50};
  s.graph.meta.flops_per_token = 1e9;
  s.graph.meta.peak_flops_per_device = 1e18;
  s.add(0, NodeKind::compute, 4, 0, 0, 10);
  s.add(0, NodeKind::compute, 0, 4, 30, 40);
  s.add(0, NodeKind::send, 0, 0, 10, 12);
  s.add(1, NodeKind::recv, 0, 0, 10, 12);
  s.add(1, NodeKind::compute, 2, 0, 12, 20);
  s.add(1, NodeKind::compute, 0, 2, 20, 28);
  s.add(1, NodeKind::compute, 3, 0, 28, 36);
  return s;
}

TEST(StepMetrics, ByHandOnASmallGraph) {
  const Small s = small();
  const StepMetrics m = step_metrics(s.graph, s.times);
  EXPECT_EQ(m.makespan_us, 40.0);
  ASSERT_EQ(m.devices.size(), 2u);
  EXPECT_EQ(m.devices[0].busy_us, 20.0);  // compute only: the send does not count
  EXPECT_EQ(m.devices[0].first_start_us, 0.0);
  EXPECT_EQ(m.devices[0].last_end_us, 40.0);
  EXPECT_EQ(m.devices[0].span_us, 40.0);
  EXPECT_EQ(m.devices[0].bubble_ratio, 0.5);
  EXPECT_EQ(m.devices[1].busy_us, 24.0);
  EXPECT_EQ(m.devices[1].first_start_us, 12.0);
  EXPECT_EQ(m.devices[1].span_us, 24.0);
  EXPECT_EQ(m.devices[1].bubble_ratio, 16.0 / 40.0);
  EXPECT_EQ(m.max_stage_span_us, 40.0);
  EXPECT_EQ(m.bubble_ratio, 1.0 - 44.0 / 80.0);
  EXPECT_EQ(m.span_bubble_ratio, 1.0 - 44.0 / 80.0);
  const double tokens_per_s = 4 * 2 * 1000 / (40.0 * 1e-6);
  EXPECT_EQ(m.tokens_per_s, tokens_per_s);
  EXPECT_EQ(m.mfu, tokens_per_s * 1e9 / (2 * 1e18));
  using Timeline = std::vector<std::pair<double, std::int64_t>>;
  EXPECT_EQ(m.devices[0].memory_timeline, (Timeline{{0, 104}, {40, 100}}));
  // At 28 the B's release comes before the next F's allocation: the peak is 53, not 55.
  EXPECT_EQ(m.devices[1].memory_timeline, (Timeline{{0, 50}, {12, 52}, {28, 53}}));
  EXPECT_EQ(m.devices[0].peak_memory_bytes, 104);
  EXPECT_EQ(m.devices[1].peak_memory_bytes, 53);
  EXPECT_EQ(m.peak_memory_bytes(), (std::vector<std::int64_t>{104, 53}));
}

TEST(StepMetrics, OfTheSimulatorsTimesAreTheSimulatorsMetrics) {
  for (const auto mode : {BackwardMode::fused, BackwardMode::twobp, BackwardMode::twobp_fill}) {
    PlanRequest r = testing::uniform_request(
        {.devices = 4, .microbatches = 8, .backward = mode, .comm = 0.1, .p2_concat = 2});
    r.bpipe = mode == BackwardMode::twobp ? BpipeMode::on : BpipeMode::off;
    Plan plan = make_plan(r);
    plan.graph.meta.flops_per_token = 3e9;  // a uniform profile has no FLOP count
    plan.graph.meta.peak_flops_per_device = 1e15;
    const SimResult sim = simulate(plan.graph);
    EXPECT_GT(sim.mfu, 0.0);
    testing::expect_same_metrics(step_metrics(plan.graph, sim.times), sim);
  }
}

TEST(StepMetrics, RefusesTimesThatDoNotCoverTheGraph) {
  Small s = small();
  s.times.pop_back();
  try {
    step_metrics(s.graph, s.times);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "step metrics: 6 node times for a task graph of 7 nodes");
  }
}

}  // namespace
}  // namespace pipeplan
