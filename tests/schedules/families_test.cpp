// Schedule families: exact per-device orders written out by hand, structural validity over a
// grid of shapes, deadlock freedom, text round trips, and check_schedule's planted faults.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "planner/base/error.h"
#include "schedules/family.h"
#include "schedules/schedule.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

using pipeplan::testing::error_of;

std::string device_order(const Schedule& schedule, int device) {
  std::string text;
  for (const Action& action : schedule.per_device[static_cast<std::size_t>(device)])
    text += (text.empty() ? "" : " ") + format_action(action);
  return text;
}

// Runs the fused schedule with unit-time ops in list order: F(s, mb) waits for F(s-1, mb),
// B(s, mb) for F(s, mb) and B(s+1, mb), within the stages the micro-batch passes. True when every
// action runs (no cyclic wait).
bool runs_to_completion(const Schedule& schedule) {
  std::map<std::tuple<OpType, int, int>, bool> done;
  std::vector<std::size_t> next(schedule.per_device.size(), 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::size_t d = 0; d < schedule.per_device.size(); ++d) {
      if (next[d] == schedule.per_device[d].size()) continue;
      const Action& a = schedule.per_device[d][next[d]];
      const int mb = a.microbatches[0];
      // P1 stands in for B (the gradient leaves after it); P2 only needs its own P1.
      const OpType op = a.op == OpType::P1 ? OpType::B : a.op;
      const int first_stage = schedule.first_stage_of(mb);
      const int last_stage = schedule.last_stage_of(mb);
      const bool ready =
          op == OpType::F    ? (a.stage == first_stage || done[{OpType::F, a.stage - 1, mb}])
          : op == OpType::P2 ? done[{OpType::B, a.stage, mb}]
                             : (done[{OpType::F, a.stage, mb}] &&
                                (a.stage == last_stage || done[{OpType::B, a.stage + 1, mb}]));
      if (!ready) continue;
      done[{op, a.stage, mb}] = true;
      ++next[d];
      progress = true;
    }
  }
  for (std::size_t d = 0; d < schedule.per_device.size(); ++d)
    if (next[d] != schedule.per_device[d].size()) return false;
  return true;
}

TEST(Families, RegistryListsEveryFamily) {
  std::vector<std::string> names;
  for (const ScheduleFamily* family : schedule_families()) {
    names.push_back(family->name());
    EXPECT_FALSE(family->traits().description.empty());
  }
  EXPECT_EQ(
      std::vector<std::string>(names.begin(), names.begin() + 11),
      (std::vector<std::string>{"gpipe", "1f1b", "interleaved", "looped-bfs", "zb-h1", "zb-h2",
                                "zb-v", "dualpipe-v", "dualpipe", "v-half", "v-min"}));
  EXPECT_TRUE(find_schedule_family("interleaved").traits().chunks.accepts(3));
  EXPECT_FALSE(find_schedule_family("1f1b").traits().chunks.accepts(2));
  EXPECT_EQ(error_of([] { find_schedule_family("zb-h3"); })
                .rfind("schedule: unknown schedule family 'zb-h3' (valid: gpipe, 1f1b, "
                       "interleaved, looped-bfs, zb-h1, zb-h2, zb-v, dualpipe-v, dualpipe, v-half, "
                       "v-min",
                       0),
            0u);
}

TEST(Families, GpipeRunsAllForwardsThenAllBackwards) {
  const Schedule s = generate_schedule("gpipe", {2, 1, 3});
  EXPECT_EQ(s.family, "gpipe");
  EXPECT_EQ(s.backward, BackwardMode::fused);
  EXPECT_EQ(s.devices, 2);
  EXPECT_EQ(s.microbatches, 3);
  EXPECT_EQ(s.stage_device, (std::vector<int>{0, 1}));
  EXPECT_EQ(device_order(s, 0), "0F0 0F1 0F2 0B0 0B1 0B2");
  EXPECT_EQ(device_order(s, 1), "1F0 1F1 1F2 1B0 1B1 1B2");
}

