// The validator catches planted faults and names the node and the rule.
#include "planner/graph/validator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/graph/simulator.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

// A peak one byte above its limit reads alike in GiB: both get their bytes beside.
TEST(Validator, APeakAndItsLimitThatReadAlikeAreToldApart) {
  EXPECT_EQ(gib_texts_apart(8005823488.0, 8005823487.0),
            (std::pair<std::string, std::string>{"7.46 GiB (8005823488 bytes)",
                                                 "7.46 GiB (8005823487 bytes)"}));
  EXPECT_EQ(gib_texts_apart(8.0 * (1 << 30), 4.0 * (1 << 30)),
            (std::pair<std::string, std::string>{"8.00 GiB", "4.00 GiB"}));
}

using testing::uniform_plan;

Plan sample(BackwardMode mode = BackwardMode::twobp) {
  return uniform_plan({.devices = 4, .microbatches = 8, .backward = mode, .comm = 0.1});
}

// Overlapped pairs: dualpipe-v's F&B.
Plan dualpipe_v_sample() {
  return uniform_plan({.devices = 4,
                       .microbatches = 8,
                       .chunks = 2,
                       .schedule = "dualpipe-v",
                       .backward = BackwardMode::twobp});
}

int find_node(const TaskGraph& g, NodeKind kind, const std::string& label, int device = -1) {
  for (int id = 0; id < g.node_count(); ++id) {
    const Node& n = g.node(id);
    if (n.kind == kind && node_label(n) == label && (device < 0 || n.device == device)) return id;
  }
  ADD_FAILURE() << "no node " << label;
  return -1;
}

int compute_stream(const TaskGraph& g, int device) {
  for (std::size_t s = 0; s < g.streams().size(); ++s) {
    if (g.streams()[s].device == device && g.streams()[s].role == StreamRole::compute) {
      return static_cast<int>(s);
    }
  }
  return -1;
}

Violation expect_violation(const TaskGraph& g, const std::string& rule) {
  const auto v = find_violation(g);
  EXPECT_TRUE(v.has_value());
  if (!v) return {};
  EXPECT_EQ(v->rule, rule) << v->message;
  EXPECT_NE(v->message.find("rule " + rule), std::string::npos);
  return *v;
}

TEST(Validator, GeneratedPlansAreValid) {
  for (const auto mode : {BackwardMode::fused, BackwardMode::twobp, BackwardMode::twobp_fill}) {
    EXPECT_FALSE(find_violation(sample(mode).graph).has_value());
  }
}

TEST(Validator, CatchesACycle) {
  Plan plan = sample();
  TaskGraph& g = plan.graph;
  // Device 1's forward of micro-batch 0 made to wait for its own backward.
  const int f = find_node(g, NodeKind::compute, "1F0");
  const int b = find_node(g, NodeKind::compute, "1P1_0");
  g.add_data_edge(b, f);
  const Violation v = expect_violation(g, "acyclic");
  EXPECT_NE(v.message.find("cycle"), std::string::npos);
}

// Stream orders: a node left out of every order, and one listed twice (which, with one left out,
// keeps the number of listings equal to the number of nodes).
TEST(Validator, CatchesANodeInNoStreamOrderAndOneListedTwice) {
  {
    Plan plan = sample();
    TaskGraph& g = plan.graph;
    Node extra = g.node(find_node(g, NodeKind::compute, "0F0"));
    const int id = g.add_node_unordered(std::move(extra));
    const Violation v = expect_violation(g, "stream");
    EXPECT_EQ(v.node, id);
    EXPECT_NE(v.message.find("is in no stream order"), std::string::npos) << v.message;
  }
  {
    Plan plan = sample();
    TaskGraph& g = plan.graph;
    const int stream = compute_stream(g, 0);
    std::vector<int> order = g.stream_order(stream);
    order.back() = order.front();  // the last node listed nowhere, the first twice
    g.set_stream_order(stream, order);
    const Violation v = expect_violation(g, "stream");
    EXPECT_EQ(v.node, order.front());
    EXPECT_NE(v.message.find("appears twice"), std::string::npos) << v.message;
  }
}

