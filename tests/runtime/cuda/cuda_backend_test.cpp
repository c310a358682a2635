// The CUDA backend against the CPU reference on the tiny model (tests/runtime/models.h): same
// weights (both draw them from runtime/random.h), same inputs, bf16 on the GPU vs fp32 on
// the CPU.
//
// Tolerances, as ‖cuda − cpu‖ / ‖cpu‖: bf16 rounds to 2⁻⁹ ≈ 2e-3 relative; a pass stores its
// operands in bf16 several times in series (input, normalised input, GEMM outputs, attention
// probabilities), and METHOD.md puts bf16-operand results between 1e-3 and 1e-2. Forward
// outputs: 2e-2. Gradients go through about twice as many bf16 roundings, and dlogits are
// small differences (p − onehot): 4e-2. The loss itself: 2e-2 absolute at ln 256 ≈ 5.5.
// After one AdamW step the update is lr · m̂/(√v̂ + ε) ≈ lr · sign(g) per element (plus the
// same weight decay on both sides), so an element whose gradient is within bf16 noise of zero
// may flip sign and count 2·lr: one flip in a 64-element gain alone is a relative error of
// 2/√64 = 0.25. The update is therefore compared only where the reference gradient is clearly
// away from zero, |g| > 0.25 · rms(g) (about 80 % of the elements of a Gaussian gradient), or
// exactly zero (embedding rows of tokens absent from the batch: weight decay alone); there a
// flip is a real error and the update must agree to 5e-2.
//
// A block's input is N(0, 1/50²), not N(0, 1): its weights are N(0, 0.02²), so with a unit input
// the residual would be about 99 % of the output (and dy of dx) and a block whose attention or
// MLP branch were wrong, or missing, would still pass. Its norms rescale the small input to unit
// size, so the branches are as large as before while the residual is 50 times smaller.
#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/random.h"
#include "tests/runtime/cuda/gpu_test_support.h"
#include "tests/runtime/models.h"

