// runtime/cuda's hand-written kernels (kernels.h), run on the CPU by kernel_sim, against the CPU
// backend's references (runtime/cpu) or, where the CPU backend fuses the op into a bigger layer,
// a few lines of fp64 here. Shapes are small but chosen to cross every boundary the kernels have:
// rows longer and shorter than a block, columns that are not a multiple of 32, several row chunks,
// blocks of 1024 threads. Tolerances: the kernels store bf16 (8-bit significand), so one rounding
// of the output is 2^-8 relative; they compute in fp32 from the same bf16 inputs the reference
// reads, so the bound is |got − want| <= 2^-7 · |want| + atol, atol named per test.
#include "tests/runtime/cuda/kernels/kernel_sim.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/cpu/adamw.h"
#include "runtime/cpu/embedding.h"
#include "runtime/cpu/rmsnorm.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace pipeplan::cuda {
namespace {

constexpr double kRelative = 1.0 / 128.0;

std::vector<bf16> random_bf16(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<bf16> out(n);
  for (bf16& value : out)
    value = __float2bfloat16(normal(rng));
  return out;
}

std::vector<double> to_double(std::span<const bf16> values) {
  std::vector<double> out(values.size());
  std::transform(values.begin(), values.end(), out.begin(),
                 [](bf16 value) { return double(__bfloat162float(value)); });
  return out;
}

std::vector<double> to_double(std::span<const float> values) {
  return {values.begin(), values.end()};
}

// Every element within kRelative · |want| + atol; reports the first few that are not.
void expect_close(std::span<const double> got, std::span<const double> want, double atol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bound = kRelative * std::abs(want[i]) + atol;
    if (!(std::abs(got[i] - want[i]) <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (bound "
                    << bound << ")";
    }
  }
}

void expect_close(std::span<const bf16> got, std::span<const double> want, double atol,
                  const char* what) {
  expect_close(to_double(got), want, atol, what);
}

// ---- the simulator itself

__global__ void block_sum_kernel(float* out, const float* in) {
  __shared__ float scratch[32];
  const float total = block_sum(in[blockIdx.x * blockDim.x + threadIdx.x], scratch);
  out[blockIdx.x * blockDim.x + threadIdx.x] = total;
}

TEST(KernelSim, BlockSumGivesEveryThreadTheTotalForEveryBlockSize) {
  for (const unsigned int threads : {32u, 96u, 256u, 1024u}) {
    const unsigned int blocks = 2;
    std::vector<float> in(std::size_t{blocks} * threads), out(in.size(), -1.0f);
    for (std::size_t i = 0; i < in.size(); ++i)
      in[i] = float(i % 7);
    launch(block_sum_kernel, blocks, threads, nullptr, out.data(), in.data());
    for (unsigned int b = 0; b < blocks; ++b) {
      float want = 0.0f;
      for (unsigned int t = 0; t < threads; ++t)
        want += in[b * threads + t];
      for (unsigned int t = 0; t < threads; ++t)
        ASSERT_EQ(out[b * threads + t], want)
            << threads << " threads, block " << b << " thread " << t;
    }
  }
}

__global__ void shuffle_after_exit_kernel(float* out) {
  if (threadIdx.x == 3) return;  // lane 3 leaves, the rest of the warp shuffles: undefined on a GPU
  out[threadIdx.x] = warp_sum(1.0f);
}

TEST(KernelSim, ReportsAFullMaskShuffleAfterALaneReturned) {
  std::vector<float> out(32);
  try {
    launch(shuffle_after_exit_kernel, 1, 32, nullptr, out.data());
    FAIL() << "the shuffle was not reported";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("__shfl_xor_sync"), std::string::npos) << error.what();
  }
}

__global__ void divergent_barrier_kernel(float* out) {
  // Half the warp shuffles while the other half waits at __syncthreads: neither can complete.
  if (threadIdx.x < 16) {
    out[threadIdx.x] = warp_sum(1.0f);
  } else {
    __syncthreads();
  }
}

TEST(KernelSim, ReportsADeadlockInsteadOfHanging) {
  std::vector<float> out(32);
  try {
    launch(divergent_barrier_kernel, 1, 32, nullptr, out.data());
    FAIL() << "the deadlock was not reported";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("deadlock"), std::string::npos) << error.what();
  }
}