TEST(Validator, CatchesAnUnmatchedSend) {
  Plan plan = sample();
  const int send = find_node(plan.graph, NodeKind::send, "0F3");
  plan.graph.node(send).match = -1;
  const Violation v = expect_violation(plan.graph, "send-recv-match");
  EXPECT_EQ(v.node, send);
  EXPECT_NE(v.message.find("0F3"), std::string::npos);
}

// The match rule reads each pair once, from its first node: whichever half of a pair a fault is
// planted in, the violation names the node that checking every send and recv in full, in id order,
// names first (the reference below).
TEST(Validator, MatchFaultsInEitherHalfNameTheFirstFailingNode) {
  const auto fails = [](const TaskGraph& g, int id) {
    const Node& n = g.node(id);
    if (n.match < 0 || n.match >= g.node_count()) return true;
    const Node& m = g.node(n.match);
    return m.kind == n.kind || m.kind == NodeKind::compute || m.match != id || m.device != n.peer ||
           m.peer != n.device || m.transfer != n.transfer || m.bytes != n.bytes ||
           !same_label(m, n);
  };
  const std::vector<std::function<void(Node&)>> faults = {
      [](Node& n) { n.match = -1; },
      [](Node& n) { n.match += 2; },
      [](Node& n) { n.match -= 2; },
      [](Node& n) { n.peer = (n.peer + 1) % 4; },
      [](Node& n) { n.bytes += 1; },
      [](Node& n) { n.transfer = Transfer::evict; },
      [](Node& n) { n.microbatches = MicroBatches{n.microbatches.front() + 1}; },
  };
  const Plan base = sample();
  int planted = 0;
  for (int id = 0; id < base.graph.node_count(); id += 7) {
    if (base.graph.node(id).kind == NodeKind::compute) continue;
    for (const auto& fault : faults) {
      Plan plan = base;
      fault(plan.graph.node(id));
      int expected = -1;
      for (int other = 0; other < plan.graph.node_count() && expected < 0; ++other) {
        if (plan.graph.node(other).kind != NodeKind::compute && fails(plan.graph, other))
          expected = other;
      }
      ASSERT_GE(expected, 0);
      const auto v = find_violation(plan.graph);
      ASSERT_TRUE(v.has_value());
      if (v->rule == "stream") continue;  // the earlier stream rule caught it (peer, transfer)
      EXPECT_EQ(v->rule, "send-recv-match") << v->message;
      EXPECT_EQ(v->node, expected) << v->message;
      ++planted;
    }
  }
  EXPECT_GT(planted, 20);
}

TEST(Validator, CatchesASizeMismatch) {
  Plan plan = sample();
  const int send = find_node(plan.graph, NodeKind::send, "1F2");
  plan.graph.node(send).bytes += 1;
  expect_violation(plan.graph, "send-recv-match");
}

TEST(Validator, CatchesTwoSendsSwapped) {
  Plan plan = sample();
  TaskGraph& g = plan.graph;
  const int send_stream = g.node(find_node(g, NodeKind::send, "0F0")).stream;
  std::vector<int> order = g.stream_order(send_stream);
  std::swap(order[1], order[2]);
  g.set_stream_order(send_stream, order);
  const Violation v = expect_violation(g, "send-recv-order");
  EXPECT_EQ(v.node, order[1]);
}

TEST(Validator, CatchesP2BeforeP1) {
  Plan plan = sample();
  TaskGraph& g = plan.graph;
  const int stream = compute_stream(g, 2);
  std::vector<int> order = g.stream_order(stream);
  // Move the p2 holding micro-batch 0 on device 2 to the front of the stream.
  int p2 = -1;
  for (const int id : order) {
    const Node& n = g.node(id);
    if (n.op == OpType::P2 && n.microbatches.front() == 0) p2 = id;
  }
  ASSERT_GE(p2, 0);
  order.erase(std::find(order.begin(), order.end(), p2));
  order.insert(order.begin() + 1, p2);
  g.set_stream_order(stream, order);
  const auto v = find_violation(g);
  ASSERT_TRUE(v.has_value());
  // Moving it first also closes a cycle through its data edge from p1; either rule names it.
  EXPECT_TRUE(v->rule == "p1-before-p2" || v->rule == "acyclic") << v->message;
}