TEST(Families, OneFOneBFourDevicesEightMicrobatches) {
  const Schedule s = generate_schedule("1f1b", {4, 1, 8});
  EXPECT_EQ(s.family, "1f1b");
  EXPECT_EQ(s.stage_device, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(device_order(s, 0), "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7");
  EXPECT_EQ(device_order(s, 1), "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 1F7 1B5 1B6 1B7");
  EXPECT_EQ(device_order(s, 3), "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7");
}

TEST(Families, OneFOneBWithFewerMicrobatchesThanDevices) {
  const Schedule s = generate_schedule("1f1b", {4, 1, 2});
  EXPECT_EQ(device_order(s, 0), "0F0 0F1 0B0 0B1");  // warm-up capped at m
  EXPECT_EQ(device_order(s, 2), "2F0 2F1 2B0 2B1");
  EXPECT_EQ(device_order(s, 3), "3F0 3B0 3F1 3B1");
}

TEST(Families, InterleavedTwoChunksTwoDevicesFourMicrobatches) {
  const Schedule s = generate_schedule("interleaved", {2, 2, 4});
  EXPECT_EQ(s.family, "interleaved");
  EXPECT_EQ(s.stage_device, (std::vector<int>{0, 1, 0, 1}));
  // Device 0: warm-up (2-0-1)·2 + (2-1)·2 = 4.
  EXPECT_EQ(device_order(s, 0), "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3");
  // Device 1: warm-up (2-1)·2 = 2.
  EXPECT_EQ(device_order(s, 1), "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3");
}

TEST(Families, InterleavedWithOneChunkIsOneFOneB) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = p; m <= 16; m += p) {
      Schedule interleaved = generate_schedule("interleaved", {p, 1, m});
      Schedule one_f_one_b = generate_schedule("1f1b", {p, 1, m});
      EXPECT_EQ(interleaved.per_device, one_f_one_b.per_device) << "P=" << p << " m=" << m;
      EXPECT_EQ(interleaved.stage_device, one_f_one_b.stage_device);
    }
  }
}

TEST(Families, EveryGeneratedScheduleIsValidRunsAndRoundTrips) {
  for (const ScheduleFamily* family : schedule_families()) {
    if (family->traits().needs_costs) continue;  // built from stage costs (tests/planner/search)
    const ChunkRule& chunks = family->traits().chunks;
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 16; ++m) {
        for (int v = chunks.min; v <= std::min(chunks.max, 3); ++v) {
          if (family->name() == "interleaved" && m % p != 0) continue;
          if (family->name() == "dualpipe-v" && m < 2 * p) continue;  // one per stage at least
          if (family->name() == "dualpipe" && (p % 2 != 0 || m % 2 != 0 || m < 2 * p)) continue;
          const Schedule s = family->generate({p, v, m});
          const std::string where = family->name() + " P=" + std::to_string(p) +
                                    " m=" + std::to_string(m) + " V=" + std::to_string(v);
          EXPECT_EQ(s.stage_count(), p * v) << where;
          EXPECT_EQ(error_of([&] { check_schedule(s); }), "<no error>") << where;
          EXPECT_TRUE(runs_to_completion(s)) << where;
          EXPECT_EQ(schedule_from_text(schedule_to_text(s)), s) << where;
        }
      }
    }
  }
}

