// The optimizer step in the task graph (OpType::O): one node per device whose profile gives its
// time, last on the compute stream, in the step time every front end reports; its time is
// LayerCost::optimizer_us summed over the device's layers; the validator keeps it last.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"
#include "planner/graph/validator.h"
#include "planner/plan/lower_bound.h"
#include "profiles/analytic.h"
#include "profiles/gpu.h"
#include "profiles/model.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

// Uniform stages with an optimizer step of `optimizer_ms` per stage (every layer of the uniform
// profile gets the same time).
Plan with_optimizer(double optimizer_ms, const std::string& schedule = "1f1b", int chunks = 1) {
  PlanRequest r = testing::uniform_request({.devices = 4,
                                            .microbatches = 8,
                                            .chunks = chunks,
                                            .schedule = schedule,
                                            .backward = BackwardMode::twobp});
  for (auto& [kind, by_mbs] : r.profile.layers) {
    for (auto& [mbs, cost] : by_mbs)
      cost.optimizer_us = optimizer_ms * 1e3;
  }
  return make_plan(r);
}

std::vector<int> optimizer_nodes(const TaskGraph& g) {
  std::vector<int> ids;
  for (int id = 0; id < g.node_count(); ++id) {
    if (g.node(id).op == OpType::O && g.node(id).kind == NodeKind::compute) ids.push_back(id);
  }
  return ids;
}

TEST(OptimizerNode, OnePerDeviceLastOnItsComputeStream) {
  const Plan plan = with_optimizer(3);
  const std::vector<int> ids = optimizer_nodes(plan.graph);
  ASSERT_EQ(ids.size(), 4u);
  for (const int id : ids) {
    const Node& n = plan.graph.node(id);
    const std::vector<int>& order = plan.graph.stream_order(n.stream);
    EXPECT_EQ(order.back(), id);
    EXPECT_EQ(node_label(n), "optimizer");
    EXPECT_DOUBLE_EQ(n.duration_us, 3e3);  // one uniform stage per device
    const NodeTime& t = plan.sim.times[static_cast<std::size_t>(id)];
    for (const int other : order) {
      if (other == id) continue;
      EXPECT_LE(plan.sim.times[static_cast<std::size_t>(other)].end_us, t.start_us);
    }
  }
  EXPECT_FALSE(find_violation(plan.graph).has_value());
}

TEST(OptimizerNode, IsInTheStepTimeAndTheBound) {
  const Plan without = with_optimizer(0);
  EXPECT_TRUE(optimizer_nodes(without.graph).empty());
  const Plan with = with_optimizer(3);
  // The last device to finish ends 3 ms later; a device that waited anyway may absorb nothing.
  EXPECT_GE(with.sim.makespan_us, without.sim.makespan_us + 3e3 - 1e-6);
  EXPECT_LE(with.bound.makespan_us, with.sim.makespan_us + 1e-9);
  EXPECT_GE(with.bound.makespan_us, without.bound.makespan_us + 3e3 - 1e-6);
  // A V: each device holds two stages, so its step takes both stages' time.
  const Plan v = with_optimizer(3, "zb-v", 2);
  for (const int id : optimizer_nodes(v.graph))
    EXPECT_DOUBLE_EQ(v.graph.node(id).duration_us, 6e3);
}

TEST(OptimizerNode, ThePlanFileKeepsItAndTheValidatorKeepsItLast) {
  const Plan plan = with_optimizer(3);
  const std::string text = plan_to_text(plan.graph);
  const TaskGraph back = plan_from_text(text, "p.json");
  EXPECT_EQ(plan_to_text(back), text);
  EXPECT_EQ(optimizer_nodes(back).size(), 4u);
  EXPECT_NE(nlohmann::json::parse(text)["nodes"]["op"].get<std::string>().find('O'),
            std::string::npos);
  TaskGraph g = plan.graph;
  const int id = optimizer_nodes(g).front();
  std::vector<int> order = g.stream_order(g.node(id).stream);
  std::swap(order[order.size() - 1], order[order.size() - 2]);
  g.set_stream_order(g.node(id).stream, order);
  const auto v = find_violation(g);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rule, "optimizer");
  EXPECT_NE(v->message.find("the optimizer step is a device's last op"), std::string::npos);
}

// profiles/analytic.cpp: per layer, 34 bytes moved per parameter at 0.8 of the HBM bandwidth,
// plus 4 us for each of two kernels (AdamW and a memset) per parameter tensor. LLaMA-7B on an
// H200 (4800 GB/s): a block has 2 norms + 4 attention + 3 MLP projections = 9 tensors and
// 2*4096 + 4*4096^2 + 3*4096*11008 = 202383360 parameters, the embedding 1 tensor of 32000*4096,
// the head 2 tensors of 4096 + 32000*4096. All 32 blocks, embedding and head:
// 34 * 6738415616 / 3.84e6 = 59663.055 us of traffic + 2 * 291 * 4 = 2328 us of kernels.
TEST(OptimizerNode, AnalyticProfilesEstimateItFromHbmBandwidth) {
  const GpuSpec gpu = find_gpu("h200");
  ASSERT_EQ(gpu.hbm_bandwidth_GBps, 4800.0);
  const Profile profile =
      analytic_profile(model_preset("llama-7b"), gpu, {.seq = 2048, .micro_batch_sizes = {1}});
  const ModelConfig& model = profile.model;
  ASSERT_EQ(model.layer_list().size(), 34u);
  const auto expected = [&](std::int64_t params, int tensors) {
    return 34.0 * static_cast<double>(params) / (4800e3 * 0.8) + 2 * tensors * 4.0;
  };
  const double block = expected(model.block_parameters(), 9);
  const double embedding = expected(model.embedding_parameters(), 1);
  const double head = expected(model.head_parameters(), 2);
  EXPECT_NEAR(profile.cost(LayerKind::block, 1).optimizer_us, block, 1e-9 * block);
  EXPECT_NEAR(profile.cost(LayerKind::embedding, 1).optimizer_us, embedding, 1e-9 * embedding);
  EXPECT_NEAR(profile.cost(LayerKind::head, 1).optimizer_us, head, 1e-9 * head);
  double total = 0;
  for (const LayerKind kind : model.layer_list())
    total += profile.cost(kind, 1).optimizer_us;
  EXPECT_NEAR(total, 59663.055 + 2328.0, 1.0);
}

}  // namespace
}  // namespace pipeplan