TEST(Validator, CatchesP2BeforeP1InOrderWithoutDataEdge) {
  // Same fault, with the data edge removed so only the order rule can see it.
  Plan plan = sample();
  nlohmann::json j = plan_to_json(plan.graph);
  const int p2 = find_node(plan.graph, NodeKind::compute, "2P2_0+1+2+3+4+5+6+7");
  nlohmann::json edges = nlohmann::json::array();
  for (const auto& e : j["edges"]) {
    if (e[1].get<int>() != p2) edges.push_back(e);
  }
  j["edges"] = edges;
  for (auto& s : j["streams"]) {
    auto order = s["order"].get<std::vector<int>>();
    const auto it = std::find(order.begin(), order.end(), p2);
    if (it == order.end()) continue;
    order.erase(it);
    order.insert(order.begin(), p2);
    s["order"] = order;
  }
  const TaskGraph g = plan_from_json(j, "edited.json");
  const Violation v = expect_violation(g, "p1-before-p2");
  EXPECT_EQ(v.node, p2);
}

// `g` written and read back without the edges `drop` picks (from, to) and with `add`.
TaskGraph edited(const TaskGraph& g, const std::function<bool(const Node&, const Node&)>& drop,
                 const std::vector<std::pair<int, int>>& add = {}) {
  nlohmann::json j = plan_to_json(g);
  nlohmann::json edges = nlohmann::json::array();
  for (const auto& e : j["edges"]) {
    if (!drop(g.node(e[0].get<int>()), g.node(e[1].get<int>()))) edges.push_back(e);
  }
  for (const auto& [from, to] : add)
    edges.push_back({from, to});
  j["edges"] = edges;
  return plan_from_json(j, "edited.json");
}

TEST(Validator, CatchesAMissingInputEdge) {
  Plan plan = sample();
  const int consumer = find_node(plan.graph, NodeKind::compute, "2F5");
  const Node& f = plan.graph.node(consumer);
  const Violation v = expect_violation(
      edited(plan.graph, [&](const Node& from,
                             const Node& to) { return &to == &f && from.kind == NodeKind::recv; }),
      "inputs");
  EXPECT_EQ(v.node, consumer);
}

// A data edge between devices moves no tensor: the activation still has to come through the
// send and recv. The forward's edge to its send is replaced by one straight to the next stage's
// forward.
TEST(Validator, ADataEdgeFromAnotherDeviceIsNoInput) {
  Plan plan = sample();
  const TaskGraph& g = plan.graph;
  const int producer = find_node(g, NodeKind::compute, "1F5");
  const int consumer = find_node(g, NodeKind::compute, "2F5");
  const Node& f = g.node(producer);
  const Violation v = expect_violation(edited(g,
                                              [&](const Node& from, const Node& to) {
                                                return &from == &f && to.kind == NodeKind::send;
                                              },
                                              {{producer, consumer}}),
                                       "inputs");
  EXPECT_EQ(v.node, consumer);
}

// A message carries the tensor it is keyed by (its op, stage and micro-batch) from its own
// device: a producer's edge into another micro-batch's send, or into a send on another device,
// moves nothing the consumer can read.
TEST(Validator, AnInputThroughAnotherOpsMessageIsNoInput) {
  Plan plan = sample();
  const TaskGraph& g = plan.graph;
  const int producer = find_node(g, NodeKind::compute, "1F5");
  const int consumer = find_node(g, NodeKind::compute, "2F5");
  const Node& c = g.node(consumer);
  const auto recv_into_consumer = [&](const Node& from, const Node& to) {
    return &to == &c && from.kind == NodeKind::recv;
  };
  // 1F5 feeds the send of 1F4 (its own device, its own kind of message), whose recv feeds 2F5.
  const int other_mb = find_node(g, NodeKind::send, "1F4");
  const Violation v = expect_violation(
      edited(g, recv_into_consumer, {{producer, other_mb}, {g.node(other_mb).match, consumer}}),
      "inputs");
  EXPECT_EQ(v.node, consumer);
  // 1F5 feeds the send of 2F4, on stage 2's device, whose recv (on stage 3's) feeds 2F5.
  const int other_device = find_node(g, NodeKind::send, "2F4");
  ASSERT_NE(g.node(other_device).device, g.node(producer).device);
  const Violation w =
      expect_violation(edited(g, recv_into_consumer,
                              {{producer, other_device}, {g.node(other_device).match, consumer}}),
                       "inputs");
  EXPECT_EQ(w.node, consumer);
}