namespace pipeplan {
namespace {

using Vec = std::vector<double>;
using testing::kForwardTolerance;
using testing::kGradientTolerance;
using testing::relative_error;

constexpr double kLossTolerance = 2e-2;
constexpr double kUpdateTolerance = 5e-2;
constexpr double kUpdateGradientFloor = 0.25;  // of rms(reference gradient)
constexpr double kBlockInputScale = 50;        // a block's input is N(0, 1) / this

// The updates of the elements whose reference gradient is zero or exceeds
// kUpdateGradientFloor · rms: {got, reference}.
std::pair<Vec, Vec> clear_gradient_updates(const Vec& got, const Vec& ref, const Vec& ref_grad) {
  double sum = 0;
  for (const double g : ref_grad)
    sum += g * g;
  const double floor =
      kUpdateGradientFloor *
      std::sqrt(sum / static_cast<double>(std::max<std::size_t>(1, ref_grad.size())));
  std::pair<Vec, Vec> kept;
  for (std::size_t e = 0; e < ref_grad.size() && e < got.size() && e < ref.size(); ++e) {
    if (ref_grad[e] == 0 || std::abs(ref_grad[e]) > floor) {
      kept.first.push_back(got[e]);
      kept.second.push_back(ref[e]);
    }
  }
  return kept;
}

Vec random_values(std::int64_t count, std::uint64_t seed) {
  Vec values(static_cast<std::size_t>(count));
  fill_normal(values, 1.0, seed);
  return values;
}

struct PassOutputs {
  Vec output, input_grad;
  std::vector<Vec> grads, updates;  // per parameter
};

// Forward, p1 on two micro-batches, one p2 over both, one AdamW step: what each backend gives.
template <typename MasterFn>
PassOutputs run_layer(Backend& backend, const ModelConfig& m, LayerKind kind, MasterFn master) {
  const int b = 2;
  const std::int64_t n = std::int64_t{b} * m.seq * m.hidden;
  LayerParams layer = backend.init_layer(m, kind, 1, 5);
  std::vector<Vec> before;
  for (const Parameter& p : layer.params)
    before.push_back(master(p));
  PassOutputs out;
  std::vector<BackwardP1Result> sets;
  for (int micro = 0; micro < 2; ++micro) {
    const TokenBatch batch = backend.synthetic_batch(b, m.seq, m.vocab, 20 + micro);
    Vec x_values = random_values(n, 30 + micro);
    if (kind == LayerKind::block) {
      for (double& value : x_values)
        value /= kBlockInputScale;
    }
    const Tensor x = backend.upload(x_values, {b, m.seq, m.hidden});
    const Tensor input = kind == LayerKind::embedding ? batch.inputs : x;
    ForwardResult fwd = backend.forward(layer, input, batch.targets);
    const Tensor dy = kind == LayerKind::head
                          ? backend.upload(Vec{0.5}, {1})
                          : backend.upload(random_values(n, 40 + micro), {b, m.seq, m.hidden});
    if (micro == 0) out.output = backend.download(fwd.output);
    sets.push_back(backend.backward_p1(layer, std::move(fwd.stash), dy));
    if (micro == 0 && sets.back().input_grad.defined()) {
      out.input_grad = backend.download(sets.back().input_grad);
    }
  }
  const std::vector<const Retained*> view = {&sets[0].retained, &sets[1].retained};
  backend.backward_p2(layer, view);
  for (const Parameter& p : layer.params)
    out.grads.push_back(backend.download(p.grad));
  backend.adamw_step(layer, AdamWConfig{}, 1);
  for (std::size_t i = 0; i < layer.params.size(); ++i) {
    Vec after = master(layer.params[i]);
    for (std::size_t e = 0; e < after.size(); ++e)
      after[e] -= before[i][e];
    out.updates.push_back(after);
  }
  return out;
}

void compare_layer(LayerKind kind, Attention attention,
                   const ModelConfig& m = pipeplan::testing::tiny_model()) {
  cpu::CpuBackend cpu_backend;
  cuda::CudaBackend gpu_backend({attention, nullptr});
  const PassOutputs ref = run_layer(
      cpu_backend, m, kind, [&](const Parameter& p) { return cpu_backend.download(p.weight); });
  const PassOutputs got = run_layer(gpu_backend, m, kind, [&](const Parameter& p) {
    return gpu_backend.download(gpu_backend.master(p));
  });
  const std::string where =
      std::string(to_string(kind)) + " / " + std::string(to_string(attention));
  if (kind == LayerKind::head) {
    ASSERT_EQ(got.output.size(), 1u);
    EXPECT_NEAR(got.output[0], ref.output[0], kLossTolerance) << where;
  } else {
    EXPECT_LT(relative_error(got.output, ref.output), kForwardTolerance) << where;
  }
  if (kind != LayerKind::embedding) {
    EXPECT_LT(relative_error(got.input_grad, ref.input_grad), kGradientTolerance) << where;
  }
  const std::vector<std::string> names = [&] {
    std::vector<std::string> list;
    cpu::CpuBackend names_backend;
    for (const Parameter& p : names_backend.init_layer(m, kind, 1, 5).params)
      list.push_back(p.name);
    return list;
  }();
  ASSERT_EQ(got.grads.size(), ref.grads.size());
  for (std::size_t i = 0; i < ref.grads.size(); ++i) {
    EXPECT_LT(relative_error(got.grads[i], ref.grads[i]), kGradientTolerance)
        << where << " grad " << names[i];
    ASSERT_EQ(got.updates[i].size(), ref.updates[i].size()) << where << " " << names[i];
    const auto [got_kept, ref_kept] =
        clear_gradient_updates(got.updates[i], ref.updates[i], ref.grads[i]);
    ASSERT_FALSE(ref_kept.empty()) << where << " " << names[i] << ": no gradient clear of zero";
    EXPECT_LT(relative_error(got_kept, ref_kept), kUpdateTolerance)
        << where << " AdamW update " << names[i] << " (elements with |g| > " << kUpdateGradientFloor
        << " rms(g))";
  }
}

TEST(CudaBackend, EmbeddingMatchesCpu) {
  PIPEPLAN_REQUIRE_GPU();
  compare_layer(LayerKind::embedding, Attention::materialized);
}

TEST(CudaBackend, BlockMatchesCpuMaterialized) {
  PIPEPLAN_REQUIRE_GPU();
  compare_layer(LayerKind::block, Attention::materialized);
}

TEST(CudaBackend, BlockMatchesCpuRecompute) {
  PIPEPLAN_REQUIRE_GPU();
  compare_layer(LayerKind::block, Attention::recompute);
}

// cuDNN's fused SDPA (flash) against the CPU reference's materialized attention, same
// tolerances: cuDNN rounds the probabilities to bf16 for P·V and dS for dQ, dK as the
// materialized path does, and keeps the softmax in fp32.
TEST(CudaBackend, BlockMatchesCpuFlash) {
  PIPEPLAN_REQUIRE_GPU();
  PIPEPLAN_REQUIRE_FUSED_ATTENTION();
  compare_layer(LayerKind::block, Attention::flash);
}

// Grouped-query heads (4 heads, 2 kv heads, D = 16) at a sequence length that is no power of two.
TEST(CudaBackend, BlockMatchesCpuFlashGroupedQuery) {
  PIPEPLAN_REQUIRE_GPU();
  PIPEPLAN_REQUIRE_FUSED_ATTENTION();
  ModelConfig m = pipeplan::testing::tiny_model();
  m.kv_heads = 2;
  m.seq = 48;
  compare_layer(LayerKind::block, Attention::flash, m);
}

TEST(CudaBackend, BlockMatchesCpuGroupedQuery) {
  PIPEPLAN_REQUIRE_GPU();
  // Same comparison on the grouped-query gradcheck shapes (4 heads, 2 kv heads).
  cpu::CpuBackend cpu_backend;
  cuda::CudaBackend gpu_backend({Attention::materialized, nullptr});
  const ModelConfig m = pipeplan::testing::gradcheck_model();
  const std::int64_t n = 2 * std::int64_t{m.seq} * m.hidden;
  const Vec x = random_values(n, 3), dy = random_values(n, 4);
  const auto run = [&](Backend& backend) {
    const LayerParams layer = backend.init_layer(m, LayerKind::block, 1, 2);
    ForwardResult fwd = backend.forward(layer, backend.upload(x, {2, m.seq, m.hidden}), {});
    const Vec y = backend.download(fwd.output);
    const BackwardP1Result p1 =
        backend.backward_p1(layer, std::move(fwd.stash), backend.upload(dy, {2, m.seq, m.hidden}));
    return std::pair{y, backend.download(p1.input_grad)};
  };
  const auto ref = run(cpu_backend);
  const auto got = run(gpu_backend);
  EXPECT_LT(relative_error(got.first, ref.first), kForwardTolerance);
  EXPECT_LT(relative_error(got.second, ref.second), kGradientTolerance);
}

TEST(CudaBackend, HeadMatchesCpu) {
  PIPEPLAN_REQUIRE_GPU();
  compare_layer(LayerKind::head, Attention::materialized);
}

// The head's dy = 1/m stays f32 on a bf16 backend: bf16 would give 0.33398 for 1/3.
TEST(CudaBackend, LossGradientIsF32NotBf16) {
  PIPEPLAN_REQUIRE_GPU();
  cuda::CudaBackend backend({Attention::recompute, nullptr});
  const Tensor third = backend.upload_loss_gradient(1.0 / 3);
  EXPECT_EQ(third.dtype(), DType::f32);
  EXPECT_EQ(backend.download(third), Vec{static_cast<float>(1.0 / 3)});
}

// An overlapped pair: a block's forward on the stage's stream and another block's whole backward
// on the side stream (begin_second) give what they give one after the other, and only the pair's
// thread is sent to the side stream. Run twice, so the second pair reuses the side context and
// the blocks each lane freed.
TEST(CudaBackend, AnOverlappedPairsSecondOpRunsOnTheSideStreamWithTheSameResults) {
  PIPEPLAN_REQUIRE_GPU();
  const ModelConfig m = pipeplan::testing::tiny_model();
  const int b = 2;
  const std::int64_t n = std::int64_t{b} * m.seq * m.hidden;
  cuda::CudaBackend backend({Attention::recompute, nullptr});
  const LayerParams forward_layer = backend.init_layer(m, LayerKind::block, 1, 5);
  LayerParams backward_layer = backend.init_layer(m, LayerKind::block, 2, 5);
  const Tensor x = backend.upload(random_values(n, 30), {b, m.seq, m.hidden});
  const Tensor dy = backend.upload(random_values(n, 40), {b, m.seq, m.hidden});
  const auto run = [&](bool pair) {
    ForwardResult stashed = backend.forward(backward_layer, x, Tensor());
    backend.zero_grads(backward_layer);
    if (pair) backend.begin_pair();
    EXPECT_EQ(backend.lane().stream(), backend.context().stream());
    const ForwardResult fwd = backend.forward(forward_layer, x, Tensor());
    if (pair) {
      backend.begin_second();
      EXPECT_NE(backend.lane().stream(), backend.context().stream());
      cudaStream_t elsewhere = nullptr;
      std::thread([&] { elsewhere = backend.lane().stream(); }).join();
      EXPECT_EQ(elsewhere, backend.context().stream()) << "another thread stays on the stage's";
    }
    BackwardP1Result p1 = backend.backward_p1(backward_layer, std::move(stashed.stash), dy);
    const Retained* retained = &p1.retained;
    backend.backward_p2(backward_layer, std::span<const Retained* const>(&retained, 1));
    if (pair) backend.end_pair();
    EXPECT_EQ(backend.lane().stream(), backend.context().stream());
    std::vector<Vec> out = {backend.download(fwd.output), backend.download(p1.input_grad)};
    for (const Parameter& p : backward_layer.params)
      out.push_back(backend.download(p.grad));
    return out;
  };
  const std::vector<Vec> sequence = run(false);
  for (int repeat = 0; repeat < 2; ++repeat) {
    const std::vector<Vec> paired = run(true);
    ASSERT_EQ(paired.size(), sequence.size());
    // The same GEMM answers on both streams; a split reduction may order its sums otherwise on
    // a GPU, far below a wrong or stale input's O(1).
    for (std::size_t i = 0; i < sequence.size(); ++i)
      EXPECT_LT(relative_error(paired[i], sequence[i]), 1e-3)
          << "output " << i << ", pair " << repeat;
  }
}

TEST(CudaBackend, ConstructionWithoutGpuSaysSo) {
  if (cuda::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  try {
    cuda::CudaBackend backend;
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "no CUDA device found");
  }
}

}  // namespace
}  // namespace pipeplan