TEST(Families, RequestErrorsNameTheField) {
  EXPECT_EQ(error_of([] {
              generate_schedule("1f1b", {0, 1, 4});
            }),
            "devices: need at least 1 device, got 0");
  EXPECT_EQ(error_of([] {
              generate_schedule("gpipe", {2, 1, 0});
            }),
            "microbatches: need at least 1 micro-batch, got 0");
  EXPECT_EQ(error_of([] {
              generate_schedule("interleaved", {2, 0, 4});
            }),
            "chunks: need at least 1 chunk per device, got 0");
  EXPECT_EQ(error_of([] {
              generate_schedule("1f1b", {2, 2, 4});
            }),
            "chunks: schedule '1f1b' runs one chunk per device, got 2 (interleaved, looped-bfs "
            "take more)");
  EXPECT_EQ(error_of([] {
              generate_schedule("interleaved", {4, 2, 6});
            }),
            "microbatches: interleaved needs a multiple of the 4 devices, got 6");
  // With one chunk interleaved is 1F1B, for any count: the same order.
  const Schedule one = generate_schedule("interleaved", {4, 1, 6});
  const Schedule onefoneb = generate_schedule("1f1b", {4, 1, 6});
  EXPECT_EQ(one.per_device, onefoneb.per_device);
}

// Planted faults: each names the first offending action and the rule.
class FamiliesCheck : public ::testing::Test {
 protected:
  Schedule schedule =
      generate_schedule("1f1b", {2, 1, 2});  // 0: 0F0 0F1 0B0 0B1   1: 1F0 1B0 1F1 1B1
  std::string check() {
    return error_of([&] { check_schedule(schedule); });
  }
  std::vector<Action>& device(int d) { return schedule.per_device[static_cast<std::size_t>(d)]; }
};

TEST_F(FamiliesCheck, MissingForward) {
  device(0).erase(device(0).begin() + 1);  // drop 0F1
  EXPECT_EQ(check(), "schedule check: device 0 position 2 (0B1): B before F of micro-batch 1");
  device(0).pop_back();  // drop 0B1 as well
  EXPECT_EQ(check(), "schedule check: stage 0 micro-batch 1: no F");
}

TEST_F(FamiliesCheck, P2BeforeP1) {
  device(1) = {{OpType::F, 1, {0}}, {OpType::P2, 1, {0}}, {OpType::P1, 1, {0}},
               {OpType::F, 1, {1}}, {OpType::P1, 1, {1}}, {OpType::P2, 1, {1}}};
  EXPECT_EQ(check(), "schedule check: device 1 position 1 (1P2_0): P2 before P1 of micro-batch 0");
}

TEST_F(FamiliesCheck, BackwardOnTheWrongDevice) {
  device(0).pop_back();
  device(1).push_back({OpType::B, 0, {1}});
  EXPECT_EQ(check(), "schedule check: device 1 position 4 (0B1): stage 0 runs on device 0");
}

TEST_F(FamiliesCheck, DuplicateMicrobatch) {
  device(1) = {{OpType::F, 1, {0}},  {OpType::P1, 1, {0}},    {OpType::F, 1, {1}},
               {OpType::P1, 1, {1}}, {OpType::P2, 1, {0, 1}}, {OpType::P2, 1, {1}}};
  EXPECT_EQ(check(),
            "schedule check: device 1 position 5 (1P2_1): micro-batch 1 already in an earlier P2");
  device(0).insert(device(0).begin() + 1, {OpType::F, 0, {0}});
  EXPECT_EQ(check(), "schedule check: device 0 position 1 (0F0): duplicate F of micro-batch 0");
}

TEST_F(FamiliesCheck, OtherRules) {
  device(0)[3] = {OpType::B, 0, {2}};
  EXPECT_EQ(check(), "schedule check: device 0 position 3 (0B2): micro-batch 2 outside 0..1");
  device(0)[3] = {OpType::B, 5, {1}};
  EXPECT_EQ(check(), "schedule check: device 0 position 3 (5B1): stage does not exist (2 stages)");
  device(0)[3] = {OpType::P1, 0, {1}};
  EXPECT_EQ(check(), "schedule check: device 0 position 3 (0P1_1): P1 without a P2");
  device(0)[3] = {OpType::B, 0, {0}};
  EXPECT_EQ(check(), "schedule check: device 0 position 3 (0B0): second backward of micro-batch 0");
}

}  // namespace
}  // namespace pipeplan