TEST(Validator, CatchesASendThatWaitsForItsOwnRecv) {
  Plan plan = sample();
  TaskGraph& g = plan.graph;
  const int send = find_node(g, NodeKind::send, "1F5");
  const int recv = g.node(send).match;
  g.add_data_edge(recv, send);
  EXPECT_THROW(static_cast<void>(simulate(g)), Error);
  const Violation v = expect_violation(g, "acyclic");
  EXPECT_EQ(v.node, recv);
}

// The second member of an overlapped pair feeding the first is a cycle, though the stream-order
// edge from the first to the second is no wait.
TEST(Validator, AnEdgeBackInsideAnOverlappedPairIsACycle) {
  Plan plan = dualpipe_v_sample();
  TaskGraph& g = plan.graph;
  const std::vector<int>& order = g.stream_order(compute_stream(g, 0));
  int first = -1;
  for (std::size_t i = 0; i + 1 < order.size() && first < 0; ++i) {
    if (g.node(order[i]).overlaps_next) {
      first = order[i];
      g.add_data_edge(order[i + 1], first);
    }
  }
  ASSERT_GE(first, 0) << "no overlapped pair on device 0";
  EXPECT_THROW(static_cast<void>(simulate(g)), Error);
  expect_violation(g, "acyclic");
}

// `g` written and read back without the nodes `drop` (ids renumbered in the nodes, their matches,
// the edges and the stream orders).
TaskGraph without_nodes(const TaskGraph& g, const std::set<int>& drop) {
  nlohmann::json j = plan_to_json(g);
  std::vector<int> renumbered(static_cast<std::size_t>(g.node_count()), -1);
  int next = 0;
  for (int id = 0; id < g.node_count(); ++id) {
    if (!drop.contains(id)) renumbered[static_cast<std::size_t>(id)] = next++;
  }
  const auto to = [&](const nlohmann::json& id) {
    return renumbered[static_cast<std::size_t>(id.get<int>())];
  };
  nlohmann::json nodes = nlohmann::json::array();
  for (nlohmann::json& n : j["nodes"]) {
    if (drop.contains(n["id"].get<int>())) continue;
    n["id"] = to(n["id"]);
    if (n.contains("match") && n["match"].get<int>() >= 0) n["match"] = to(n["match"]);
    nodes.push_back(n);
  }
  j["nodes"] = nodes;
  nlohmann::json edges = nlohmann::json::array();
  for (const nlohmann::json& e : j["edges"]) {
    if (drop.contains(e[0].get<int>()) || drop.contains(e[1].get<int>())) continue;
    nlohmann::json kept = e;
    kept[0] = to(e[0]);
    kept[1] = to(e[1]);
    edges.push_back(kept);
  }
  j["edges"] = edges;
  for (nlohmann::json& stream : j["streams"]) {
    nlohmann::json order = nlohmann::json::array();
    for (const nlohmann::json& id : stream["order"]) {
      if (!drop.contains(id.get<int>())) order.push_back(to(id));
    }
    stream["order"] = order;
  }
  return plan_from_json(j, "edited.json");
}

// The simulator starts an overlapped pair once both ops are ready: a path from the first to the
// second through a send and its recv (here back to the same device's forward chain) never lets it
// start, though no edge runs backwards inside the pair.
TEST(Validator, APathFromAnOverlappedPairsFirstToItsSecondIsACycle) {
  const Plan plan = dualpipe_v_sample();
  const TaskGraph& g = plan.graph;
  const std::vector<OverlapPair> pairs = overlap_pairs(g);
  ASSERT_FALSE(pairs.empty());
  // The first pair whose forward sends its activation: the send then feeds the pair's second.
  for (const OverlapPair& pair : pairs) {
    const auto& graph = g.graph();
    int send = -1;
    for (auto [it, end] = boost::out_edges(static_cast<std::size_t>(pair.first), graph);
         it != end && send < 0; ++it) {
      const int target = static_cast<int>(boost::target(*it, graph));
      if (g.node(target).kind == NodeKind::send) send = target;
    }
    if (send < 0) continue;
    const TaskGraph bad =
        edited(g, [](const Node&, const Node&) { return false; }, {{send, pair.second}});
    EXPECT_THROW(static_cast<void>(simulate(bad)), Error);
    expect_violation(bad, "acyclic");
    return;
  }
  FAIL() << "no overlapped forward sends an activation";
}

