// The plan loader refuses what would make a later stage index, allocate or add without bound:
// every size within planner/base/limits.h, the schedule consistent with meta, one line each.
#include <functional>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"
#include "profiles/analytic.h"
#include "profiles/gpu.h"
#include "profiles/model.h"
#include "profiles/tensor_parallel.h"
#include "tests/error_support.h"
#include "tests/planner/plan_fixtures.h"
#include "tools/plan_options.h"

namespace pipeplan {
namespace {

using nlohmann::json;

json good_plan() {
  return plan_to_json(make_plan(testing::uniform_request({.devices = 2, .microbatches = 2})).graph);
}

std::string load_error(const std::function<void(json&)>& change) {
  json plan = good_plan();
  change(plan);
  try {
    plan_from_json(plan, "p.json");
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a pipeplan error: ") + e.what();
  }
  return "<no error>";
}

TEST(PlanLoad, SizesAboveTheLimitsAreRefused) {
  EXPECT_EQ(load_error([](json& p) { p["meta"]["microbatches"] = 1'000'000'000; }),
            "p.json: meta: field 'microbatches' = 1000000000 is out of range [1, 65536]");
  EXPECT_EQ(load_error([](json& p) { p["meta"]["devices"] = 1e300; }),
            "p.json: meta: field 'devices' = 1e+300 is out of range [1, 1024]");
  EXPECT_EQ(load_error([](json& p) { p["meta"]["devices"] = 1.5; }),
            "p.json: meta: field 'devices' must be an integer");
  EXPECT_EQ(load_error([](json& p) { p["meta"]["static_bytes"][0] = 1e300; }),
            "p.json: meta: field 'static_bytes' must hold integers from 0 to 1152921504606846976 "
            "(docs/reference/limits.md)");
  EXPECT_NE(load_error([](json& p) {
              p["nodes"][0]["alloc_bytes"] = std::int64_t{1} << 61;
            }).find("p.json: nodes[0]: field 'alloc_bytes' = 2305843009213693952 is out of range"),
            std::string::npos);
  EXPECT_NE(load_error([](json& p) {
              for (json& n : p["nodes"])
                n["alloc_bytes"] = std::int64_t{1} << 59;
            }).find("the plan's allocations is above the limit"),
            std::string::npos);
  EXPECT_NE(load_error([](json& p) {
              p["nodes"][0]["duration_us"] = 1e300;
            }).find("field 'duration_us' (1e+300) is above the limit"),
            std::string::npos);
  EXPECT_NE(load_error([](json& p) {
              p["nodes"][0]["microbatches"] = {4294967296};
            }).find("field 'microbatches' must hold integers from 0 to 1"),
            std::string::npos);
  EXPECT_NE(load_error([](json& p) {
              p["edges"][0] = {4294967296, 0};
            }).find("edges[0] must be [from, to] node ids"),
            std::string::npos);
}

// GPUs per device: written only when more than one, read back, bounded.
// A version 2 node's misspelt optional field is named, not read as its default (0 bytes).
TEST(PlanLoad, AVersion2NodesUnknownFieldIsNamed) {
  EXPECT_EQ(load_error([](json& p) { p["nodes"][1]["work_byte"] = 123; }),
            "p.json: field 'nodes[1].work_byte' is not a field of a plan's node (did you mean "
            "'work_bytes'?)");
}

TEST(PlanLoad, TensorParallelismIsRecordedWhenThereIsSome) {
  EXPECT_FALSE(good_plan()["meta"].contains("tensor_parallel"));
  PlanRequest r = testing::uniform_request({.devices = 2, .microbatches = 2});
  r.tensor_parallel = 4;
  const json written = plan_to_json(make_plan(r).graph);
  EXPECT_EQ(written["meta"]["tensor_parallel"], 4);
  EXPECT_EQ(plan_from_json(written, "p.json").meta.tensor_parallel, 4);
  EXPECT_EQ(plan_from_json(good_plan(), "p.json").meta.tensor_parallel, 1);
  EXPECT_EQ(load_error([](json& p) { p["meta"]["tensor_parallel"] = 0; }),
            "p.json: meta: field 'tensor_parallel' = 0 is out of range [1, 1024]");
}

// The degree must divide the model's attention heads and key/value heads, as the planner requires:
// refused in its words (tensor_parallel_profile's).
TEST(PlanLoad, TensorParallelismMustDivideTheHeadsAsThePlannerSays) {
  PlanRequest r = testing::uniform_request({.devices = 2, .microbatches = 2});
  r.profile = analytic_profile(model_preset("tiny"), find_gpu("h100-sxm"),
                               {.seq = 32, .micro_batch_sizes = {1}});
  r.tensor_parallel = 2;
  const json written = plan_to_json(make_plan(r).graph);
  ASSERT_EQ(written["meta"]["model"]["heads"], 4);
  EXPECT_EQ(plan_from_json(written, "p.json").meta.tensor_parallel, 2);
  const auto error = [&](const std::function<void(json&)>& change) {
    json p = written;
    change(p);
    try {
      plan_from_json(p, "p.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(error([](json& p) { p["meta"]["tensor_parallel"] = 3; }),
            "p.json: meta: field 'tensor_parallel': 3 does not divide the 4 attention heads of "
            "tiny");
  try {
    (void)tensor_parallel_profile(r.profile, 3, {});
    ADD_FAILURE() << "the planner took tensor parallelism 3 on 4 heads";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.detail(), "3 does not divide the 4 attention heads of tiny");
  }
  EXPECT_EQ(error([](json& p) {
              p["meta"]["model"]["kv_heads"] = 2;
              p["meta"]["tensor_parallel"] = 4;
            }),
            "p.json: meta: field 'tensor_parallel': 4 does not divide the 2 key/value heads of "
            "tiny (its 4 attention heads share them)");
}

// A memory limit is bytes per device, 0 for none: 0.5 would read as a limit of half a byte
// that every device is above, reported as "above its limit 0 bytes". A fraction beyond a whole
// byte (plans of earlier pipeplan hold 144267951472.64) is dropped: peaks are whole bytes.
TEST(PlanLoad, AMemoryLimitIsBytes) {
  for (const double below_one : {0.5, -1.0}) {
    EXPECT_EQ(load_error([&](json& p) {
                p["meta"]["memory_limit_bytes"] = {below_one, 0};
              }),
              "p.json: meta: field 'memory_limit_bytes' must hold byte counts, 0 (no limit) or 1 "
              "to 1125899906842624 (docs/reference/limits.md)");
  }
  EXPECT_EQ(load_error([](json& p) {
              p["meta"]["memory_limit_bytes"] = {81389630259.0, 0};
            }),
            "<no error>");
  json fractional = good_plan();
  fractional["meta"]["memory_limit_bytes"] = {144267951472.64, 0};
  const TaskGraph g = plan_from_json(fractional, "p.json");
  EXPECT_EQ(g.meta.memory_limit_bytes, (std::vector<double>{144267951472.0, 0}));
  EXPECT_EQ(plan_to_json(g)["meta"]["memory_limit_bytes"][0].get<double>(), 144267951472.0);
}

// A compute node has no message: version 2's bytes, peer and match there are refused, as version
// 3 refuses them, rather than dropped; the values version 3 gives a compute node are taken.
TEST(PlanLoad, AVersion2ComputeNodeHasNoMessage) {
  ASSERT_EQ(good_plan()["nodes"][0]["kind"], "compute");
  EXPECT_EQ(load_error([](json& p) { p["nodes"][0]["bytes"] = 4096; }),
            "p.json: nodes[0]: field 'bytes' is 4096 on a compute node (send/recv only; a compute "
            "node's is 0 or absent)");
  EXPECT_EQ(load_error([](json& p) { p["nodes"][0]["peer"] = 1; }),
            "p.json: nodes[0]: field 'peer' is 1 on a compute node (send/recv only; a compute "
            "node's is -1 or absent)");
  EXPECT_EQ(load_error([](json& p) { p["nodes"][0]["match"] = "x"; }),
            "p.json: nodes[0]: field 'match' is \"x\" on a compute node (send/recv only; a "
            "compute node's is -1 or absent)");
  EXPECT_EQ(load_error([](json& p) {
              p["nodes"][0]["bytes"] = 0;
              p["nodes"][0]["peer"] = -1;
              p["nodes"][0]["match"] = -1;
            }),
            "<no error>");
}

// Activation recomputation: written only when some, read back, named when unknown.
TEST(PlanLoad, RecomputationIsRecordedWhenThereIsSome) {
  EXPECT_FALSE(good_plan()["meta"].contains("recompute"));
  PlanRequest r = testing::uniform_request({.devices = 2, .microbatches = 2});
  r.profile = uniform_profile(UniformCosts{.forward_ms = 1, .p1_ms = 1, .p2_ms = 1}, 4, 2);
  r.layers_per_stage = {2, 2};
  r.recompute = {Recompute::Method::block, 1};
  const json written = plan_to_json(make_plan(r).graph);
  EXPECT_EQ(written["meta"]["recompute"], json({{"method", "block"}, {"blocks", 1}}));
  EXPECT_EQ(plan_from_json(written, "p.json").meta.recompute, r.recompute);
  // Two blocks per stage: the first two of each are every block, and the plan says full.
  r.recompute = {Recompute::Method::block, 2};
  EXPECT_EQ(make_plan(r).graph.meta.recompute, (Recompute{Recompute::Method::full, 0}));
  EXPECT_EQ(plan_from_json(good_plan(), "p.json").meta.recompute, Recompute{});
  EXPECT_EQ(load_error([](json& p) {
              p["meta"]["recompute"] = {{"method", "selective"}};
            }),
            "p.json: meta.recompute: field 'method' must be \"none\", \"full\" or \"block\", "
            "got 'selective'");
  EXPECT_EQ(load_error([](json& p) { p["meta"]["recompute"] = 1; }),
            "p.json: meta.recompute: must be an object");
}

TEST(PlanLoad, TheScheduleMustBeThePlans) {
  EXPECT_NE(load_error([](json& p) {
              p["schedule"] =
                  "schedule v1 family=1f1b backward=fused devices=2 microbatches=999999999 "
                  "stages=0,1\n0:\n1:\n";
            }).find("p.json: field 'schedule': schedule line 1: microbatches is above the limit"),
            std::string::npos);
  EXPECT_NE(load_error([](json& p) {
              p["schedule"] =
                  "schedule v1 family=1f1b backward=fused devices=2 microbatches=1 "
                  "stages=0,1\n0: 0F0 0B0\n1: 1F0 1B0\n";
            }).find("has 2 devices, 1 micro-batches and 2 stages; meta has 2, 2 and 2"),
            std::string::npos);
  EXPECT_NE(load_error([](json& p) {
              p["meta"]["stage_layers"] = {{0, 1}, {1, 5}};
            }).find("field 'stage_layers' must hold [first_layer, layer_count] pairs within"),
            std::string::npos);
  EXPECT_NE(load_error([](json& p) {
              p["meta"]["backward"] = "sideways";
            }).find("p.json: meta: field 'backward': unknown backward mode"),
            std::string::npos);
  EXPECT_EQ(load_error([](json&) {}), "<no error>");
}

// What `run` needs of meta (check_stage_layers, which the executor runs too): a plan that cannot
// run is refused on reading, so validate, show and export refuse it as run does.
TEST(PlanLoad, StageLayersMustTileTheLayerListAsRunNeedsThem) {
  const json plan = good_plan();
  ASSERT_EQ(plan["meta"]["stage_layers"], json::parse("[[0, 1], [1, 1]]"));
  EXPECT_EQ(load_error([](json& p) {
              p["meta"]["stage_layers"] = {{0, 1}, {0, 1}};
            }),
            "p.json: field 'meta.stage_layers[1]' does not continue the layer list at layer 1");
  EXPECT_EQ(load_error([](json& p) {
              p["meta"]["model"]["layers"] = 4;
              p["meta"]["stage_layers"] = {{0, 1}, {2, 2}};
            }),
            "p.json: field 'meta.stage_layers[1]' does not continue the layer list at layer 1");
  EXPECT_EQ(load_error([](json& p) { p["meta"]["model"]["layers"] = 1000; }),
            "p.json: field 'meta.stage_layers' covers 2 of the 1000 layers of model 'uniform'");
  // A stage of the embedding alone: Megatron allows it, but no cut of pipeplan's makes one,
  // --layout and export's side file refuse it, and validate agrees with them.
  PlanOptions tiny;
  tiny.model = "tiny";  // the embedding, 4 blocks and the head: layers 0 to 5
  tiny.stages = 2;
  tiny.microbatches = 2;
  json embedding_alone = plan_to_json(make_plan(make_request(tiny)).graph);
  embedding_alone["meta"]["stage_layers"] = {{0, 1}, {1, 5}};
  EXPECT_EQ(pipeplan::testing::error_of([&] { plan_from_json(embedding_alone, "p.json"); }),
            "p.json: field 'meta.stage_layers[0]' holds no transformer block (every stage holds "
            "at least one)");
  EXPECT_EQ(load_error([](json& p) { p["meta"]["seq"] = 0; }),
            "p.json: field 'meta.seq' must be positive (is 0)");
}

// A profile's contention model (stages sharing one GPU) reaches the plan's meta, survives the
// plan file, and lengthens the predicted step; a malformed one is refused naming the field.
TEST(PlanLoad, ContentionComesFromTheProfileAndRoundTrips) {
  PlanRequest r = testing::uniform_request({.devices = 2, .microbatches = 4});
  const double plain = make_plan(r).sim.makespan_us;
  r.profile.contention.slowdown = {1.1, 1.3};
  r.profile.contention.by_op["P2"] = {1.2, 1.5};
  r.profile.contention.source = "fitted from two runs";
  const Plan plan = make_plan(r);
  EXPECT_EQ(plan.graph.meta.contention.slowdown, r.profile.contention.slowdown);
  EXPECT_GT(plan.sim.makespan_us, 1.1 * plain);
  const TaskGraph back = plan_from_json(plan_to_json(plan.graph), "p.json");
  EXPECT_EQ(back.meta.contention.slowdown, r.profile.contention.slowdown);
  EXPECT_EQ(back.meta.contention.by_op, r.profile.contention.by_op);
  EXPECT_EQ(back.meta.contention.source, "fitted from two runs");
  EXPECT_FALSE(back.meta.contention.copy.has_value());
  // The copy slowdown rides along and lengthens the step of a plan with transfers.
  PlanRequest sends = testing::uniform_request({.devices = 2, .microbatches = 4, .comm = 0.1});
  sends.profile.contention = r.profile.contention;
  const double fixed_copies = make_plan(sends).sim.makespan_us;
  sends.profile.contention.copy = CopySlowdown{.sender_idle = 1.5, .sender_computing = 40.0};
  const Plan with_copies = make_plan(sends);
  EXPECT_GT(with_copies.sim.makespan_us, fixed_copies);
  EXPECT_EQ(plan_from_json(plan_to_json(with_copies.graph), "p.json").meta.contention.copy,
            sends.profile.contention.copy);
  // So does the sustained-load model, and it lengthens the step further.
  sends.profile.contention.sustained = SustainedLoad{.factor = 0.4, .time_constant_us = 2000};
  const Plan sustained = make_plan(sends);
  EXPECT_GT(sustained.sim.makespan_us, with_copies.sim.makespan_us);
  EXPECT_EQ(plan_from_json(plan_to_json(sustained.graph), "p.json").meta.contention.sustained,
            sends.profile.contention.sustained);
  EXPECT_FALSE(
      plan_to_json(make_plan(testing::uniform_request({.devices = 2})).graph)["meta"].contains(
          "contention"));  // written only when there is a model

  EXPECT_EQ(load_error([](json& p) {
              p["meta"]["contention"] = {{"slowdown", json::array()}};
            }),
            "p.json: meta: field 'contention.slowdown' must be an array of 1 to 1024 numbers");
  EXPECT_EQ(load_error([](json& p) {
              p["meta"]["contention"] = {{"slowdown", {1.0, -2.0}}};
            }),
            "p.json: meta: field 'contention.slowdown' must hold numbers in (0, 100]");
  EXPECT_EQ(load_error([](json& p) {
              p["meta"]["contention"] = {{"slowdown", {1.0}}, {"by_op", {{"X", {1.0}}}}};
            }),
            "p.json: meta: field 'contention.by_op' has key 'X'; the op types are F, B, P1 and P2");
  EXPECT_EQ(load_error([](json& p) {
              p["meta"]["contention"] = {
                  {"slowdown", {1.0}}, {"copy", {{"sender_idle", 1.0}, {"sender_computing", 101}}}};
            }),
            "p.json: meta: field 'contention.copy.sender_computing' must be a number in (0, 100]");
}

// A sustained term without a curve (separate GPUs, each with its own clock) reaches the plan's
// meta, survives the profile and the plan file without a "slowdown", and lengthens the step; a
// curve's companions are refused without the curve.
TEST(PlanLoad, ASustainedTermAloneComesFromTheProfileAndRoundTrips) {
  PlanRequest r = testing::uniform_request({.devices = 2, .microbatches = 4, .comm = 0.1});
  const double plain = make_plan(r).sim.makespan_us;
  r.profile.contention.sustained = SustainedLoad{.factor = 0.4, .time_constant_us = 2000};
  r.profile.contention.source = "power cap";
  const json profile = profile_to_json(r.profile);
  ASSERT_TRUE(profile.contains("contention"));
  EXPECT_FALSE(profile["contention"].contains("slowdown"));
  EXPECT_EQ(profile_from_json(profile, "p.json").contention.sustained,
            r.profile.contention.sustained);
  const Plan plan = make_plan(r);
  EXPECT_TRUE(plan.graph.meta.contention.empty());
  EXPECT_EQ(plan.graph.meta.contention.sustained, r.profile.contention.sustained);
  EXPECT_GT(plan.sim.makespan_us, 1.1 * plain);
  EXPECT_LT(plan.sim.makespan_us, 1.4 * plain);
  const json j = plan_to_json(plan.graph);
  ASSERT_TRUE(j["meta"].contains("contention"));
  EXPECT_FALSE(j["meta"]["contention"].contains("slowdown"));
  const TaskGraph back = plan_from_json(j, "p.json");
  EXPECT_EQ(back.meta.contention.sustained, r.profile.contention.sustained);
  EXPECT_TRUE(back.meta.contention.slowdown.empty());
  EXPECT_EQ(back.meta.contention.source, "power cap");
  EXPECT_DOUBLE_EQ(simulate(back).makespan_us, plan.sim.makespan_us);

  EXPECT_EQ(load_error([](json& p) {
              p["meta"]["contention"] = {
                  {"sustained", {{"factor", 0.4}, {"time_constant_us", 2000}}},
                  {"by_op", {{"F", {1.1}}}}};
            }),
            "p.json: meta: field 'contention.by_op' needs 'contention.slowdown' (stages sharing "
            "one GPU)");
}

// Working memory from the profile rides on the compute nodes, is held while each runs (a fused
// 1F1B peaks at a forward's start, so by exactly the forward's work), round-trips through the
// plan file, and is refused above the limits like any byte count.
TEST(PlanLoad, WorkingMemoryIsHeldWhileANodeRunsAndRoundTrips) {
  PlanRequest r = testing::uniform_request({.devices = 2, .microbatches = 4});
  const Plan plain = make_plan(r);
  constexpr std::int64_t kWork = std::int64_t{3} << 28;  // 0.75 GiB
  for (auto& [mbs, cost] : r.profile.layers.at("block"))
    cost.forward_work_bytes = kWork;
  const Plan plan = make_plan(r);
  int with_work = 0;
  for (const Node& n : plan.graph.nodes()) {
    if (n.kind == NodeKind::compute && n.op == OpType::F) {
      EXPECT_EQ(n.work_bytes, kWork);
      ++with_work;
    } else {
      EXPECT_EQ(n.work_bytes, 0);
    }
  }
  EXPECT_EQ(with_work, 8);
  for (std::size_t d = 0; d < 2; ++d) {
    EXPECT_EQ(plan.sim.devices[d].peak_memory_bytes, plain.sim.devices[d].peak_memory_bytes + kWork)
        << "device " << d;
  }
  const json j = plan_to_json(plan.graph);
  EXPECT_EQ(j["nodes"][0]["work_bytes"], kWork);
  EXPECT_FALSE(plan_to_json(plain.graph)["nodes"][0].contains("work_bytes"));
  const TaskGraph back = plan_from_json(j, "p.json");
  EXPECT_EQ(simulate(back).devices[0].peak_memory_bytes, plan.sim.devices[0].peak_memory_bytes);
  EXPECT_NE(load_error([](json& p) {
              p["nodes"][0]["work_bytes"] = -1;
            }).find("p.json: nodes[0]: field 'work_bytes'"),
            std::string::npos);
}

}  // namespace
}  // namespace pipeplan
