// Central finite differences in double precision for the runtime's gradient tests.
//
// Tolerance: with step h = 1e-5 the truncation error is h²/6·|f'''| ≈ 2e-11·|f'''| and the
// rounding error about ε·|f|/h ≈ 1e-16·|f|/1e-5 = 1e-11·|f|; for the O(1..100) objectives and
// derivatives of these tiny layers both stay below 1e-8, so |analytic − fd| ≤ 1e-6·(1 + |fd|)
// has two orders of margin, while any real bug (a missing term, a wrong transpose) is O(1e-2)
// or worse.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/random.h"

namespace pipeplan::testing {

inline constexpr double kFdStep = 1e-5;
inline constexpr double kFdTolerance = 1e-6;

inline std::vector<double> random_values(std::size_t count, std::uint64_t seed,
                                         double stddev = 1.0) {
  std::vector<double> values(count);
  fill_normal(values, stddev, seed);
  return values;
}

// Σ r ⊙ y: a scalar objective whose gradient with respect to y is r.
inline double weighted_sum(const std::vector<double>& y, const std::vector<double>& r) {
  double sum = 0;
  for (std::size_t i = 0; i < y.size(); ++i)
    sum += y[i] * r[i];
  return sum;
}

// Checks analytic[i] against the central difference of `objective` in values[i], for every
// `stride`-th element. `values` is perturbed in place and restored.
inline void expect_gradient(const std::string& what, std::vector<double>& values,
                            const std::vector<double>& analytic,
                            const std::function<double()>& objective, std::size_t stride = 1) {
  ASSERT_EQ(values.size(), analytic.size()) << what;
  for (std::size_t i = 0; i < values.size(); i += stride) {
    const double saved = values[i];
    values[i] = saved + kFdStep;
    const double plus = objective();
    values[i] = saved - kFdStep;
    const double minus = objective();
    values[i] = saved;
    const double fd = (plus - minus) / (2 * kFdStep);
    ASSERT_NEAR(analytic[i], fd, kFdTolerance * (1 + std::abs(fd))) << what << "[" << i << "]";
  }
}

}  // namespace pipeplan::testing
