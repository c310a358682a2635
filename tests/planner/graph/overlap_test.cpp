// Overlapped pairs in the task graph (Node::overlaps_next, planner/graph/taskgraph.h): what the
// plan file keeps of them, what the validator refuses (rule "overlap"), how the simulator times
// them (profiles/overlap.h), with and without the contention model.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"
#include "planner/graph/validator.h"
#include "profiles/overlap.h"
#include "profiles/profile.h"
#include "tests/error_support.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

using nlohmann::json;
using testing::error_of;

Plan dualpipe_v(double efficiency, double f = 2, double b = 2, double w = 2) {
  PlanRequest r = testing::uniform_request({.devices = 4,
                                            .microbatches = 8,
                                            .chunks = 2,
                                            .schedule = "dualpipe-v",
                                            .backward = BackwardMode::twobp,
                                            .f = f,
                                            .b = b,
                                            .w = w,
                                            .comm = 0.1});
  r.profile.overlap = {efficiency, "test"};
  return make_plan(r);
}

TEST(OverlapTime, IsTheLongerOpPlusWhatIsNotHidden) {
  EXPECT_DOUBLE_EQ(overlapped_time_us(3, 5, 0.0), 8);
  EXPECT_DOUBLE_EQ(overlapped_time_us(3, 5, 1.0), 5);
  EXPECT_DOUBLE_EQ(overlapped_time_us(3, 5, 0.5), 6.5);
  EXPECT_DOUBLE_EQ(overlap_efficiency_from(3, 5, 6.5), 0.5);
  EXPECT_DOUBLE_EQ(overlap_efficiency_from(3, 5, 9), 0.0);  // slower than in sequence
  EXPECT_DOUBLE_EQ(overlap_efficiency_from(3, 5, 4), 1.0);  // faster than the bound
  EXPECT_EQ(overlap_from_json(json::parse(R"({"efficiency": 0.25, "source": "s"})"), "p.json"),
            (OverlapModel{0.25, "s"}));
  EXPECT_EQ(error_of([] { overlap_from_json(json::parse(R"({"efficiency": 1.5})"), "p.json"); }),
            "p.json: field 'overlap.efficiency' must be a number from 0 to 1");
  EXPECT_EQ(error_of([] { overlap_from_json(json::parse("{}"), "p.json"); }),
            "p.json: field 'overlap.efficiency' is missing");
  EXPECT_EQ(error_of([] { overlap_from_json(json::parse("[]"), "p.json"); }),
            "p.json: field 'overlap' must be an object");
}

// Both members start when both have their inputs and end after their overlapped time; the
// device counts that time once.
TEST(OverlapSimulation, BothMembersShareOneStartAndOneEnd) {
  for (const double e : {0.0, 0.5, 1.0}) {
    const Plan plan = dualpipe_v(e, 2, 3, 1);
    const std::vector<OverlapPair> pairs = overlap_pairs(plan.graph);
    ASSERT_FALSE(pairs.empty());
    std::vector<double> busy(4, 0);
    for (const OverlapPair& p : pairs) {
      const Node& a = plan.graph.node(p.first);
      const Node& b = plan.graph.node(p.second);
      EXPECT_EQ(a.op, OpType::F);
      EXPECT_TRUE(b.op == OpType::B || b.op == OpType::P1);
      const NodeTime& ta = plan.sim.times[static_cast<std::size_t>(p.first)];
      const NodeTime& tb = plan.sim.times[static_cast<std::size_t>(p.second)];
      EXPECT_EQ(ta.start_us, tb.start_us);
      EXPECT_EQ(ta.end_us, tb.end_us);
      EXPECT_NEAR(ta.end_us - ta.start_us, overlapped_time_us(a.duration_us, b.duration_us, e),
                  1e-9);
    }
    for (int id = 0; id < plan.graph.node_count(); ++id) {
      const Node& n = plan.graph.node(id);
      if (n.kind != NodeKind::compute || n.overlaps_next) continue;
      const NodeTime& t = plan.sim.times[static_cast<std::size_t>(id)];
      busy[static_cast<std::size_t>(n.device)] += t.end_us - t.start_us;
    }
    for (int d = 0; d < 4; ++d)
      EXPECT_NEAR(plan.sim.devices[static_cast<std::size_t>(d)].busy_us,
                  busy[static_cast<std::size_t>(d)], 1e-6);
  }
}

