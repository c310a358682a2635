// The one median: odd and even counts, order-independent, none refused; least squares and least
// absolute deviations, with and without rows far off.
#include "planner/base/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "planner/base/error.h"

namespace pipeplan {
namespace {

TEST(Median, OddEvenAndEmpty) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({7}), 7);
  EXPECT_THROW(median({}), Error);
}

// y = 2 x + 1 at x = 1..10, and one row far off (x = 5, y = 100).
std::vector<std::pair<std::vector<double>, double>> line_with_an_outlier() {
  std::vector<std::pair<std::vector<double>, double>> rows;
  for (int x = 1; x <= 10; ++x)
    rows.push_back({{static_cast<double>(x), 1.0}, 2.0 * x + 1});
  rows.push_back({{5.0, 1.0}, 100.0});
  return rows;
}

TEST(LeastSquares, ExactRowsGiveTheLineAndAnOutlierPullsIt) {
  std::vector<std::pair<std::vector<double>, double>> rows = line_with_an_outlier();
  rows.pop_back();
  const auto exact = least_squares(rows);
  ASSERT_TRUE(exact.has_value());
  EXPECT_NEAR((*exact)[0], 2, 1e-9);
  EXPECT_NEAR((*exact)[1], 1, 1e-9);
  const auto pulled = least_squares(line_with_an_outlier());
  ASSERT_TRUE(pulled.has_value());
  EXPECT_GT(std::abs((*pulled)[1] - 1), 5);
  EXPECT_FALSE(least_squares({}).has_value());
}

TEST(LeastAbsolute, ARowFarOffDoesNotPullTheFit) {
  const auto fit = least_absolute(line_with_an_outlier());
  ASSERT_TRUE(fit.has_value());
  EXPECT_NEAR((*fit)[0], 2, 1e-4);
  EXPECT_NEAR((*fit)[1], 1, 1e-4);
  EXPECT_FALSE(least_absolute({}).has_value());
}

}  // namespace
}  // namespace pipeplan
