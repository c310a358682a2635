// Step metrics from node times (planner/graph/metrics.h), by hand on small graphs.
#include "planner/graph/metrics.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/base/error.h"

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

// A node that starts and ends at one instant still holds its working memory for that instant
// (its release, ordered by bytes alone, came before its start), and several such nodes at one
// instant, one after another on their stream, never add up.
TEST(StepMetrics, AnOpOfNoDurationStillHoldsItsMemory) {
  Small s;
  s.graph.meta.devices = 2;
  s.graph.meta.microbatches = 4;
  s.graph.meta.static_bytes = {100, 50};
  for (int k = 0; k < 8; ++k) {
    const int id = s.add(0, NodeKind::compute, 0, 0, 5, 5);
    s.graph.node(id).work_bytes = std::int64_t{1} << 60;
  }
  s.add(1, NodeKind::compute, 6, 0, 0, 5);
  s.add(1, NodeKind::compute, 0, 6, 5, 5);  // frees at its one instant what the first allocated
  const StepMetrics m = step_metrics(s.graph, s.times);
  EXPECT_EQ(m.devices[0].peak_memory_bytes, 100 + (std::int64_t{1} << 60));
  EXPECT_EQ(m.devices[1].peak_memory_bytes, 56);
  EXPECT_EQ(m.devices[1].memory_timeline.back().second, 50);
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

// One device on which an overlapped pair ran on two streams, A at 0-10 and B at 4-16, then C at
// 20-25: the pair keeps the device busy over the union of its times (16 us, not 10 + 12), so busy
// is 16 + 5 = 21. A allocates 4 and holds 2 of working memory while it runs, B holds 3, C frees
// the 4; static 10. Memory: 16 at 0, 19 at 4, 17 at 10 (A's working memory back), 14 at 16,
// 10 at 25.
TEST(StepMetrics, ByHandWithAPartlyOverlappedPairAndWorkingMemory) {
  Small s;
  s.graph.meta.devices = 1;
  s.graph.meta.microbatches = 2;
  s.graph.meta.mbs = 1;
  s.graph.meta.seq = 100;
  s.graph.meta.static_bytes = {10};
  const int a = s.add(0, NodeKind::compute, 4, 0, 0, 10);
  const int b = s.add(0, NodeKind::compute, 0, 0, 4, 16);
  s.add(0, NodeKind::compute, 0, 4, 20, 25);
  s.graph.node(a).overlaps_next = true;
  s.graph.node(a).work_bytes = 2;
  s.graph.node(b).work_bytes = 3;
  const StepMetrics m = step_metrics(s.graph, s.times);
  EXPECT_EQ(m.makespan_us, 25.0);
  ASSERT_EQ(m.devices.size(), 1u);
  EXPECT_EQ(m.devices[0].busy_us, 21.0);
  EXPECT_EQ(m.devices[0].first_start_us, 0.0);
  EXPECT_EQ(m.devices[0].last_end_us, 25.0);
  EXPECT_EQ(m.devices[0].span_us, 25.0);
  EXPECT_EQ(m.devices[0].bubble_ratio, 4.0 / 25.0);
  EXPECT_EQ(m.max_stage_span_us, 25.0);
  EXPECT_EQ(m.bubble_ratio, 1.0 - 21.0 / 25.0);
  EXPECT_EQ(m.span_bubble_ratio, 1.0 - 21.0 / 25.0);
  EXPECT_EQ(m.tokens_per_s, 2 * 1 * 100 / (25.0 * 1e-6));
  EXPECT_EQ(m.mfu, 0.0);  // no FLOP count
  using Timeline = std::vector<std::pair<double, std::int64_t>>;
  EXPECT_EQ(m.devices[0].memory_timeline,
            (Timeline{{0, 16}, {4, 19}, {10, 17}, {16, 14}, {25, 10}}));
  EXPECT_EQ(m.devices[0].peak_memory_bytes, 19);
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
