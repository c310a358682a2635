// Send/recv kinds (Node::transfer): set where the pairs are made, stored in the plan file
// (version 2), derived for version 1 files, and what the validator goes by (never the label).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"
#include "planner/graph/validator.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

StreamRole role_of(const TaskGraph& g, const Node& n) {
  return g.streams()[static_cast<std::size_t>(n.stream)].role;
}

std::map<Transfer, int> count_kinds(const TaskGraph& g) {
  std::map<Transfer, int> counts;
  for (int id = 0; id < g.node_count(); ++id)
    ++counts[g.node(id).transfer];
  return counts;
}

void expect_error(const nlohmann::json& j, const std::string& needle) {
  try {
    plan_from_json(j, "bad.json");
    ADD_FAILURE() << "accepted; expected an error mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

TEST(TransferKind, LoweringAndBpipeSetEveryKind) {
  const Plan plan = testing::uniform_bpipe_plan();
  const TaskGraph& g = plan.graph;
  for (int id = 0; id < g.node_count(); ++id) {
    const Node& n = g.node(id);
    switch (n.kind) {
      case NodeKind::compute:
        EXPECT_EQ(n.transfer, Transfer::none) << g.node_name(id);
        break;
      case NodeKind::send:
      case NodeKind::recv:
        if (role_of(g, n) == StreamRole::transfer) {
          EXPECT_TRUE(is_stash_move(n.transfer)) << g.node_name(id);
        } else {
          EXPECT_EQ(n.transfer, n.op == OpType::F ? Transfer::activation : Transfer::gradient)
              << g.node_name(id);
        }
        EXPECT_EQ(n.transfer, g.node(n.match).transfer) << g.node_name(id);
        break;
    }
  }
  const auto counts = count_kinds(g);
  EXPECT_EQ(counts.at(Transfer::activation), 2 * 3 * 8);  // send + recv, 3 boundaries, 8 mbs
  EXPECT_EQ(counts.at(Transfer::gradient), 2 * 3 * 8);
  EXPECT_GT(counts.at(Transfer::evict), 0);
  EXPECT_EQ(counts.at(Transfer::load), counts.at(Transfer::evict));
}

TEST(PlanJson, RoundTripsEveryTransferKind) {
  const Plan plan = testing::uniform_bpipe_plan();
  const nlohmann::json once = plan_to_json(plan.graph);
  EXPECT_EQ(once.at("version"), 2);
  for (int id = 0; id < plan.graph.node_count(); ++id) {
    const Node& n = plan.graph.node(id);
    const auto& j = once.at("nodes").at(static_cast<std::size_t>(id));
    if (n.kind == NodeKind::compute) {
      EXPECT_FALSE(j.contains("transfer")) << j;
    } else {
      EXPECT_EQ(j.at("transfer"), std::string(to_string(n.transfer))) << j;
    }
  }
  const TaskGraph loaded = plan_from_json(once, "mem");
  for (int id = 0; id < plan.graph.node_count(); ++id)
    EXPECT_EQ(loaded.node(id).transfer, plan.graph.node(id).transfer) << id;
  EXPECT_EQ(count_kinds(loaded), count_kinds(plan.graph));
  EXPECT_EQ(plan_to_json(loaded), once);
}

// A version 1 file: no `transfer` fields; BPipe moves known by their label alone.
nlohmann::json as_version_1(nlohmann::json j) {
  j["version"] = 1;
  for (auto& node : j["nodes"])
    node.erase("transfer");
  return j;
}

TEST(PlanJson, ReadsVersion1WithBpipeTransfersAsTheRightKinds) {
  const Plan plan = testing::uniform_bpipe_plan();
  const TaskGraph loaded = plan_from_json(as_version_1(plan_to_json(plan.graph)), "v1.json");
  for (int id = 0; id < plan.graph.node_count(); ++id)
    EXPECT_EQ(loaded.node(id).transfer, plan.graph.node(id).transfer) << plan.graph.node_name(id);
  EXPECT_FALSE(find_violation(loaded).has_value());
  EXPECT_EQ(plan_to_json(loaded), plan_to_json(plan.graph));  // written back as version 2
}

TEST(PlanJson, Version1TransferStreamNodeNeedsItsLabelPrefix) {
  const Plan plan = testing::uniform_bpipe_plan();
  nlohmann::json j = as_version_1(plan_to_json(plan.graph));
  for (int id = 0; id < plan.graph.node_count(); ++id) {
    const Node& n = plan.graph.node(id);
    if (n.kind == NodeKind::compute || role_of(plan.graph, n) != StreamRole::transfer) continue;
    j["nodes"][static_cast<std::size_t>(id)]["label"] = "stash 0F0";
    expect_error(j, "bad.json: nodes[" + std::to_string(id) + "]: field 'label'");
    return;
  }
  ADD_FAILURE() << "no transfer-stream node";
}

TEST(PlanJson, RefusesUnknownVersionsAndTransferKinds) {
  const Plan plan = testing::uniform_bpipe_plan();
  const nlohmann::json good = plan_to_json(plan.graph);
  nlohmann::json j = good;
  j["version"] = 3;
  expect_error(j, "bad.json: field 'version' is 3, this pipeplan reads versions 1 to 2");
  j["version"] = 0;
  expect_error(j, "bad.json: field 'version' is 0");
  int send = -1, compute = -1;
  for (int id = 0; id < plan.graph.node_count(); ++id) {
    (plan.graph.node(id).kind == NodeKind::compute ? compute : send) = id;
  }
  const auto at = [](int id) { return static_cast<std::size_t>(id); };
  j = good;
  j["nodes"][at(send)].erase("transfer");
  expect_error(j, "bad.json: nodes[" + std::to_string(send) + "]: missing field 'transfer'");
  j = good;
  j["nodes"][at(send)]["transfer"] = "stash";
  expect_error(j, "nodes[" + std::to_string(send) + "]: field 'transfer' must be activation");
  j = good;
  j["nodes"][at(compute)]["transfer"] = "activation";
  expect_error(j, "nodes[" + std::to_string(compute) + "]: field 'transfer' is for send/recv");
}

// Every send/recv pair gets a label that says nothing ("m<id>"), the same on both halves.
TaskGraph with_meaningless_labels(TaskGraph g) {
  for (int id = 0; id < g.node_count(); ++id) {
    Node& n = g.node(id);
    if (n.kind != NodeKind::compute) set_label(n, "m" + std::to_string(std::min(id, n.match)));
  }
  return g;
}

// Ids of one evict pair (send, recv), the first in node order.
std::pair<int, int> first_evict(const TaskGraph& g) {
  for (int id = 0; id < g.node_count(); ++id) {
    const Node& n = g.node(id);
    if (n.kind == NodeKind::send && n.transfer == Transfer::evict) return {id, n.match};
  }
  ADD_FAILURE() << "no evict";
  return {0, 0};
}

TEST(TransferKind, RenamingLabelsChangesNothing) {
  const Plan plan = testing::uniform_bpipe_plan();
  const TaskGraph renamed = with_meaningless_labels(plan.graph);
  EXPECT_FALSE(find_violation(renamed).has_value());
  const SimResult sim = simulate(renamed);
  EXPECT_EQ(sim.makespan_us, plan.sim.makespan_us);
  EXPECT_EQ(sim.peak_memory_bytes(), plan.sim.peak_memory_bytes());
}

// The first violation is of `rule` and its message holds `needle`.
void expect_violation(const TaskGraph& g, const std::string& rule, const std::string& needle) {
  const auto v = find_violation(g);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rule, rule) << v->message;
  EXPECT_NE(v->message.find(needle), std::string::npos) << v->message;
}

TEST(TransferKind, TheValidatorGoesByTheKind) {
  const Plan plan = testing::uniform_bpipe_plan();
  const TaskGraph renamed = with_meaningless_labels(plan.graph);
  {  // an evict turned into a load, labels untouched: its stash was never evicted
    TaskGraph g = renamed;
    const auto [send, recv] = first_evict(g);
    g.node(send).transfer = g.node(recv).transfer = Transfer::load;
    expect_violation(g, "transfer-use", "evict");
  }
  {  // the halves disagree
    TaskGraph g = renamed;
    g.node(first_evict(g).second).transfer = Transfer::load;
    expect_violation(g, "send-recv-match", "transfer kind 'evict' differs from its match's 'load'");
  }
  {  // a kind that does not fit the stream
    TaskGraph g = renamed;
    g.node(first_evict(g).first).transfer = Transfer::activation;
    expect_violation(g, "stream", "'activation', which does not fit a transfer stream");
  }
  for (int id = 0; id < renamed.node_count(); ++id) {  // one that does not fit the op
    if (renamed.node(id).transfer != Transfer::activation) continue;
    TaskGraph g = renamed;
    g.node(id).transfer = g.node(g.node(id).match).transfer = Transfer::gradient;
    expect_violation(g, "stream", "op F");
    break;
  }
}

}  // namespace
}  // namespace pipeplan
