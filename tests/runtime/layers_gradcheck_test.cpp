// Every layer kernel's p1 (input gradient) and p2 (weight gradients) against central finite
// differences, all in double precision (the kernels are instantiated for double; see
// gradcheck.h for the tolerance). The objective is Σ r ⊙ y with random r, so dY = r.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "planner/base/error.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/embedding.h"
#include "runtime/cpu/head.h"
#include "runtime/cpu/rmsnorm.h"
#include "runtime/cpu/swiglu_mlp.h"
#include "tests/runtime/gradcheck.h"

namespace pipeplan {
namespace {

using testing::expect_gradient;
using testing::random_values;
using testing::weighted_sum;
using Vec = std::vector<double>;

std::vector<double> gains(std::size_t count, std::uint64_t seed) {
  Vec g = random_values(count, seed, 0.2);
  for (double& value : g)
    value += 1.0;
  return g;
}

TEST(RmsnormGradcheck, P1AndP2MatchFiniteDifferences) {
  const std::int64_t n = 6, c = 8;
  Vec x = random_values(n * c, 1), g = gains(c, 2);
  const Vec r = random_values(n * c, 3);
  Vec y(n * c), xhat(n * c), rstd(n);
  const auto objective = [&] {
    cpu::rmsnorm_forward(y.data(), xhat.data(), rstd.data(), x.data(), g.data(), n, c);
    return weighted_sum(y, r);
  };
  objective();
  Vec dx(n * c, 0.0), dg(c, 0.0);
  cpu::rmsnorm_backward_p1(dx.data(), r.data(), xhat.data(), rstd.data(), g.data(), n, c);
  const cpu::RmsnormRows<double> rows{xhat.data(), r.data(), n};
  cpu::rmsnorm_backward_p2<double>(dg.data(), {&rows, 1}, c);
  expect_gradient("rmsnorm dx", x, dx, objective);
  expect_gradient("rmsnorm dg", g, dg, objective);
}

// Grouped-query (4 heads share 2 kv heads) and plain multi-head; head dim 4 (two RoPE pairs),
// seq 5 so RoPE angles and the causal mask both matter.
class AttentionGradcheck : public ::testing::TestWithParam<std::int64_t> {};

TEST_P(AttentionGradcheck, P1AndP2MatchFiniteDifferences) {
  const AttentionDims dims{2, 5, 16, 4, GetParam()};
  const std::int64_t n = dims.tokens(), c = dims.channels, width = dims.qkv_width();
  // Weights large enough that the softmax is far from uniform.
  Vec x = random_values(n * c, 1), wqkv = random_values(width * c, 2, 0.5);
  Vec wo = random_values(c * c, 3, 0.3);
  const Vec r = random_values(n * c, 4);
  Vec y(n * c), qkv(n * width), probs(dims.batch * dims.heads * dims.seq * dims.seq), out(n * c);
  const cpu::AttentionStash<double> stash{qkv.data(), probs.data(), out.data()};
  const auto objective = [&] {
    cpu::attention_forward(y.data(), stash, x.data(), {wqkv.data(), wo.data()}, dims);
    return weighted_sum(y, r);
  };
  objective();
  Vec dx(n * c, 0.0), dqkv(n * width), dwqkv(width * c, 0.0), dwo(c * c, 0.0);
  cpu::attention_backward_p1(dx.data(), dqkv.data(), r.data(), stash, {wqkv.data(), wo.data()},
                             dims);
  const cpu::AttentionRows<double> rows{x.data(), dqkv.data(), out.data(), r.data(), n};
  cpu::attention_backward_p2<double>({dwqkv.data(), dwo.data()}, {&rows, 1}, dims);
  expect_gradient("attention dx", x, dx, objective);
  expect_gradient("attention dWqkv", wqkv, dwqkv, objective);
  expect_gradient("attention dWo", wo, dwo, objective);
}

INSTANTIATE_TEST_SUITE_P(KvHeads, AttentionGradcheck, ::testing::Values(2, 4));

TEST(SwigluMlpGradcheck, P1AndP2MatchFiniteDifferences) {
  const std::int64_t n = 6, c = 8, f = 12;
  Vec x = random_values(n * c, 1), w_gate = random_values(f * c, 2, 0.5);
  Vec w_up = random_values(f * c, 3, 0.5), w_down = random_values(c * f, 4, 0.5);
  const Vec r = random_values(n * c, 5);
  Vec y(n * c), gate(n * f), up(n * f), h(n * f);
  const cpu::SwigluStash<double> stash{gate.data(), up.data(), h.data()};
  const auto weights = [&] {
    return cpu::SwigluWeights<double>{w_gate.data(), w_up.data(), w_down.data()};
  };
  const auto objective = [&] {
    cpu::swiglu_mlp_forward(y.data(), stash, x.data(), weights(), n, c, f);
    return weighted_sum(y, r);
  };
  objective();
  Vec dx(n * c, 0.0), dgate(n * f), dup(n * f);
  Vec dw_gate(f * c, 0.0), dw_up(f * c, 0.0), dw_down(c * f, 0.0);
  cpu::swiglu_mlp_backward_p1(dx.data(), dgate.data(), dup.data(), r.data(), stash, weights(), n, c,
                              f);
  const cpu::SwigluRows<double> rows{x.data(), dgate.data(), dup.data(), h.data(), r.data(), n};
  cpu::swiglu_mlp_backward_p2<double>({dw_gate.data(), dw_up.data(), dw_down.data()}, {&rows, 1}, c,
                                      f);
  expect_gradient("swiglu dx", x, dx, objective);
  expect_gradient("swiglu dWgate", w_gate, dw_gate, objective);
  expect_gradient("swiglu dWup", w_up, dw_up, objective);
  expect_gradient("swiglu dWdown", w_down, dw_down, objective);
}

// The objective is loss_grad · loss, so p1's loss_grad scaling is checked too.
TEST(HeadGradcheck, P1AndP2MatchFiniteDifferences) {
  const std::int64_t n = 6, c = 8, v = 11;
  const double loss_grad = 0.7;
  Vec x = random_values(n * c, 1), norm = gains(c, 2), lm = random_values(v * c, 3, 0.5);
  const std::vector<std::int32_t> targets = {0, 10, 3, 3, 7, 5};
  Vec loss(1), xhat(n * c), rstd(n), xn(n * c), probs(n * v);
  const cpu::HeadStash<double> stash{xhat.data(), rstd.data(), xn.data(), probs.data()};
  const auto objective = [&] {
    cpu::head_forward(loss.data(), stash, x.data(), targets.data(), {norm.data(), lm.data()}, n, c,
                      v);
    return loss_grad * loss[0];
  };
  objective();
  Vec dx(n * c, 0.0), dlogits(n * v), dxn(n * c), dnorm(c, 0.0), dlm(v * c, 0.0);
  cpu::head_backward_p1(dx.data(), dlogits.data(), dxn.data(), loss_grad, stash, targets.data(),
                        {norm.data(), lm.data()}, n, c, v);
  const cpu::HeadRows<double> rows{xhat.data(), dxn.data(), xn.data(), dlogits.data(), n};
  cpu::head_backward_p2<double>({dnorm.data(), dlm.data()}, {&rows, 1}, c, v);
  expect_gradient("head dx", x, dx, objective);
  expect_gradient("head dnorm", norm, dnorm, objective);
  expect_gradient("head dlm", lm, dlm, objective);
}

TEST(HeadForward, RejectsTargetOutsideVocabulary) {
  Vec loss(1), xhat(4), rstd(1), xn(4), probs(3), x(4, 1.0), norm(4, 1.0), lm(12, 0.1);
  const std::int32_t target = 3;
  EXPECT_THROW(cpu::head_forward(loss.data(), {xhat.data(), rstd.data(), xn.data(), probs.data()},
                                 x.data(), &target, {norm.data(), lm.data()}, 1, 4, 3),
               Error);
}

// Repeated tokens: their rows of dW must accumulate.
TEST(EmbeddingGradcheck, P2MatchesFiniteDifferences) {
  const std::int64_t n = 10, c = 4, v = 5;
  const std::vector<std::int32_t> tokens = {0, 3, 3, 1, 4, 0, 3, 2, 2, 1};
  Vec wte = random_values(v * c, 1);
  const Vec r = random_values(n * c, 2);
  Vec y(n * c);
  const auto objective = [&] {
    cpu::embedding_forward(y.data(), tokens.data(), wte.data(), n, c, v);
    return weighted_sum(y, r);
  };
  Vec dwte(v * c, 0.0);
  const cpu::EmbeddingRows<double> rows{tokens.data(), r.data(), n};
  cpu::embedding_backward_p2<double>(dwte.data(), {&rows, 1}, c);
  expect_gradient("embedding dW", wte, dwte, objective);
}

TEST(EmbeddingForward, RejectsTokenOutsideVocabulary) {
  Vec y(4), wte(8, 0.0);
  const std::int32_t token = 2;
  EXPECT_THROW(cpu::embedding_forward(y.data(), &token, wte.data(), 1, 4, 2), Error);
}

}  // namespace
}  // namespace pipeplan