// DualPipe's two copies of a stage exchange weight gradients: the optimizer step that adds the
// other copy's in must wait for the recv and for its own send (without the edges its step was
// predicted 13 % shorter, the optimizer running before the exchange).
TEST(Validator, TheOptimizerStepWaitsForTheGradientExchange) {
  PlanRequest r = testing::uniform_request({.devices = 2,
                                            .microbatches = 4,
                                            .chunks = 2,
                                            .schedule = "dualpipe",
                                            .backward = BackwardMode::twobp});
  for (auto& [kind, by_mbs] : r.profile.layers) {
    for (auto& [mbs, cost] : by_mbs)
      cost.optimizer_us = 500;  // an optimizer node per device
  }
  const Plan plan = make_plan(r);
  const TaskGraph& g = plan.graph;
  ASSERT_FALSE(find_violation(g).has_value());
  const auto grads_to_step = [](const Node& from, const Node& to) {
    return from.transfer == Transfer::grads && to.op == OpType::O;
  };
  const TaskGraph no_wait = edited(g, grads_to_step);
  const Violation v = expect_violation(no_wait, "grads");
  EXPECT_EQ(no_wait.node(v.node).op, OpType::O);
  // A send of the gradients before its stage's last weight gradient.
  const TaskGraph early = edited(g, [](const Node& from, const Node& to) {
    return to.transfer == Transfer::grads && to.kind == NodeKind::send &&
           from.kind == NodeKind::compute;
  });
  const Violation w = expect_violation(early, "grads");
  EXPECT_NE(w.message.find("last weight gradient"), std::string::npos) << w.message;
}

// Two copies on two devices must exchange each stage's weight gradients both ways: without the
// exchange the plan still runs, and the copies' weights drift apart after the first step.
TEST(Validator, TwoCopiesThatNeverExchangeTheirGradientsAreRefused) {
  const Plan plan = uniform_plan({.devices = 2,
                                  .microbatches = 4,
                                  .chunks = 2,
                                  .schedule = "dualpipe",
                                  .backward = BackwardMode::twobp});
  const TaskGraph& g = plan.graph;
  ASSERT_FALSE(find_violation(g).has_value());
  std::set<int> grads;
  std::set<int> one_way;  // device 0's sends and their recvs
  for (int id = 0; id < g.node_count(); ++id) {
    const Node& n = g.node(id);
    if (n.transfer != Transfer::grads) continue;
    grads.insert(id);
    if (n.kind == NodeKind::send && n.device == 0) one_way.insert({id, n.match});
  }
  ASSERT_FALSE(one_way.empty());
  const Violation none = expect_violation(without_nodes(g, grads), "grads");
  EXPECT_NE(none.message.find("never sent"), std::string::npos) << none.message;
  const Violation half = expect_violation(without_nodes(g, one_way), "grads");
  EXPECT_NE(half.message.find("to device 1"), std::string::npos) << half.message;
}

// An evicted stash that no load brings back: its backward would run without it, and the
// evictor's memory would fall below what it holds.
TEST(Validator, AnEvictionWithoutItsLoadIsRefused) {
  PlanRequest r = testing::uniform_request({.devices = 4, .microbatches = 8, .comm = 0.1});
  r.bpipe = BpipeMode::on;
  const Plan plan = make_plan(r);
  const TaskGraph& g = plan.graph;
  ASSERT_FALSE(find_violation(g).has_value());
  int load = -1;
  for (int id = 0; id < g.node_count() && load < 0; ++id) {
    if (g.node(id).kind == NodeKind::send && g.node(id).transfer == Transfer::load) load = id;
  }
  ASSERT_GE(load, 0) << "the plan moves no stash";
  const Violation v =
      expect_violation(without_nodes(g, {load, g.node(load).match}), "transfer-use");
  EXPECT_NE(v.message.find("no load sends back"), std::string::npos) << v.message;
}