TEST(KernelSim, RefusesALaunchNoGpuWouldTake) {
  std::vector<float> out(32);
  EXPECT_THROW(launch(shuffle_after_exit_kernel, 1, 2048, nullptr, out.data()), std::runtime_error);
  EXPECT_THROW(launch(shuffle_after_exit_kernel, 0, 32, nullptr, out.data()), std::runtime_error);
}

// ---- elementwise.cu

TEST(Kernels, FillAndCastCoverEveryElement) {
  const std::int64_t n = 1000;  // not a multiple of the block (256)
  std::vector<float> values(n, -1.0f);
  fill_f32(values.data(), n, 2.5f, nullptr);
  EXPECT_TRUE(std::all_of(values.begin(), values.end(), [](float v) { return v == 2.5f; }));
  for (std::int64_t i = 0; i < n; ++i)
    values[i] = float(i) / 3.0f;
  std::vector<bf16> cast(n);
  cast_f32_to_bf16(cast.data(), values.data(), n, nullptr);
  for (std::int64_t i = 0; i < n; ++i)
    ASSERT_EQ(__bfloat162float(cast[i]), __bfloat162float(__float2bfloat16(values[i]))) << i;
}

// Rows of 300 columns (not a multiple of the block) into rows 320 apart: every element lands in
// its row, and the 20 columns between rows are not written.
TEST(Kernels, RowCastWritesEachRowAtItsStrideAndNothingBetween) {
  const std::int64_t rows = 7, cols = 300, ld = 320;
  std::vector<float> values(rows * cols);
  for (std::int64_t i = 0; i < rows * cols; ++i)
    values[i] = float(i) / 7.0f;
  const bf16 untouched = __float2bfloat16(-1.0f);
  std::vector<bf16> out(rows * ld, untouched);
  cast_f32_to_bf16_rows(out.data(), ld, values.data(), rows, cols, nullptr);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < ld; ++c) {
      const float got = __bfloat162float(out[r * ld + c]);
      const float want =
          c < cols ? __bfloat162float(__float2bfloat16(values[r * cols + c])) : -1.0f;
      ASSERT_EQ(got, want) << "row " << r << " column " << c;
    }
  }
}

// ---- rmsnorm.cu against runtime/cpu/rmsnorm

struct RmsnormCase {
  std::int64_t n, c;
};

class RmsnormKernels : public ::testing::TestWithParam<RmsnormCase> {};

TEST_P(RmsnormKernels, ForwardP1AndP2MatchTheCpuReference) {
  const auto [n, c] = GetParam();
  const auto x = random_bf16(n * c, 1), g = random_bf16(c, 2, 0.5f), dy = random_bf16(n * c, 3);
  const auto residual = random_bf16(n * c, 4);
  const auto xd = to_double(x), gd = to_double(g), dyd = to_double(dy);

  std::vector<double> y_ref(n * c), xhat_ref(n * c), rstd_ref(n);
  cpu::rmsnorm_forward(y_ref.data(), xhat_ref.data(), rstd_ref.data(), xd.data(), gd.data(), n, c);
  std::vector<bf16> y(n * c), xhat(n * c);
  std::vector<float> rstd(n);
  rmsnorm_forward(y.data(), xhat.data(), rstd.data(), x.data(), g.data(), n, c, kRmsNormEps,
                  nullptr);
  expect_close(y, y_ref, 1e-3, "y");
  expect_close(xhat, xhat_ref, 1e-3, "xhat");
  expect_close(to_double(rstd), rstd_ref, 1e-6, "rstd");

  // p1 reads the kernel's own bf16 x̂ and rstd (as on the GPU); so does the reference.
  const auto xhat_d = to_double(xhat), rstd_d = to_double(rstd);
  std::vector<double> dx_ref = to_double(residual);  // the reference accumulates
  cpu::rmsnorm_backward_p1(dx_ref.data(), dyd.data(), xhat_d.data(), rstd_d.data(), gd.data(), n,
                           c);
  std::vector<bf16> dx(n * c);
  rmsnorm_backward_p1(dx.data(), residual.data(), dy.data(), xhat.data(), rstd.data(), g.data(), n,
                      c, nullptr);
  expect_close(dx, dx_ref, 2e-2, "dx with residual");
  std::vector<double> dx0_ref(n * c, 0.0);
  cpu::rmsnorm_backward_p1(dx0_ref.data(), dyd.data(), xhat_d.data(), rstd_d.data(), gd.data(), n,
                           c);
  rmsnorm_backward_p1(dx.data(), nullptr, dy.data(), xhat.data(), rstd.data(), g.data(), n, c,
                      nullptr);
  expect_close(dx, dx0_ref, 2e-2, "dx without residual");

  // p2 accumulates into what is there: start both from 1.
  std::vector<double> dg_ref(c, 1.0);
  const cpu::RmsnormRows<double> rows{xhat_d.data(), dyd.data(), n};
  cpu::rmsnorm_backward_p2(dg_ref.data(), std::span(&rows, 1), c);
  std::vector<float> dg(c, 1.0f);
  rmsnorm_backward_p2(dg.data(), xhat.data(), dy.data(), n, c, nullptr);
  expect_close(to_double(dg), dg_ref, 1e-3, "dg");
}

