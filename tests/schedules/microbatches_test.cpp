#include "schedules/microbatches.h"

#include <gtest/gtest.h>

#include <numeric>
#include <utility>
#include <vector>

namespace pipeplan {
namespace {

std::vector<int> iota(int n, int first = 0) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(MicroBatches, HoldsUpToThreeInlineAndSpillsBeyond) {
  for (int n = 0; n <= 40; ++n) {
    MicroBatches m;
    for (int i = 0; i < n; ++i)
      m.push_back(100 + i);
    ASSERT_EQ(m.size(), static_cast<std::size_t>(n));
    EXPECT_EQ(std::vector<int>(m), iota(n, 100)) << n;
    EXPECT_EQ(m.empty(), n == 0);
    if (n > 0) {
      EXPECT_EQ(m.front(), 100);
      EXPECT_EQ(m.back(), 99 + n);
    }
  }
}

TEST(MicroBatches, CopiesAndMovesKeepValuesAndOwnership) {
  for (const int n : {1, 3, 4, 17}) {
    const MicroBatches original = iota(n);
    MicroBatches copy(original);
    EXPECT_EQ(copy, original);
    copy[0] = -1;  // a copy owns its own values, inline or on the heap
    EXPECT_EQ(original[0], 0);
    MicroBatches moved(std::move(copy));
    EXPECT_EQ(moved[0], -1);
    EXPECT_EQ(moved.size(), static_cast<std::size_t>(n));
    MicroBatches assigned = iota(2, 50);
    assigned = original;  // heap or inline target, either size
    EXPECT_EQ(assigned, original);
    MicroBatches big = iota(9, 7);
    big = std::move(moved);  // releases its own block
    EXPECT_EQ(big.size(), static_cast<std::size_t>(n));
    EXPECT_EQ(big[0], -1);
    big = MicroBatches{5};
    EXPECT_EQ(std::vector<int>(big), std::vector<int>{5});
  }
}

TEST(MicroBatches, ClearKeepsTheBlockAndOrdersLikeAVector) {
  MicroBatches m = iota(10);
  m.clear();
  EXPECT_TRUE(m.empty());
  for (int i = 0; i < 12; ++i)
    m.push_back(i);
  EXPECT_EQ(std::vector<int>(m), iota(12));
  EXPECT_LT(MicroBatches({1, 2}), MicroBatches({1, 3}));
  EXPECT_LT(MicroBatches({1, 2}), MicroBatches({1, 2, 0, 0}));
  EXPECT_EQ(MicroBatches(iota(5)), MicroBatches({0, 1, 2, 3, 4}));
  EXPECT_NE(MicroBatches(iota(5)), MicroBatches({0, 1, 2, 3}));
}

}  // namespace
}  // namespace pipeplan