// A stash move frees on its send and allocates on its recv exactly the bytes it moves: a recv
// that allocates nothing would hold the stash on neither device and slip under a memory limit.
TEST(Validator, AStashMoveHoldsExactlyTheBytesItMoves) {
  PlanRequest r = testing::uniform_request({.devices = 4, .microbatches = 8, .comm = 0.1});
  r.bpipe = BpipeMode::on;
  const Plan plan = make_plan(r);
  ASSERT_FALSE(find_violation(plan.graph).has_value());
  for (const auto& [kind, field] :
       {std::pair{"recv", "alloc_bytes"}, {"send", "free_bytes"}, {"send", "alloc_bytes"}}) {
    nlohmann::json j = plan_to_json(plan.graph);
    bool edited_one = false;
    for (nlohmann::json& n : j["nodes"]) {
      if (edited_one || n.value("kind", "") != kind || !n.contains("transfer") ||
          n["transfer"] != "evict")
        continue;
      n[field] = std::string(field) == "alloc_bytes" && std::string(kind) == "send"
                     ? n["bytes"].get<std::int64_t>()
                     : 0;
      edited_one = true;
    }
    ASSERT_TRUE(edited_one) << "the plan moves no stash";
    const Violation v = expect_violation(plan_from_json(j, "edited.json"), "transfer-use");
    EXPECT_NE(v.message.find("exactly the bytes it moves"), std::string::npos) << v.message;
  }
}

TEST(Validator, CatchesBytesOnAPipelineTransferAndFreesBeyondAllocations) {
  {
    Plan plan = sample();
    const int recv = plan.graph.node(find_node(plan.graph, NodeKind::send, "1F5")).match;
    plan.graph.node(recv).alloc_bytes = std::int64_t{1} << 40;
    const Violation v = expect_violation(plan.graph, "memory");
    EXPECT_EQ(v.node, recv);
  }
  {
    Plan plan = sample();
    const int f = find_node(plan.graph, NodeKind::compute, "0F0");
    plan.graph.node(f).free_bytes = plan.graph.node(f).alloc_bytes + 1;
    const Violation v = expect_violation(plan.graph, "memory");
    EXPECT_EQ(v.node, f);
    EXPECT_NE(v.message.find("frees 1 bytes more"), std::string::npos) << v.message;
  }
}

TEST(Validator, CatchesMemoryOverLimit) {
  Plan plan = sample(BackwardMode::fused);
  // 1F1B fused on 4 stages peaks at 4 GiB of stash on device 0.
  plan.graph.meta.memory_limit_bytes.assign(4, 3.5 * testing::kGiB);
  const Violation v = expect_violation(plan.graph, "memory-limit");
  EXPECT_EQ(plan.graph.node(v.node).device, 0);
  EXPECT_NE(v.message.find("above its limit"), std::string::npos);
}

// An overlapped pair (dualpipe-v's F&B) holds both ops' working memory at once, as the simulator
// does: with each member's working memory above every other op's peak, one member alone fits the
// limit and the pair does not.
TEST(Validator, AnOverlappedPairHoldsBothWorkingMemoriesAtOnce) {
  Plan plan = dualpipe_v_sample();
  TaskGraph& g = plan.graph;
  const std::vector<std::int64_t> peaks = plan.sim.peak_memory_bytes();
  const std::int64_t peak = *std::max_element(peaks.begin(), peaks.end());
  const std::int64_t work = peak + static_cast<std::int64_t>(testing::kGiB);
  int first = -1;
  const std::vector<int>& order = g.stream_order(compute_stream(g, 0));
  for (std::size_t i = 0; i + 1 < order.size() && first < 0; ++i) {
    if (!g.node(order[i]).overlaps_next) continue;
    first = order[i];
    g.node(order[i]).work_bytes = work;
    g.node(order[i + 1]).work_bytes = work;
  }
  ASSERT_GE(first, 0) << "no overlapped pair on device 0";
  const double limit = static_cast<double>(peak + work) + 0.5 * testing::kGiB;
  g.meta.memory_limit_bytes.assign(4, limit);
  const Violation v = expect_violation(g, "memory-limit");
  EXPECT_EQ(v.node, first);
  EXPECT_GT(static_cast<double>(simulate(g).peak_memory_bytes()[0]), limit);
}

