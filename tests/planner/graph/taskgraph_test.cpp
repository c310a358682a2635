// Lowering a schedule to a task graph, and the plan file's JSON and DOT forms.
#include "planner/graph/taskgraph.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/graph/simulator.h"
#include "tests/cli_support.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

using testing::uniform_plan;

TEST(Lowering, OneNodePerActionAndAPairPerCrossing) {
  const int p = 4, m = 8;
  const Plan fused = uniform_plan({.devices = p, .microbatches = m, .comm = 0.1});
  int compute = 0, sends = 0, recvs = 0;
  for (int id = 0; id < fused.graph.node_count(); ++id) {
    switch (fused.graph.node(id).kind) {
      case NodeKind::compute:
        ++compute;
        break;
      case NodeKind::send:
        ++sends;
        break;
      case NodeKind::recv:
        ++recvs;
        break;
    }
  }
  EXPECT_EQ(compute, 2 * p * m);      // F and B per stage and micro-batch
  EXPECT_EQ(sends, 2 * (p - 1) * m);  // activations forward, gradients back
  EXPECT_EQ(recvs, sends);
  // Streams: a compute stream per device, a send and a recv stream per neighbour.
  EXPECT_EQ(fused.graph.streams().size(), static_cast<std::size_t>(p + 4 * (p - 1)));
}

TEST(Lowering, MemoryEffectsFollowTheBackwardMode) {
  const Plan plan = uniform_plan(
      {.devices = 2, .microbatches = 2, .backward = BackwardMode::twobp, .p2_concat = 1});
  const auto gib = static_cast<std::int64_t>(testing::kGiB);
  for (int id = 0; id < plan.graph.node_count(); ++id) {
    const Node& n = plan.graph.node(id);
    if (n.kind != NodeKind::compute) continue;
    switch (n.op) {
      case OpType::F:
        EXPECT_EQ(n.alloc_bytes, gib);
        EXPECT_EQ(n.free_bytes, 0);
        break;
      case OpType::P1:  // the stash (1 GiB) becomes the retained X/dY (0.5 GiB)
        EXPECT_EQ(n.alloc_bytes, 0);
        EXPECT_EQ(n.free_bytes, gib / 2);
        break;
      case OpType::P2:
        EXPECT_EQ(n.alloc_bytes, 0);
        EXPECT_EQ(n.free_bytes, gib / 2);
        break;
      case OpType::B:
        ADD_FAILURE() << "no fused backward in 2bp";
        break;
      case OpType::O:
        ADD_FAILURE() << "no optimizer step: the uniform profile gives none";
        break;
    }
  }
}

// lower_and_check: the graph lower() makes, and on a schedule that breaks a rule, check_schedule's
// error (not lowering's), both below and above the size where the check runs on the helper thread.
TEST(Lowering, LowerAndCheckGivesLowersGraphAndTheChecksError) {
  for (const int m : {8, 256}) {
    const Plan plan = uniform_plan(
        {.devices = 8, .microbatches = m, .backward = BackwardMode::twobp, .comm = 0.05});
    const TaskGraph& g = plan.graph;
    StageCost cost;
    cost.forward_us = cost.p1_us = cost.p2_us = 1;
    const std::vector<StageCost> costs(static_cast<std::size_t>(g.schedule.stage_count()), cost);
    EXPECT_EQ(plan_to_json(lower_and_check(Schedule(g.schedule), costs, g.meta)),
              plan_to_json(lower(g.schedule, costs, g.meta)))
        << m;
    Schedule broken = g.schedule;
    broken.per_device[3].push_back(broken.per_device[3].front());  // a second F of one batch
    std::string check_error, lower_error = "none";
    try {
      check_schedule(broken);
    } catch (const Error& e) {
      check_error = e.what();
    }
    ASSERT_FALSE(check_error.empty());
    try {
      lower_and_check(std::move(broken), costs, g.meta);
    } catch (const Error& e) {
      lower_error = e.what();
    }
    EXPECT_EQ(lower_error, check_error) << m;
  }
}

TEST(PlanJson, RoundTripsExactly) {
  for (const auto mode : {BackwardMode::fused, BackwardMode::twobp, BackwardMode::twobp_fill}) {
    const Plan plan = uniform_plan({.devices = 3,
                                    .microbatches = 6,
                                    .chunks = 2,
                                    .schedule = "interleaved",
                                    .backward = mode,
                                    .comm = 0.2});
    const nlohmann::json once = plan_to_json(plan.graph);
    const TaskGraph loaded = plan_from_json(once, "mem");
    EXPECT_EQ(plan_to_json(loaded), once);
    const SimResult again = simulate(loaded);
    EXPECT_DOUBLE_EQ(again.makespan_us, plan.sim.makespan_us);
    EXPECT_EQ(again.peak_memory_bytes(), plan.sim.peak_memory_bytes());
  }
}

