// The one median: odd and even counts, order-independent, none refused.
#include "planner/base/stats.h"

#include <gtest/gtest.h>

#include "planner/base/error.h"

namespace pipeplan {
namespace {

TEST(Median, OddEvenAndEmpty) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({7}), 7);
  EXPECT_THROW(median({}), Error);
}

}  // namespace
}  // namespace pipeplan