// p2's grid is (column tiles of 128 threads, chunks of 16 rows). 300 columns one per thread make
// 3 tiles, 1032 in packs of 8 make 2 (129 packs); 40 rows make 3 chunks, the last one short.
TEST(Kernels, RmsnormP2SumsEveryRowChunkAndColumnTile) {
  const std::int64_t rows = 40;
  for (const std::int64_t c : {std::int64_t{300}, std::int64_t{1032}}) {
    const auto xhat = random_bf16(rows * c, 17), dy = random_bf16(rows * c, 18);
    const auto xhat_d = to_double(xhat), dy_d = to_double(dy);
    std::vector<double> dg_ref(c, -2.0);
    const cpu::RmsnormRows<double> block{xhat_d.data(), dy_d.data(), rows};
    cpu::rmsnorm_backward_p2(dg_ref.data(), std::span(&block, 1), c);
    std::vector<float> dg(c, -2.0f);
    rmsnorm_backward_p2(dg.data(), xhat.data(), dy.data(), rows, c, nullptr);
    expect_close(to_double(dg), dg_ref, 1e-3, c == 300 ? "dg, scalar" : "dg, packs");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsnormKernels,
                         // Rows shorter and longer than a block of 256 threads, with
                         // scalar accesses (C not a multiple of 8) and with packs of 8.
                         ::testing::Values(RmsnormCase{3, 100}, RmsnormCase{2, 602},
                                           RmsnormCase{3, 96}, RmsnormCase{2, 2104}),
                         [](const auto& param_info) {
                           return "n" + std::to_string(param_info.param.n) + "_c" +
                                  std::to_string(param_info.param.c);
                         });

// ---- rope.cu

// head_dim 16: two packs of 8 per head; 6: heads off the 16-byte grid, one pair per thread.
class RopeKernel : public ::testing::TestWithParam<std::int64_t> {};

TEST_P(RopeKernel, RotatesQAndKPairsAndItsBackwardUndoesIt) {
  const std::int64_t batch = 2, seq = 5, heads = 2, kv_heads = 1, head_dim = GetParam();
  const std::int64_t width = (heads + 2 * kv_heads) * head_dim;
  const double base = 10000.0;
  const auto qkv_in = random_bf16(batch * seq * width, 5);
  const auto in = to_double(qkv_in);
  std::vector<double> want = in;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < seq; ++t) {
      for (std::int64_t h = 0; h < heads + kv_heads; ++h) {  // q heads, then k heads; v untouched
        for (std::int64_t i = 0; i < head_dim / 2; ++i) {
          const double angle = double(t) * std::pow(base, -2.0 * double(i) / double(head_dim));
          const std::int64_t at = (b * seq + t) * width + h * head_dim + 2 * i;
          want[at] = in[at] * std::cos(angle) - in[at + 1] * std::sin(angle);
          want[at + 1] = in[at] * std::sin(angle) + in[at + 1] * std::cos(angle);
        }
      }
    }
  }
  std::vector<bf16> qkv = qkv_in;
  rope_rotate(qkv.data(), batch, seq, heads, kv_heads, head_dim, base, 1.0f, nullptr);
  expect_close(qkv, want, 1e-3, "rotated");
  rope_rotate(qkv.data(), batch, seq, heads, kv_heads, head_dim, base, -1.0f, nullptr);
  expect_close(qkv, in, 2e-2, "rotated back");
}

