// Backward modes: where the p2s go.
#include "schedules/backward.h"

#include <gtest/gtest.h>

#include "planner/base/error.h"
#include "schedules/family.h"

namespace pipeplan {
namespace {

TEST(BackwardModes, FusedKeepsTheSchedule) {
  const Schedule fused = generate_schedule("1f1b", {.devices = 3, .chunks = 1, .microbatches = 5});
  const Schedule out = apply_backward_mode(fused, BackwardMode::fused, 1);
  EXPECT_EQ(out.per_device, fused.per_device);
}

TEST(BackwardModes, TwoBpDefersAndConcatenates) {
  const Schedule fused = generate_schedule("1f1b", {.devices = 2, .chunks = 1, .microbatches = 8});
  const Schedule out = apply_backward_mode(fused, BackwardMode::twobp, 3);
  check_schedule(out);
  for (const auto& actions : out.per_device) {
    // Every B became a P1 in place; the tail holds P2 groups of 3, 3, 2 in p1 order.
    ASSERT_EQ(actions.size(), 16u + 3u);
    for (std::size_t i = 0; i < 16; ++i)
      EXPECT_NE(actions[i].op, OpType::P2);
    EXPECT_EQ(actions[16].microbatches, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(actions[17].microbatches, (std::vector<int>{3, 4, 5}));
    EXPECT_EQ(actions[18].microbatches, (std::vector<int>{6, 7}));
  }
  const Schedule all = apply_backward_mode(fused, BackwardMode::twobp, 0);
  EXPECT_EQ(all.per_device[0].back().microbatches.size(), 8u);
  EXPECT_THROW(apply_backward_mode(fused, BackwardMode::twobp, -1), Error);
}

}  // namespace
}  // namespace pipeplan
