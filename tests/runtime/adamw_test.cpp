// AdamW against updates worked out by hand.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/cpu/adamw.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/runtime/models.h"

namespace pipeplan {
namespace {

// lr 0.1, β1 0.9, β2 0.999, eps 1e-8, wd 0.01; w = (1, −0.5, 2), g = (0.1, −0.2, 0), m = v = 0.
// Step 1: m = 0.1·g, v = 0.001·g², so m̂ = g and v̂ = g², and the update is
//   g/(|g| + eps) + wd·w:  w0 = 1 − 0.1·(0.1/(0.1 + 1e-8) + 0.01) = 0.899000009999999
//                          w1 = −0.5 − 0.1·(−0.2/(0.2 + 1e-8) − 0.005) = −0.399500005
//                          w2 = 2 − 0.1·(0 + 0.02) = 1.998 (decay only)
// Step 2 (same g): m = 0.19·g, v = 0.001999·g²; corrections 1 − 0.81 and 1 − 0.998001 give
//   m̂ = g, v̂ = g² again: w0 = 0.899000009999999 − 0.1·(0.9999999 + 0.00899000009999999)
//                           = 0.798101019989999, w1 = −0.299100509995, w2 = 1.996002.
template <typename T>
void check_two_steps(double tolerance) {
  const AdamWConfig config{0.1, 0.9, 0.999, 1e-8, 0.01};
  std::vector<T> w = {1.0, -0.5, 2.0}, m(3, T{0}), v(3, T{0});
  const std::vector<T> g = {T(0.1), T(-0.2), T(0.0)};
  cpu::adamw_update(w.data(), m.data(), v.data(), g.data(), 3, config, 1, true);
  EXPECT_NEAR(w[0], 0.899000009999999, tolerance);
  EXPECT_NEAR(w[1], -0.399500005, tolerance);
  EXPECT_NEAR(w[2], 1.998, tolerance);
  EXPECT_NEAR(m[0], 0.01, tolerance);
  EXPECT_NEAR(v[1], 4e-5, tolerance * 1e-3);
  cpu::adamw_update(w.data(), m.data(), v.data(), g.data(), 3, config, 2, true);
  EXPECT_NEAR(w[0], 0.798101019989999, tolerance);
  EXPECT_NEAR(w[1], -0.299100509995, tolerance);
  EXPECT_NEAR(w[2], 1.996002, tolerance);
}

TEST(AdamW, MatchesHandComputedUpdates) {
  check_two_steps<double>(1e-14);
  check_two_steps<float>(1e-7);  // one float rounding of values near 1 (u = 6e-8)
}

TEST(AdamW, WithoutDecayAZeroGradientLeavesTheWeight) {
  const AdamWConfig config{0.1, 0.9, 0.999, 1e-8, 0.01};
  double w = 2.0, m = 0, v = 0;
  const double g = 0;
  cpu::adamw_update(&w, &m, &v, &g, 1, config, 1, false);
  EXPECT_EQ(w, 2.0);
}

TEST(AdamW, RejectsStepZero) {
  double w = 1, m = 0, v = 0, g = 0;
  EXPECT_THROW(cpu::adamw_update(&w, &m, &v, &g, 1, AdamWConfig{}, 0, true), Error);
}

// Through the backend with zero gradients: matrices shrink by exactly (1 − lr·wd); norm gains
// (no weight decay) stay 1.
TEST(AdamW, BackendDecaysMatricesButNotGains) {
  cpu::CpuBackend backend(DType::f64);
  LayerParams block = backend.init_layer(testing::tiny_model(), LayerKind::block, 1, 3);
  const std::vector<double> wo = backend.download(block.at("attn.wo").weight);
  backend.adamw_step(block, AdamWConfig{0.1, 0.9, 0.95, 1e-8, 0.5}, 1);
  const std::vector<double> wo_after = backend.download(block.at("attn.wo").weight);
  for (std::size_t i = 0; i < wo.size(); ++i)
    EXPECT_NEAR(wo_after[i], wo[i] * 0.95, 1e-15);
  for (const double gain : backend.download(block.at("mlp_norm").weight))
    EXPECT_EQ(gain, 1.0);
}

}  // namespace
}  // namespace pipeplan