INSTANTIATE_TEST_SUITE_P(HeadDims, RopeKernel, ::testing::Values(16, 6),
                         [](const auto& param_info) {
                           return "head_dim" + std::to_string(param_info.param);
                         });

// ---- softmax.cu

TEST(Kernels, CausalSoftmaxForwardAndBackwardMatchFp64) {
  // seq 37: two (batch · head) planes of short rows; seq 300: one plane, rows up to 300 keys
  // (longer than the block of 256 threads).
  for (const std::int64_t seq : {std::int64_t{37}, std::int64_t{300}}) {
    const std::int64_t rows = seq == 37 ? 2 * seq : seq;
    const float scale = 0.125f;
    const auto scores = random_bf16(rows * seq, 6, 2.0f), dp = random_bf16(rows * seq, 7);
    std::vector<bf16> probs = scores;
    causal_softmax_forward(probs.data(), rows, seq, nullptr);
    const auto s = to_double(scores), dpd = to_double(dp);
    std::vector<double> p_ref(rows * seq, 0.0), ds_ref(rows * seq, 0.0);
    const auto p_got = to_double(probs);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t t = r % seq;
      double max = -INFINITY, sum = 0.0, dot = 0.0;
      for (std::int64_t j = 0; j <= t; ++j)
        max = std::max(max, s[r * seq + j]);
      for (std::int64_t j = 0; j <= t; ++j)
        sum += std::exp(s[r * seq + j] - max);
      for (std::int64_t j = 0; j <= t; ++j)
        p_ref[r * seq + j] = std::exp(s[r * seq + j] - max) / sum;
      // The backward reads the kernel's bf16 probabilities, as on the GPU.
      for (std::int64_t j = 0; j <= t; ++j)
        dot += p_got[r * seq + j] * dpd[r * seq + j];
      for (std::int64_t j = 0; j <= t; ++j)
        ds_ref[r * seq + j] = scale * p_got[r * seq + j] * (dpd[r * seq + j] - dot);
    }
    expect_close(probs, p_ref, 1e-4, "probs");
    std::vector<bf16> ds = dp;
    causal_softmax_backward(ds.data(), probs.data(), rows, seq, scale, nullptr);
    expect_close(ds, ds_ref, 1e-4, "dscores");
  }
}

// ---- swiglu.cu

// n = 2056 in packs of 8 (more than one block of 256 threads); 1001 one element per thread; and
// 2056 starting 2 bytes past a 16-byte boundary, which must fall back to one element per thread.
struct SwigluCase {
  std::int64_t n, offset;
};

class SwigluKernels : public ::testing::TestWithParam<SwigluCase> {};

TEST_P(SwigluKernels, ForwardAndP1MatchFp64) {
  const auto [n, offset] = GetParam();
  const auto gate_all = random_bf16(n + offset, 8, 2.0f), up_all = random_bf16(n + offset, 9);
  const auto dh_all = random_bf16(n + offset, 10);
  const std::span gate = std::span(gate_all).subspan(offset),
                  up = std::span(up_all).subspan(offset);
  const std::span dh = std::span(dh_all).subspan(offset);
  const auto z = to_double(gate), u = to_double(up), d = to_double(dh);
  std::vector<double> h_ref(n), dgate_ref(n), dup_ref(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-z[i]));
    h_ref[i] = z[i] * s * u[i];
    dgate_ref[i] = d[i] * u[i] * s * (1.0 + z[i] * (1.0 - s));
    dup_ref[i] = d[i] * z[i] * s;
  }
  std::vector<bf16> h_all(n + offset), dgate_all(n + offset), dup_all(n + offset);
  bf16* h = h_all.data() + offset;
  bf16* dgate = dgate_all.data() + offset;
  bf16* dup = dup_all.data() + offset;
  swiglu_forward(h, gate.data(), up.data(), n, nullptr);
  swiglu_backward_p1(dgate, dup, dh.data(), gate.data(), up.data(), n, nullptr);
  expect_close(std::span<const bf16>(h, n), h_ref, 1e-4, "h");
  expect_close(std::span<const bf16>(dgate, n), dgate_ref, 1e-4, "dgate");
  expect_close(std::span<const bf16>(dup, n), dup_ref, 1e-4, "dup");
}

