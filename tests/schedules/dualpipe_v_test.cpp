// DualPipeV (schedules/families/dualpipe.cpp) against what it claims: PyTorch's own
// ScheduleDualPipeV orders (dumped by torch 2.15's `_dump_csv`, fixtures/torch/dumps/), the
// paper's bubble (P - 1)(F&B + B - 3W) at uniform costs for F&B between max(F, B) and F + B, and
// the overlapped pair's notation, checks and deadlock rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "schedules/deadlock.h"
#include "schedules/family.h"
#include "schedules/torch_csv.h"
#include "tests/error_support.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

using testing::error_of;

const std::filesystem::path kDumps =
    std::filesystem::path(PIPEPLAN_SOURCE_DIR) / "tests/schedules/fixtures/torch/dumps";

std::string without_cr(std::string text) {
  std::erase(text, '\r');
  return text;
}

Schedule dualpipe_v(int devices, int microbatches) {
  return generate_schedule("dualpipe-v",
                           {.devices = devices, .chunks = 2, .microbatches = microbatches});
}

TEST(DualPipeV, ExportsExactlyPyTorchsOwnOrder) {
  for (const auto& [p, m] : {std::pair{2, 4}, {4, 8}, {4, 12}}) {
    const std::string name = "ScheduleDualPipeV-p" + std::to_string(p) + "-m" + std::to_string(m);
    SCOPED_TRACE(name);
    const Schedule ours = dualpipe_v(p, m);
    EXPECT_NO_THROW(check_schedule(ours));
    EXPECT_FALSE(find_deadlock(ours));
    EXPECT_EQ(schedule_to_torch_csv(ours),
              without_cr(read_text_file(kDumps / (name + ".compute_only.csv"))));
    // PyTorch's default dump (communication and wait cells too) imports to our very order,
    // overlapped pairs included.
    const Schedule imported = load_torch_csv(kDumps / (name + ".csv"));
    EXPECT_EQ(imported.per_device, ours.per_device);
    EXPECT_EQ(imported.stage_device, ours.stage_device);
  }
}

TEST(DualPipeV, NeedsTwoMicroBatchesPerDeviceAndTwoChunks) {
  EXPECT_EQ(error_of([] { dualpipe_v(4, 7); }),
            "microbatches: schedule 'dualpipe-v' needs at least 2P = 8 micro-batches (one per "
            "stage), got 7");
  EXPECT_NE(error_of([] {
              generate_schedule("dualpipe-v", {.devices = 4, .chunks = 1, .microbatches = 8});
            }).find("exactly 2 chunks"),
            std::string::npos);
}

// The paper's bubble, the largest idle time of a device within the step: at F = P1 = P2 = 1 ms
// per chunk (B = 2, W = 1) and comm 0, (P - 1)(F&B + B - 3W) with F&B = overlapped_time_us(F, B).
TEST(DualPipeV, BubbleIsThePapersFormula) {
  for (const int p : {4, 8, 16}) {
    for (const int m : {2 * p, 4 * p}) {
      for (const double efficiency : {0.0, 0.5, 1.0}) {
        SCOPED_TRACE("P=" + std::to_string(p) + " m=" + std::to_string(m) +
                     " efficiency=" + std::to_string(efficiency));
        PlanRequest r = testing::uniform_request({.devices = p,
                                                  .microbatches = m,
                                                  .chunks = 2,
                                                  .schedule = "dualpipe-v",
                                                  .backward = BackwardMode::twobp,
                                                  .f = 2,
                                                  .b = 2,
                                                  .w = 2});
        r.profile.overlap.efficiency = efficiency;
        const Plan plan = make_plan(r);
        double bubble = 0;
        for (const DeviceMetrics& d : plan.sim.devices)
          bubble = std::max(bubble, plan.sim.makespan_us - d.busy_us);
        const double f_and_b = overlapped_time_us(1, 2, efficiency);
        EXPECT_NEAR(bubble, (p - 1) * (f_and_b + 2 - 3) * 1e3, 1e-6);
        // Every device does the same work: 2m chunks of F, B and W, the pairs overlapped.
        const int pairs = static_cast<int>(std::count_if(
            plan.graph.schedule.per_device[0].begin(), plan.graph.schedule.per_device[0].end(),
            [](const Action& a) { return a.overlaps_next; }));
        EXPECT_NEAR(plan.sim.devices[0].busy_us, (2 * m * 3 - pairs * (3 - f_and_b)) * 1e3, 1e-6);
      }
    }
  }
}

