// DualPipe (schedules/families/dualpipe.cpp), the bidirectional form: two copies of the model,
// micro-batches fed from both ends. Held to the paper's bubble (PP/2 - 1)(F&B + B - 3W) with
// PP = P at uniform costs, to the mirror symmetry of its two halves, and to the rules that keep
// each micro-batch on its own copy (schedule check, deadlock search, validator, text form).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "planner/base/error.h"
#include "planner/graph/validator.h"
#include "profiles/analytic.h"
#include "profiles/gpu.h"
#include "schedules/deadlock.h"
#include "schedules/family.h"
#include "schedules/torch_csv.h"
#include "tests/error_support.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

using testing::error_of;

Schedule dualpipe(int devices, int microbatches) {
  return generate_schedule("dualpipe",
                           {.devices = devices, .chunks = 2, .microbatches = microbatches});
}

PlanRequest dualpipe_request(int devices, int microbatches, double efficiency) {
  // Two profile blocks per device, F = P1 = P2 = 0.5 ms each: a stage of the model (P of them)
  // holds two, so F = 1, B = 2 and W = 1 ms per stage.
  PlanRequest r = testing::uniform_request({.devices = devices,
                                            .microbatches = microbatches,
                                            .chunks = 2,
                                            .schedule = "dualpipe",
                                            .backward = BackwardMode::twobp,
                                            .f = 1,
                                            .b = 1,
                                            .w = 1});
  r.profile.overlap.efficiency = efficiency;
  return r;
}

TEST(DualPipe, HoldsTwoCopiesEachMicroBatchOnOne) {
  for (const auto& [p, m] : {std::pair{2, 4}, {4, 8}, {4, 12}, {8, 16}, {8, 40}}) {
    SCOPED_TRACE("P=" + std::to_string(p) + " m=" + std::to_string(m));
    const Schedule s = dualpipe(p, m);
    EXPECT_NO_THROW(check_schedule(s));
    EXPECT_FALSE(find_deadlock(s));
    EXPECT_EQ(s.replicas, 2);
    ASSERT_EQ(s.stage_count(), 2 * p);
    for (int r = 0; r < p; ++r) {
      // Device r: stage r of copy 0 and model stage P - 1 - r of copy 1 (virtual 2P - 1 - r).
      EXPECT_EQ(s.stage_device[static_cast<std::size_t>(r)], r);
      EXPECT_EQ(s.stage_device[static_cast<std::size_t>(2 * p - 1 - r)], r);
      EXPECT_EQ(s.model_stage(2 * p - 1 - r), p - 1 - r);
      for (const Action& a : s.per_device[static_cast<std::size_t>(r)]) {
        for (const int mb : a.microbatches)
          EXPECT_EQ(a.stage < p, mb < m / 2) << format_action(a);
      }
    }
  }
}

// Device P - 1 - r runs device r's order with the copies swapped: the stage of the other copy at
// the same depth, the micro-batch m/2 further (or back).
TEST(DualPipe, MirrorDevicesRunTheSameOrderOnTheOtherCopy) {
  const int p = 8;
  const int m = 24;
  const Schedule s = dualpipe(p, m);
  for (int r = 0; r < p / 2; ++r) {
    const std::vector<Action>& mine = s.per_device[static_cast<std::size_t>(r)];
    const std::vector<Action>& theirs = s.per_device[static_cast<std::size_t>(p - 1 - r)];
    ASSERT_EQ(mine.size(), theirs.size());
    for (std::size_t i = 0; i < mine.size(); ++i) {
      Action mirrored = mine[i];
      mirrored.stage = mine[i].stage < p ? mine[i].stage + p : mine[i].stage - p;
      for (int& mb : mirrored.microbatches)
        mb = mb < m / 2 ? mb + m / 2 : mb - m / 2;
      EXPECT_EQ(theirs[i], mirrored) << "device " << r << " position " << i;
    }
  }
}

TEST(DualPipe, NeedsEvenDevicesAndMicroBatchesAndTwoPerDevice) {
  EXPECT_EQ(error_of([] { dualpipe(3, 12); }),
            "devices: schedule 'dualpipe' needs an even number of devices, got 3");
  EXPECT_EQ(error_of([] { dualpipe(4, 9); }),
            "microbatches: schedule 'dualpipe' needs an even number of at least 2P = 8 "
            "micro-batches (half fed from each end), got 9");
  EXPECT_EQ(error_of([] { dualpipe(4, 6); }),
            "microbatches: schedule 'dualpipe' needs an even number of at least 2P = 8 "
            "micro-batches (half fed from each end), got 6");
}