INSTANTIATE_TEST_SUITE_P(Sizes, SwigluKernels,
                         ::testing::Values(SwigluCase{2056, 0}, SwigluCase{1001, 0},
                                           SwigluCase{2056, 1}),
                         [](const auto& param_info) {
                           return "n" + std::to_string(param_info.param.n) + "_offset" +
                                  std::to_string(param_info.param.offset);
                         });

// The dispatch: packs only for a length that is a multiple of 8 and 16-byte aligned pointers
// (null ones do not count); the simulator refuses a misaligned pack as the GPU would fault on it.
TEST(Kernels, PacksNeedAlignedPointersAndWholePacks) {
  alignas(16) std::array<bf16, 24> values{};
  EXPECT_TRUE(vectorizable(16, values.data(), values.data() + 8, static_cast<bf16*>(nullptr)));
  EXPECT_FALSE(vectorizable(12, values.data()));
  EXPECT_FALSE(vectorizable(16, values.data(), values.data() + 1));
  EXPECT_NO_THROW((void)load_pack<kPack>(values.data() + 8));
  EXPECT_THROW((void)load_pack<kPack>(values.data() + 4), std::runtime_error);
  EXPECT_THROW(store_pack<kPack>(values.data() + 2, Pack<kPack>{}), std::runtime_error);
}

// ---- embedding.cu against runtime/cpu/embedding

TEST(Kernels, EmbeddingGathersRowsAndScatterAddsRepeatedTokens) {
  const std::int64_t n = 7, c = 300, v = 5;
  const std::vector<std::int32_t> tokens{0, 4, 2, 4, 4, 1, 0};  // repeats: the atomics matter
  const auto wte = random_bf16(v * c, 11), dy = random_bf16(n * c, 12);
  const auto wte_d = to_double(wte), dy_d = to_double(dy);
  std::vector<double> y_ref(n * c);
  cpu::embedding_forward(y_ref.data(), tokens.data(), wte_d.data(), n, c, v);
  std::vector<bf16> y(n * c);
  embedding_forward(y.data(), tokens.data(), wte.data(), n, c, v, nullptr);
  expect_close(y, y_ref, 0.0, "y");

  std::vector<double> dwte_ref(v * c, 0.5);
  const cpu::EmbeddingRows<double> rows{tokens.data(), dy_d.data(), n};
  cpu::embedding_backward_p2(dwte_ref.data(), std::span(&rows, 1), c);
  std::vector<float> dwte(v * c, 0.5f);
  embedding_backward_p2(dwte.data(), tokens.data(), dy.data(), n, c, v, nullptr);
  expect_close(to_double(dwte), dwte_ref, 1e-5, "dwte");
}

TEST(Kernels, EmbeddingGivesZeroRowsForTokensOutsideTheVocabulary) {
  const std::int64_t c = 64, v = 3;
  const std::vector<std::int32_t> tokens{-1, 3, 1};
  const auto wte = random_bf16(v * c, 13), dy = random_bf16(3 * c, 14);
  std::vector<bf16> y(3 * c, __float2bfloat16(9.0f));
  embedding_forward(y.data(), tokens.data(), wte.data(), 3, c, v, nullptr);
  for (std::int64_t i = 0; i < 2 * c; ++i)
    ASSERT_EQ(__bfloat162float(y[i]), 0.0f) << i;
  std::vector<float> dwte(v * c, 0.0f);
  embedding_backward_p2(dwte.data(), tokens.data(), dy.data(), 3, c, v, nullptr);
  for (std::int64_t i = 0; i < v * c; ++i) {
    const float want = i / c == 1 ? __bfloat162float(dy[2 * c + i % c]) : 0.0f;
    ASSERT_EQ(dwte[i], want) << i;
  }
}