// Stage 1's forward of micro-batch 3 relabelled as micro-batch 2: stage 1 then runs two forwards
// of micro-batch 2. Compute nodes are indexed in id order, so the later of the two is the repeat.
TEST(Validator, CatchesAForwardThatRepeatsAMicroBatch) {
  Plan plan = sample();
  TaskGraph& g = plan.graph;
  const int f2 = find_node(g, NodeKind::compute, "1F2");
  const int f3 = find_node(g, NodeKind::compute, "1F3");
  ASSERT_GE(f2, 0);
  ASSERT_GE(f3, 0);
  g.node(f3).microbatches = MicroBatches{2};
  const Violation v = expect_violation(g, "coverage");
  EXPECT_EQ(v.node, std::max(f2, f3));
  EXPECT_NE(v.message.find("repeats micro-batch 2 of stage 1"), std::string::npos) << v.message;
}

TEST(Validator, CatchesAMissingMicroBatch) {
  Plan plan = sample(BackwardMode::fused);
  plan.graph.meta.microbatches = 9;
  expect_violation(plan.graph, "coverage");
}

TEST(Validator, CatchesAP2GroupAboveThePlansP2Concat) {
  // With p2_concat 0 the 2bp plan's last P2 of each stage groups all 8 micro-batches.
  Plan plan = sample();
  int widest = -1;
  std::size_t width = 0;
  for (int id = 0; id < plan.graph.node_count(); ++id) {
    const Node& n = plan.graph.node(id);
    if (n.op == OpType::P2 && n.microbatches.size() > width) {
      width = n.microbatches.size();
      widest = id;
    }
  }
  ASSERT_GT(width, 2U);
  plan.graph.meta.p2_concat = static_cast<int>(width);
  EXPECT_FALSE(find_violation(plan.graph).has_value());
  plan.graph.meta.p2_concat = static_cast<int>(width) - 1;
  const Violation v = expect_violation(plan.graph, "coverage");
  EXPECT_EQ(v.node, widest);
  EXPECT_NE(
      v.message.find("groups " + std::to_string(width) +
                     " micro-batches, above the plan's p2_concat of " + std::to_string(width - 1)),
      std::string::npos)
      << v.message;
}

TEST(Validator, CatchesAScheduleTextTheGraphDoesNotRun) {
  {
    // Two actions of device 0 swapped in the text only: export would write the text, run
    // executes the graph.
    Plan plan = sample(BackwardMode::fused);
    std::vector<Action>& actions = plan.graph.schedule.per_device[0];
    ASSERT_EQ(format_action(actions[1]), "0F1");
    std::swap(actions[1], actions[2]);
    const Violation v = expect_violation(plan.graph, "schedule");
    ASSERT_GE(v.node, 0);
    EXPECT_EQ(node_label(plan.graph.node(v.node)), "0F1");
    EXPECT_NE(v.message.find("is action 1 of device 0's compute stream, but the schedule text "
                             "has 0F2 there"),
              std::string::npos)
        << v.message;
  }
  {
    Plan plan = sample(BackwardMode::fused);
    plan.graph.schedule.per_device[3].pop_back();
    const Violation v = expect_violation(plan.graph, "schedule");
    EXPECT_NE(v.message.find("after the last of its"), std::string::npos) << v.message;
  }
  {
    Plan plan = sample(BackwardMode::fused);
    Action extra = plan.graph.schedule.per_device[1].back();
    plan.graph.schedule.per_device[1].push_back(extra);
    const Violation v = expect_violation(plan.graph, "schedule");
    EXPECT_EQ(v.node, -1);
    EXPECT_NE(v.message.find("device 1's compute stream runs 16 actions, the schedule text lists "
                             "17"),
              std::string::npos)
        << v.message;
  }
}

TEST(Validator, ThrowsWithTheMessage) {
  Plan plan = sample();
  const int send = find_node(plan.graph, NodeKind::send, "0F3");
  plan.graph.node(send).match = -1;
  try {
    validate(plan.graph);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("send-recv-match"), std::string::npos);
  }
}

}  // namespace
}  // namespace pipeplan
