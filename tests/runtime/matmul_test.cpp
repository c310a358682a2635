// The blocked matmul kernels against a naive triple loop in double, and p2 over concatenated
// micro-batches against separate calls.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/cpu/matmul.h"
#include "tests/runtime/gradcheck.h"

namespace pipeplan {
namespace {

using testing::random_values;

// Sizes that cross every tile edge (64 rows, 64 outputs, 256 inputs) and leave ragged tails.
constexpr std::int64_t kN = 70, kIn = 300, kOut = 75;

template <typename T>
std::vector<T> as(const std::vector<double>& values) {
  return std::vector<T>(values.begin(), values.end());
}

// Σ_k a[k]·b[k] in double, and Σ_k |a[k]·b[k]| (the scale of its rounding error).
struct Dot {
  double value = 0, magnitude = 0;
};
template <typename T>
Dot naive_dot(const T* a, std::int64_t a_stride, const T* b, std::int64_t b_stride,
              std::int64_t len) {
  Dot dot;
  for (std::int64_t k = 0; k < len; ++k) {
    const double term = double(a[k * a_stride]) * double(b[k * b_stride]);
    dot.value += term;
    dot.magnitude += std::abs(term);
  }
  return dot;
}

// A K-term sum in precision u is off by at most K·u·Σ|terms| (Higham, Accuracy and Stability of
// Numerical Algorithms, §3.1), typically √K·u·Σ|terms|. With K ≤ 300: 1e-5 for float (u = 6e-8)
// sits between the two; 1e-13 for double (u = 1.1e-16) is above the worst case.
template <typename T>
double relative_tolerance() {
  return sizeof(T) == 4 ? 1e-5 : 1e-13;
}

template <typename T>
void check_forward() {
  const std::vector<T> x = as<T>(random_values(kN * kIn, 1)),
                       w = as<T>(random_values(kOut * kIn, 2));
  std::vector<T> y(kN * kOut, T{123});  // overwritten, not accumulated
  cpu::matmul_forward(y.data(), x.data(), w.data(), kN, kIn, kOut);
  for (std::int64_t r = 0; r < kN; ++r) {
    for (std::int64_t o = 0; o < kOut; ++o) {
      const Dot dot = naive_dot(x.data() + r * kIn, 1, w.data() + o * kIn, 1, kIn);
      ASSERT_NEAR(y[r * kOut + o], dot.value, relative_tolerance<T>() * dot.magnitude);
    }
  }
}

template <typename T>
void check_backward_p1() {
  const std::vector<T> dy = as<T>(random_values(kN * kOut, 3)),
                       w = as<T>(random_values(kOut * kIn, 4));
  const std::vector<T> dx0 = as<T>(random_values(kN * kIn, 5));
  std::vector<T> dx = dx0;  // accumulated into
  cpu::matmul_backward_p1(dx.data(), dy.data(), w.data(), kN, kIn, kOut);
  for (std::int64_t r = 0; r < kN; ++r) {
    for (std::int64_t i = 0; i < kIn; ++i) {
      const Dot dot = naive_dot(dy.data() + r * kOut, 1, w.data() + i, kIn, kOut);
      ASSERT_NEAR(dx[r * kIn + i], double(dx0[r * kIn + i]) + dot.value,
                  relative_tolerance<T>() * (dot.magnitude + std::abs(double(dx0[r * kIn + i]))));
    }
  }
}

template <typename T>
void check_backward_p2() {
  const std::vector<T> dy = as<T>(random_values(kN * kOut, 6)),
                       x = as<T>(random_values(kN * kIn, 7));
  const std::vector<T> dw0 = as<T>(random_values(kOut * kIn, 8));
  std::vector<T> dw = dw0;
  const cpu::MatmulRows<T> rows{x.data(), dy.data(), kN};
  cpu::matmul_backward_p2<T>(dw.data(), {&rows, 1}, kIn, kOut);
  for (std::int64_t o = 0; o < kOut; ++o) {
    for (std::int64_t i = 0; i < kIn; ++i) {
      const Dot dot = naive_dot(dy.data() + o, kOut, x.data() + i, kIn, kN);
      ASSERT_NEAR(dw[o * kIn + i], double(dw0[o * kIn + i]) + dot.value,
                  relative_tolerance<T>() * (dot.magnitude + std::abs(double(dw0[o * kIn + i]))));
    }
  }
}

TEST(Matmul, ForwardMatchesNaiveLoop) {
  check_forward<float>();
  check_forward<double>();
}

TEST(Matmul, BackwardP1MatchesNaiveLoopAndAccumulates) {
  check_backward_p1<float>();
  check_backward_p1<double>();
}

TEST(Matmul, BackwardP2MatchesNaiveLoopAndAccumulates) {
  check_backward_p2<float>();
  check_backward_p2<double>();
}

// p2 over k = 3 concatenated micro-batches (17, 64 and 33 rows) equals three single p2 calls.
// Both sum the same terms; only the order of the fp32 additions could differ, by at most
// K·u·Σ|terms| with K = 114 rows (≈ 7e-6·Σ|terms|): the tolerance is 1e-5·Σ|terms|. This kernel
// happens to keep the order (each dW element adds its rows block after block), so the results are
// in fact bitwise equal; a split-K GEMM on a GPU would not be.
TEST(Matmul, BackwardP2ConcatenatedEqualsSumOfSingleCalls) {
  const std::vector<std::int64_t> rows = {17, 64, 33};
  std::vector<std::vector<float>> xs, dys;
  std::vector<cpu::MatmulRows<float>> blocks;
  for (std::size_t b = 0; b < rows.size(); ++b) {
    xs.push_back(as<float>(random_values(rows[b] * kIn, 10 + b)));
    dys.push_back(as<float>(random_values(rows[b] * kOut, 20 + b)));
    blocks.push_back({xs.back().data(), dys.back().data(), rows[b]});
  }
  std::vector<float> concatenated(kOut * kIn, 0.0f), separate(kOut * kIn, 0.0f);
  cpu::matmul_backward_p2<float>(concatenated.data(), blocks, kIn, kOut);
  for (const cpu::MatmulRows<float>& block : blocks) {
    cpu::matmul_backward_p2<float>(separate.data(), {&block, 1}, kIn, kOut);
  }
  for (std::int64_t o = 0; o < kOut; ++o) {
    for (std::int64_t i = 0; i < kIn; ++i) {
      double magnitude = 0;
      for (const auto& block : blocks) {
        magnitude += naive_dot(block.dy + o, kOut, block.x + i, kIn, block.rows).magnitude;
      }
      ASSERT_NEAR(concatenated[o * kIn + i], separate[o * kIn + i], 1e-5 * magnitude);
    }
  }
}

}  // namespace
}  // namespace pipeplan