// The paper's bubble, the largest idle time of a device within the step, with PP = P: at F = 1,
// B = 2, W = 1 ms per stage and comm 0, (P/2 - 1)(F&B + B - 3W).
TEST(DualPipe, BubbleIsThePapersFormula) {
  for (const int p : {4, 8, 16}) {
    for (const int m : {2 * p, 4 * p}) {
      for (const double efficiency : {0.0, 0.5, 1.0}) {
        SCOPED_TRACE("P=" + std::to_string(p) + " m=" + std::to_string(m) +
                     " efficiency=" + std::to_string(efficiency));
        const Plan plan = make_plan(dualpipe_request(p, m, efficiency));
        double bubble = 0;
        for (const DeviceMetrics& d : plan.sim.devices)
          bubble = std::max(bubble, plan.sim.makespan_us - d.busy_us);
        const double f_and_b = overlapped_time_us(1, 2, efficiency);
        EXPECT_NEAR(bubble, (p / 2 - 1) * (f_and_b + 2 - 3) * 1e3, 1e-6);
        // Every device runs m stage passes (m/2 on each of its stages) of F, P1 and P2.
        const int pairs = static_cast<int>(std::count_if(
            plan.graph.schedule.per_device[0].begin(), plan.graph.schedule.per_device[0].end(),
            [](const Action& a) { return a.overlaps_next; }));
        EXPECT_NEAR(plan.sim.devices[0].busy_us, (m * 3 - pairs * (3 - f_and_b)) * 1e3, 1e-6);
        EXPECT_LE(plan.bound.makespan_us, plan.sim.makespan_us + 1e-6);
      }
    }
  }
}

// The planner cuts the model into P stages and gives both copies that cut: each device holds two
// stages' parameters, gradients and optimizer state, twice what 1F1B's device holds on that cut.
TEST(DualPipe, CopiesShareOneCutAndDoubleTheParameters) {
  const Plan two_way = make_plan(dualpipe_request(8, 32, 1.0));
  PlanRequest one = dualpipe_request(8, 32, 1.0);
  one.schedule = "1f1b";
  one.chunks = 1;
  one.backward = BackwardMode::fused;
  const Plan one_way = make_plan(one);
  ASSERT_EQ(two_way.graph.meta.stage_layers.size(), 16U);
  for (std::size_t s = 0; s < 8; ++s) {
    const StageLayers& copy0 = two_way.graph.meta.stage_layers[s];
    const StageLayers& copy1 = two_way.graph.meta.stage_layers[s + 8];
    EXPECT_EQ(copy0.first_layer, copy1.first_layer);
    EXPECT_EQ(copy0.layer_count, copy1.layer_count);
    EXPECT_EQ(copy0.first_layer, one_way.graph.meta.stage_layers[s].first_layer);
    EXPECT_EQ(copy0.layer_count, one_way.graph.meta.stage_layers[s].layer_count);
  }
  std::int64_t two = 0, one_copy = 0;
  for (std::size_t d = 0; d < 8; ++d) {
    two += two_way.graph.meta.static_bytes[d];
    one_copy += one_way.graph.meta.static_bytes[d];
    EXPECT_EQ(two_way.graph.meta.static_bytes[d],
              one_way.graph.meta.static_bytes[d] + one_way.graph.meta.static_bytes[7 - d]);
  }
  EXPECT_EQ(two, 2 * one_copy);
}