// ---- cross_entropy.cu

TEST(Kernels, CrossEntropyForwardMeanAndP1MatchFp64) {
  const std::int64_t n = 4, v = 300;  // a vocabulary longer than a block
  const auto logits = random_bf16(n * v, 15, 3.0f);
  const std::vector<std::int32_t> targets{0, 299, 17, 150};
  const auto l = to_double(logits);
  std::vector<double> p_ref(n * v), loss_ref(n);
  for (std::int64_t r = 0; r < n; ++r) {
    double max = -INFINITY, sum = 0.0;
    for (std::int64_t i = 0; i < v; ++i)
      max = std::max(max, l[r * v + i]);
    for (std::int64_t i = 0; i < v; ++i)
      sum += std::exp(l[r * v + i] - max);
    for (std::int64_t i = 0; i < v; ++i)
      p_ref[r * v + i] = std::exp(l[r * v + i] - max) / sum;
    loss_ref[r] = std::log(sum) - (l[r * v + targets[r]] - max);
  }
  std::vector<bf16> probs = logits;
  std::vector<float> losses(n);
  cross_entropy_forward(probs.data(), losses.data(), targets.data(), n, v, nullptr);
  // The forward leaves p − onehot.
  std::vector<double> stash_ref = p_ref;
  for (std::int64_t r = 0; r < n; ++r)
    stash_ref[r * v + targets[r]] -= 1.0;
  expect_close(probs, stash_ref, 1e-5, "p - onehot");
  expect_close(to_double(losses), loss_ref, 1e-5, "losses");

  float mean = 0.0f;
  mean_f32(&mean, losses.data(), n, nullptr);
  double mean_ref = 0.0;
  for (const float loss : losses)
    mean_ref += loss / double(n);
  EXPECT_NEAR(mean, mean_ref, 1e-6 * std::abs(mean_ref));

  // dlogits = dloss / N · (p − onehot), from the kernel's bf16 p − onehot; dloss f32 and bf16.
  const auto stash_got = to_double(probs);
  for (const bool dloss_is_bf16 : {false, true}) {
    const float dloss_f32 = 1.0f / 3.0f;
    const bf16 dloss_bf16 = __float2bfloat16(dloss_f32);
    const double dloss = dloss_is_bf16 ? double(__bfloat162float(dloss_bf16)) : double(dloss_f32);
    std::vector<double> d_ref(n * v);
    for (std::int64_t i = 0; i < n * v; ++i)
      d_ref[i] = dloss / double(n) * stash_got[i];
    std::vector<bf16> dlogits = probs;
    const void* dloss_ptr = dloss_is_bf16 ? static_cast<const void*>(&dloss_bf16)
                                          : static_cast<const void*>(&dloss_f32);
    cross_entropy_backward_p1(dlogits.data(), dloss_ptr, dloss_is_bf16, n, v, nullptr);
    expect_close(dlogits, d_ref, 1e-7, dloss_is_bf16 ? "dlogits (bf16 dloss)" : "dlogits");
  }
}