// Written through a temporary renamed over the target (tests/cli_support.h).
class PlanJsonFile : public testing::TempDirTest {};

TEST_F(PlanJsonFile, SaveIsAtomicAndLoads) {
  const Plan plan = uniform_plan({});
  testing::expect_written_atomically(dir_, "plan.json", [&](const std::filesystem::path& path) {
    save_plan(plan.graph, path);
    EXPECT_EQ(plan_to_json(load_plan(path)), plan_to_json(plan.graph));
  });
}

TEST(PlanJson, RejectsWrongVersionAndBadFields) {
  const nlohmann::json good = plan_to_json(uniform_plan({}).graph);
  auto expect_error = [](const nlohmann::json& j, const std::string& needle) {
    try {
      plan_from_json(j, "bad.json");
      ADD_FAILURE() << "accepted; expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  };
  nlohmann::json j = good;
  j["version"] = 3;
  expect_error(j, "'version'");
  j = good;
  j["format"] = "something-else";
  expect_error(j, "'format'");
  j = good;
  j["nodes"][3]["duration_us"] = -1;
  expect_error(j, "nodes[3]: field 'duration_us' must not be negative");
  j = good;
  j["nodes"][0].erase("device");
  expect_error(j, "nodes[0]: missing field 'device'");
  j = good;
  j["edges"][0] = {0, 999999};
  expect_error(j, "edges[0]");
  j = good;
  j["meta"]["static_bytes"] = {1};
  expect_error(j, "static_bytes");
  // meta says what the schedule says (diff matches traces by both; show prints them).
  j = good;
  j["meta"]["backward"] = "2bp";
  expect_error(j, "bad.json: field 'meta.backward' is '2bp' but the schedule's is 'fused'");
  j = good;
  j["meta"]["schedule"] = "zb-h1";
  expect_error(j, "bad.json: field 'meta.schedule' is 'zb-h1' but the schedule's family is '");
  j = good;
  j["meta"]["chunks"] = 2;
  expect_error(j, "field 'meta.chunks' is 2 but");
  j = good;
  j["schedule"] = 5;
  try {
    plan_from_json(j, "bad.json");
    ADD_FAILURE() << "a number for the schedule was read";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "bad.json: field 'schedule' must be a string");  // named once
  }
}

TEST(PlanDot, WritesEveryNodeAndEdge) {
  const Plan plan = uniform_plan({.devices = 2, .microbatches = 2, .comm = 0.1});
  std::ostringstream out;
  write_dot(plan.graph, out);
  const std::string dot = out.str();
  EXPECT_EQ(dot.rfind("digraph", 0), 0u);
  EXPECT_NE(dot.find("0F1"), std::string::npos);
  EXPECT_NE(dot.find("style=dashed"), std::string::npos);  // stream-order edges
  std::size_t arrows = 0;
  for (std::size_t pos = dot.find("->"); pos != std::string::npos; pos = dot.find("->", pos + 2)) {
    ++arrows;
  }
  EXPECT_EQ(arrows, boost::num_edges(plan.graph.graph()));
}

TEST(PlanDot, QuotesAndBackslashesAreEscapedAndControlCharactersReplaced) {
  Plan plan = uniform_plan({.devices = 2, .microbatches = 2, .comm = 0.1});
  set_label(plan.graph.node(0), "a\"} [x\\y");
  set_label(plan.graph.node(1), "b\x1b[31m\nc");
  plan.graph.meta.schedule = "1f1b\"}";
  std::ostringstream out;
  write_dot(plan.graph, out);
  const std::string dot = out.str();
  EXPECT_NE(dot.find("label=\"1f1b\\\"} / "), std::string::npos) << dot;
  EXPECT_NE(dot.find("0[label=\"a\\\"} [x\\\\y\\nd0\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("1[label=\"b?[31m?c\\nd0\""), std::string::npos) << dot;
  // Every quote outside the escaped ones closes what it opened: an even count per line.
  std::istringstream lines(dot);
  for (std::string line; std::getline(lines, line);) {
    int quotes = 0;
    for (std::size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\\') {
        ++i;
      } else if (line[i] == '"') {
        ++quotes;
      }
    }
    EXPECT_EQ(quotes % 2, 0) << line;
  }
}

}  // namespace
}  // namespace pipeplan