// Under the contention model (stages sharing one GPU) a pair runs as one op: with every
// slowdown 1 the times are those of the plain loop, by ready time or not.
TEST(OverlapSimulation, SharedGpuModelAtSlowdownOneGivesTheSameTimes) {
  const Plan plan = dualpipe_v(0.5);
  TaskGraph shared = plan.graph;
  shared.meta.contention.slowdown = {1.0, 1.0, 1.0, 1.0};
  const SimResult a = simulate(shared);
  ASSERT_EQ(a.times.size(), plan.sim.times.size());
  for (std::size_t id = 0; id < a.times.size(); ++id) {
    EXPECT_NEAR(a.times[id].start_us, plan.sim.times[id].start_us, 1e-6) << id;
    EXPECT_NEAR(a.times[id].end_us, plan.sim.times[id].end_us, 1e-6) << id;
  }
  // On a slower shared GPU the members still start and end together, and the step is longer.
  shared.meta.contention.slowdown = {1.5, 2.0};
  const SimResult slow = simulate(shared);
  for (const OverlapPair& p : overlap_pairs(shared)) {
    EXPECT_EQ(slow.times[static_cast<std::size_t>(p.first)].start_us,
              slow.times[static_cast<std::size_t>(p.second)].start_us);
    EXPECT_EQ(slow.times[static_cast<std::size_t>(p.first)].end_us,
              slow.times[static_cast<std::size_t>(p.second)].end_us);
  }
  EXPECT_GT(slow.makespan_us, 1.4 * plan.sim.makespan_us);
}

TEST(OverlapPlanFile, PairsSurviveBothVersions) {
  const Plan plan = dualpipe_v(0.5);
  const std::string text = plan_to_text(plan.graph);
  const json doc = json::parse(text);
  ASSERT_TRUE(doc["nodes"].contains("overlapped"));
  EXPECT_EQ(doc["meta"]["overlap"], json::parse(R"({"efficiency": 0.5, "source": "test"})"));
  const TaskGraph back = plan_from_text(text, "p.json");
  EXPECT_EQ(overlap_pairs(back).size(), overlap_pairs(plan.graph).size());
  EXPECT_EQ(back.meta.overlap, plan.graph.meta.overlap);
  EXPECT_EQ(plan_to_text(back), text);
  const TaskGraph v2 = plan_from_json(plan_to_json(plan.graph), "p.json");
  EXPECT_EQ(overlap_pairs(v2).size(), overlap_pairs(plan.graph).size());
  EXPECT_EQ(plan_to_json(v2), plan_to_json(plan.graph));
  // A plan without pairs has no such column.
  EXPECT_FALSE(
      json::parse(plan_to_text(testing::uniform_plan({}).graph))["nodes"].contains("overlapped"));
}

TEST(OverlapPlanFile, BadColumnsAreOneLine) {
  json doc = json::parse(plan_to_text(dualpipe_v(0).graph));
  json bad = doc;
  bad["nodes"]["overlapped"] = json::array({5, 3});
  EXPECT_NE(error_of([&] {
              plan_from_text(bad.dump(), "p.json");
            }).find("field 'nodes.overlapped' must hold increasing node ids"),
            std::string::npos);
  bad = doc;
  const std::string kinds = doc["nodes"]["kind"];
  const int send = static_cast<int>(kinds.find('s'));
  bad["nodes"]["overlapped"] = json::array({send});
  EXPECT_EQ(error_of([&] { plan_from_text(bad.dump(), "p.json"); }),
            "p.json: node " + std::to_string(send) +
                ": only a compute node can be in field 'nodes.overlapped'");
}

std::string violated(const TaskGraph& g) {
  const auto v = find_violation(g);
  return v ? v->rule + ": " + v->message : "";
}

TEST(OverlapValidator, RefusesPairsThatCannotRunAsOne) {
  const Plan plan = dualpipe_v(0.5);
  ASSERT_EQ(violated(plan.graph), "");
  const OverlapPair first = overlap_pairs(plan.graph).front();
  {  // a flag the schedule does not have
    TaskGraph g = plan.graph;
    const int compute = g.node(first.first).stream;
    const std::vector<int>& order = g.stream_order(compute);
    const int plain = *std::find_if(order.begin(), order.end(), [&](int id) {
      return g.node(id).op == OpType::F && !g.node(id).overlaps_next &&
             !g.node(order[static_cast<std::size_t>(std::find(order.begin(), order.end(), id) -
                                                    order.begin()) +
                           1])
                  .overlaps_next;
    });
    g.node(plain).overlaps_next = true;
    EXPECT_NE(violated(g).find("overlap: "), std::string::npos) << violated(g);
  }
  {  // the pair's first member feeding its second
    TaskGraph g = plan.graph;
    g.add_data_edge(first.first, first.second);
    EXPECT_NE(violated(g).find("feeds"), std::string::npos) << violated(g);
  }
  {  // a pair dropped from the graph only
    TaskGraph g = plan.graph;
    g.node(first.first).overlaps_next = false;
    EXPECT_NE(violated(g).find("overlapped pairs, the graph"), std::string::npos) << violated(g);
  }
}

}  // namespace
}  // namespace pipeplan