// Each stage's two copies sum their weight gradients: a grads message each way after each end's
// last weight gradient of the stage, which both ends' optimizer steps wait for; the receive
// buffer counts in the device's static memory, and the simulated step includes the messages.
TEST(DualPipe, ExchangesTheCopiesWeightGradientsBeforeTheOptimizerStep) {
  PlanRequest r;
  r.profile = analytic_profile(model_preset("tiny"), find_gpu("h100"), AnalyticOptions{});
  r.gpu = "h100";
  r.devices = 4;
  r.chunks = 2;
  r.microbatches = 8;
  r.schedule = "dualpipe";
  r.backward = BackwardMode::twobp;
  const Plan plan = make_plan(r);
  const TaskGraph& g = plan.graph;
  const auto preds = predecessors(g);
  std::vector<int> sends_from(4, 0);
  for (int id = 0; id < g.node_count(); ++id) {
    const Node& n = g.node(id);
    if (n.transfer != Transfer::grads || n.kind != NodeKind::send) continue;
    ++sends_from[static_cast<std::size_t>(n.device)];
    // To the device holding the stage's other copy: device P - 1 - d.
    EXPECT_EQ(n.peer, 3 - n.device) << g.node_name(id);
    EXPECT_GT(n.bytes, 0);
    EXPECT_TRUE(n.op == OpType::P2 || n.op == OpType::B) << g.node_name(id);
    EXPECT_EQ(node_label(n).rfind("grads ", 0), 0U) << node_label(n);
    // Both ends' optimizer steps wait for the message.
    for (const int end : {id, n.match}) {
      bool into_step = false;
      for (int to = 0; to < g.node_count(); ++to) {
        if (g.node(to).op != OpType::O || g.node(to).kind != NodeKind::compute) continue;
        for (const auto& [from, kind] : preds[static_cast<std::size_t>(to)])
          into_step = into_step || (from == end && kind == EdgeKind::data);
      }
      EXPECT_TRUE(into_step) << g.node_name(end);
    }
  }
  EXPECT_EQ(sends_from, (std::vector<int>{2, 2, 2, 2}));  // one per stage it holds
  EXPECT_FALSE(find_violation(g));
  // The receive buffer: the other copy's weight gradients of both its stages.
  const std::vector<StageCost> costs =
      stage_costs(r.profile.model, r.profile, 1, Partition{g.meta.stage_layers}, 1);
  for (int d = 0; d < 4; ++d) {
    const auto at = [&](int s) { return costs[static_cast<std::size_t>(s)]; };
    EXPECT_EQ(
        g.meta.static_bytes[static_cast<std::size_t>(d)],
        at(d).static_bytes + at(7 - d).static_bytes + at(d).grad_bytes + at(7 - d).grad_bytes);
  }
}

TEST(DualPipe, TextFormCarriesTheCopies) {
  const Schedule s = dualpipe(4, 8);
  const std::string text = schedule_to_text(s);
  EXPECT_NE(text.find("stages=0,1,2,3,3,2,1,0 replicas=2\n"), std::string::npos) << text;
  EXPECT_EQ(schedule_from_text(text), s);
  EXPECT_EQ(schedule_to_text(generate_schedule("1f1b", {.devices = 2, .microbatches = 2}))
                .find("replicas"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              schedule_from_text(
                  "schedule v1 family=x backward=fused devices=1 microbatches=2 stages=0,0 "
                  "replicas=3\n0:\n");
            }).find("replicas: expected 1 or 2, got '3'"),
            std::string::npos);
}

TEST(DualPipe, HasNoPyTorchCsv) {
  EXPECT_EQ(error_of([] { schedule_to_torch_csv(dualpipe(4, 8)); }),
            "torch CSV: schedule 'dualpipe' holds 2 copies of the model, which PyTorch's "
            "pipeline CSV cannot express (one rank per stage, every micro-batch through every "
            "stage)");
  // auto's plan holding the two copies says how to keep it to one.
  Schedule chosen = dualpipe(4, 8);
  chosen.family = "auto";
  EXPECT_NE(error_of([&] {
              schedule_to_torch_csv(chosen);
            }).find("; plan with --auto-copies 1 to keep auto to one"),
            std::string::npos);
}

TEST(DualPipe, EachMicroBatchStaysOnItsCopy) {
  Schedule s = dualpipe(2, 4);
  // Device 0's first action, 0F0, moved to copy 1's stage on device 0 (virtual stage 3).
  Action& first = s.per_device[0].front();
  ASSERT_EQ(format_action(first), "0F0");
  first.stage = 3;
  EXPECT_EQ(error_of([&] { check_schedule(s); }),
            "schedule check: device 0 position 0 (3F0): micro-batch 0 passes stages 0..1 only");

  // The validator says the same of a lowered graph.
  Plan plan = make_plan(dualpipe_request(2, 4, 0));
  Node* forward = nullptr;
  for (int id = 0; id < plan.graph.node_count(); ++id) {
    Node& n = plan.graph.node(id);
    if (n.kind == NodeKind::compute && n.op == OpType::F && n.stage == 0 &&
        n.microbatches.front() == 0)
      forward = &n;
  }
  ASSERT_NE(forward, nullptr);
  forward->stage = 3;
  const std::optional<Violation> v = find_violation(plan.graph);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->rule, "coverage");
  EXPECT_NE(v->message.find("runs micro-batch 0 on stage 3, which it does not pass (stages 0..1)"),
            std::string::npos)
      << v->message;
}

}  // namespace
}  // namespace pipeplan