TEST(DualPipeV, OverlapShortensTheStepAndFullOverlapBeatsZbV) {
  const auto step = [](const char* schedule, double efficiency) {
    PlanRequest r = testing::uniform_request({.devices = 8,
                                              .microbatches = 32,
                                              .chunks = 2,
                                              .schedule = schedule,
                                              .backward = BackwardMode::twobp});
    r.profile.overlap.efficiency = efficiency;
    return make_plan(r).sim.makespan_us;
  };
  EXPECT_LT(step("dualpipe-v", 1.0), step("dualpipe-v", 0.5));
  EXPECT_LT(step("dualpipe-v", 0.5), step("dualpipe-v", 0.0));
  EXPECT_LT(step("dualpipe-v", 1.0), step("zb-v", 1.0));
  EXPECT_EQ(step("zb-v", 1.0), step("zb-v", 0.0));  // no pairs: the efficiency changes nothing
}

TEST(OverlappedPair, TextFormRoundTrips) {
  const Schedule s = dualpipe_v(2, 4);
  const std::string text = schedule_to_text(s);
  EXPECT_NE(text.find(" (0F3;3B1) "), std::string::npos) << text;
  EXPECT_EQ(schedule_from_text(text), s);
  EXPECT_NE(error_of([] {
              schedule_from_text(
                  "schedule v1 family=x backward=fused devices=1 microbatches=1 "
                  "stages=0\n0: (0F0;0B0\n");
            }).find("malformed action '(0F0;0B0'"),
            std::string::npos);
}

Schedule one_device(const std::vector<Action>& actions, int microbatches, int stages = 1) {
  Schedule s;
  s.family = "test";
  s.devices = 1;
  s.microbatches = microbatches;
  s.stage_device.assign(static_cast<std::size_t>(stages), 0);
  s.per_device = {actions};
  return s;
}

Action overlapping(Action a) {
  a.overlaps_next = true;
  return a;
}

TEST(OverlappedPair, CheckNamesEachBrokenRule) {
  const auto check = [](const Schedule& s) { return error_of([&] { check_schedule(s); }); };
  EXPECT_EQ(check(one_device({{OpType::F, 0, {0}}, overlapping({OpType::B, 0, {0}})}, 1)),
            "schedule check: device 0 position 1 (0B0): overlaps the next action but is the "
            "device's last");
  EXPECT_EQ(check(one_device({{OpType::F, 0, {0}},
                              {OpType::F, 0, {1}},
                              overlapping({OpType::B, 0, {0}}),
                              {OpType::F, 0, {2}},
                              {OpType::B, 0, {1}},
                              {OpType::B, 0, {2}}},
                             3)),
            "schedule check: device 0 position 2 (0B0): an overlapped pair is an F then a B or P1, "
            "got 0F2");
  EXPECT_EQ(check(one_device({overlapping({OpType::F, 0, {0}}), {OpType::B, 0, {0}}}, 1)),
            "schedule check: device 0 position 0 (0F0): overlapped with its own backward");
  EXPECT_EQ(check(one_device({{OpType::F, 0, {0}},
                              overlapping({OpType::F, 0, {1}}),
                              overlapping({OpType::B, 0, {0}}),
                              {OpType::B, 0, {1}}},
                             2)),
            "schedule check: device 0 position 2 (0B0): overlaps both the action before and after "
            "it");
}

// A pair starts when both its actions can. Here 0B1 needs 1B1, which device 1 runs after 1F0,
// which needs 0F0: in sequence 0F0 would run first and all would end; as a pair 0F0 waits for
// 0B1's input, and the two devices wait on each other.
TEST(OverlappedPair, APairStartsOnlyWhenBothActionsCan) {
  Schedule s;
  s.family = "test";
  s.devices = 2;
  s.microbatches = 2;
  s.stage_device = {0, 1};
  s.per_device = {
      {{OpType::F, 0, {1}},
       overlapping({OpType::F, 0, {0}}),
       {OpType::B, 0, {1}},
       {OpType::B, 0, {0}}},
      {{OpType::F, 1, {0}}, {OpType::F, 1, {1}}, {OpType::B, 1, {1}}, {OpType::B, 1, {0}}}};
  EXPECT_NO_THROW(check_schedule(s));
  EXPECT_TRUE(find_deadlock(s));
  s.per_device[0][1].overlaps_next = false;
  EXPECT_FALSE(find_deadlock(s));
}

}  // namespace
}  // namespace pipeplan