// A confident row (the target's logit 12 to 20 above the rest: p from 1 − 2·10⁻³ to
// 1 − 6·10⁻⁷) keeps its target gradient p − 1 to bf16's relative precision, where bf16(p) − 1
// would give 0 for every p ≥ 1 − 2⁻⁹, and the row's gradient still sums to about 0.
TEST(Kernels, CrossEntropyKeepsTheTargetGradientOfAConfidentRow) {
  const std::int64_t n = 5, v = 300;
  const std::vector<std::int32_t> targets{3, 0, 299, 150, 77};
  const std::vector<float> margins{12.0f, 14.0f, 16.0f, 18.0f, 20.0f};
  std::vector<bf16> logits = random_bf16(n * v, 21, 0.5f);
  for (std::int64_t r = 0; r < n; ++r)
    logits[r * v + targets[r]] = __float2bfloat16(margins[r]);
  const auto l = to_double(logits);
  std::vector<double> target_ref(n);
  for (std::int64_t r = 0; r < n; ++r) {
    double max = -INFINITY, sum = 0.0, others = 0.0;
    for (std::int64_t i = 0; i < v; ++i)
      max = std::max(max, l[r * v + i]);
    for (std::int64_t i = 0; i < v; ++i) {
      const double e = std::exp(l[r * v + i] - max);
      sum += e;
      if (i != targets[r]) others += e;
    }
    target_ref[r] = -others / sum;  // p − 1, exactly
  }
  std::vector<bf16> stash = logits;
  std::vector<float> losses(n);
  cross_entropy_forward(stash.data(), losses.data(), targets.data(), n, v, nullptr);
  const float dloss = 1.0f;
  std::vector<bf16> dlogits = stash;
  cross_entropy_backward_p1(dlogits.data(), &dloss, false, n, v, nullptr);
  const auto d = to_double(dlogits);
  for (std::int64_t r = 0; r < n; ++r) {
    const double want = target_ref[r] / double(n);
    // From margin 16 on, p ≥ 1 − 2⁻⁹: bf16(p) would be 1.
    if (margins[static_cast<std::size_t>(r)] >= 16.0f) {
      ASSERT_GT(target_ref[r], -1.0 / (1 << 9)) << "row " << r << " is not that confident";
    }
    EXPECT_NEAR(d[r * v + targets[r]], want, std::abs(want) / 64) << "row " << r;
    double row_sum = 0.0;
    for (std::int64_t i = 0; i < v; ++i)
      row_sum += d[r * v + i];
    EXPECT_NEAR(row_sum, 0.0, std::abs(want) / 16) << "row " << r;
  }
}

TEST(Kernels, MeanReducesMoreValuesThanItsBlockHasThreads) {
  const std::int64_t n = 2500;  // one block of 1024 threads, each summing several values
  std::vector<float> values(n);
  for (std::int64_t i = 0; i < n; ++i)
    values[i] = float(i % 10);
  float mean = 0.0f;
  mean_f32(&mean, values.data(), n, nullptr);
  EXPECT_FLOAT_EQ(mean, 4.5f);
}

// ---- adamw.cu against runtime/cpu/adamw

TEST(Kernels, AdamwMatchesTheCpuReferenceOverThreeSteps) {
  const std::int64_t n = 700;
  const AdamWConfig config{};
  std::vector<float> master(n), m(n, 0.0f), v(n, 0.0f), grad(n);
  std::mt19937 rng(16);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& w : master)
    w = normal(rng);
  std::vector<double> w_ref(master.begin(), master.end()), m_ref(n, 0.0), v_ref(n, 0.0);
  std::vector<bf16> weight(n);
  for (int step = 1; step <= 3; ++step) {
    for (float& g : grad)
      g = normal(rng);
    const std::vector<double> g_ref(grad.begin(), grad.end());
    cpu::adamw_update(w_ref.data(), m_ref.data(), v_ref.data(), g_ref.data(), n, config, step,
                      true);
    const AdamWStep args{float(config.lr),
                         float(config.beta1),
                         float(config.beta2),
                         float(config.eps),
                         float(config.weight_decay),
                         float(1.0 - std::pow(config.beta1, step)),
                         float(1.0 - std::pow(config.beta2, step))};
    adamw_update(master.data(), m.data(), v.data(), grad.data(), weight.data(), n, args, nullptr);
  }
  // fp32 against fp64 over three steps: the update is lr-sized (3e-4), so 1e-6 absolute is tight.
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(master[i], w_ref[i], 1e-6) << i;
    ASSERT_NEAR(m[i], m_ref[i], 1e-5) << i;
    ASSERT_NEAR(v[i], v_ref[i], 1e-5) << i;
    ASSERT_EQ(__bfloat162float(weight[i]), __bfloat162float(__float2bfloat16(master[i]))) << i;
  }
}

}  // namespace
}  // namespace pipeplan::cuda
