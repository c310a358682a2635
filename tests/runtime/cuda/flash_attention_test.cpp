// Fused attention (`--attention flash`: cuDNN SDPA through cudnn-frontend, runtime/cuda/sdpa.h)
// beyond the CPU comparisons of cuda_backend_test.cpp: at LLaMA's head dim (D = 128, which the
// tiny model's D = 16 does not reach) against the GPU's own materialized path, what it stashes
// and what the allocator counts, repeated passes, an unsupported shape, and the profiler's notes;
// and, without a GPU, that flash is refused in one line wherever fused attention is unavailable.
//
// Tolerances as in gpu_test_support.h (‖flash − materialized‖ / ‖materialized‖, both bf16):
// forward 2e-2, gradients 4e-2. Repeated forwards on the same inputs must be bitwise equal;
// repeated backwards may differ by rounding only (cuDNN's non-deterministic dQ accumulation): 1e-2.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/profiler.h"
#include "runtime/random.h"
#include "tests/runtime/cuda/gpu_test_support.h"
#include "tests/runtime/models.h"

namespace pipeplan {
namespace {

using Vec = std::vector<double>;
using testing::kForwardTolerance;
using testing::kGradientTolerance;
using testing::relative_error;

constexpr double kRepeatTolerance = 1e-2;

// A LLaMA-shaped block small enough for a quick test: D = 128 as in LLaMA-7B, 8 heads.
ModelConfig llama_head_dim_model(int kv_heads) {
  ModelConfig m = pipeplan::testing::tiny_model();
  m.name = "llama-head-dim";
  m.hidden = 1024;
  m.heads = 8;
  m.kv_heads = kv_heads;
  m.ffn_hidden = 2816;
  m.seq = 512;
  return m;
}

Vec random_values(std::int64_t count, std::uint64_t seed) {
  Vec values(static_cast<std::size_t>(count));
  fill_normal(values, 1.0, seed);
  return values;
}

// The attention output and its input gradient (dQ, dK, dV) are compared directly as well as
// through the block: with the init's small weights attention is a small part of the block's
// output, so a wrong scale or mask could hide inside the block's tolerance.
struct BlockPasses {
  Vec output, attention_output, dqkv, input_grad, wqkv_grad;
};

// Forward, p1 and p2 of one block on `backend` (B = 2), downloaded.
BlockPasses run_block(cuda::CudaBackend& backend, const ModelConfig& m, std::uint64_t seed) {
  const int b = 2;
  const std::int64_t n = std::int64_t{b} * m.seq * m.hidden;
  LayerParams layer = backend.init_layer(m, LayerKind::block, 1, 9);
  const Tensor x = backend.upload(random_values(n, seed), {b, m.seq, m.hidden});
  const Tensor dy = backend.upload(random_values(n, seed + 1), {b, m.seq, m.hidden});
  ForwardResult fwd = backend.forward(layer, x, {});
  BlockPasses out;
  out.output = backend.download(fwd.output);
  out.attention_output = backend.download(fwd.stash.at("attn.out"));
  BackwardP1Result p1 = backend.backward_p1(layer, std::move(fwd.stash), dy);
  out.input_grad = backend.download(p1.input_grad);
  out.dqkv = backend.download(p1.retained.at("attn.dqkv"));
  const std::vector<const Retained*> view = {&p1.retained};
  backend.backward_p2(layer, view);
  out.wqkv_grad = backend.download(layer.at("attn.wqkv").grad);
  return out;
}

void expect_flash_matches_materialized(const ModelConfig& m) {
  cuda::CudaBackend flash({Attention::flash, nullptr});
  cuda::CudaBackend materialized({Attention::materialized, nullptr});
  ASSERT_EQ(flash.attention(), Attention::flash);
  const BlockPasses got = run_block(flash, m, 61);
  const BlockPasses ref = run_block(materialized, m, 61);
  EXPECT_LT(relative_error(got.attention_output, ref.attention_output), kForwardTolerance);
  EXPECT_LT(relative_error(got.dqkv, ref.dqkv), kGradientTolerance);
  EXPECT_LT(relative_error(got.output, ref.output), kForwardTolerance);
  EXPECT_LT(relative_error(got.input_grad, ref.input_grad), kGradientTolerance);
  EXPECT_LT(relative_error(got.wqkv_grad, ref.wqkv_grad), kGradientTolerance);
}

TEST(FlashAttention, MatchesMaterializedAtLlamaHeadDim) {
  PIPEPLAN_REQUIRE_GPU();
  PIPEPLAN_REQUIRE_FUSED_ATTENTION();
  expect_flash_matches_materialized(llama_head_dim_model(8));
}

TEST(FlashAttention, MatchesMaterializedWithGroupedQueryHeads) {
  PIPEPLAN_REQUIRE_GPU();
  PIPEPLAN_REQUIRE_FUSED_ATTENTION();
  expect_flash_matches_materialized(llama_head_dim_model(2));
}

// Flash stashes the rows' logsumexp (B, H, T) in fp32 instead of the probabilities:
// 2N(5C + W + 3F) + 8N + 4·B·H·T bytes (N = B·T), and the allocator counts exactly that.
TEST(FlashAttention, StashKeepsLogsumexpNotProbabilities) {
  PIPEPLAN_REQUIRE_GPU();
  PIPEPLAN_REQUIRE_FUSED_ATTENTION();
  const ModelConfig m = pipeplan::testing::tiny_model();
  const std::int64_t b = 2, t = m.seq, n = b * t, c = m.hidden, f = m.ffn_hidden;
  const std::int64_t w = (m.heads + 2 * m.kv_heads) * (m.hidden / m.heads);
  cuda::CudaBackend backend({Attention::flash, nullptr});
  const LayerParams layer = backend.init_layer(m, LayerKind::block, 1, 1);
  const Tensor x = backend.upload(random_values(n * c, 3), {b, t, c});
  backend.synchronize();
  const std::int64_t before = backend.context().allocator().stats().current_bytes;
  ForwardResult fwd = backend.forward(layer, x, {});
  backend.synchronize();
  EXPECT_FALSE(fwd.stash.contains("attn.probs"));
  ASSERT_TRUE(fwd.stash.contains("attn.lse"));
  EXPECT_EQ(fwd.stash.at("attn.lse").shape(), (Shape{b, m.heads, t}));
  EXPECT_EQ(fwd.stash.at("attn.lse").dtype(), DType::f32);
  const std::int64_t expected = 2 * n * (5 * c + w + 3 * f) + 2 * 4 * n + 4 * b * m.heads * t;
  EXPECT_EQ(fwd.stash.bytes(), expected);
  EXPECT_EQ(backend.context().allocator().stats().current_bytes - before,
            expected + fwd.output.bytes());
  // The retained set does not depend on the attention mode: attention finishes in p1.
  const Tensor dy = backend.upload(random_values(n * c, 4), {b, t, c});
  const BackwardP1Result p1 = backend.backward_p1(layer, std::move(fwd.stash), dy);
  EXPECT_EQ(p1.retained.bytes(), 2 * n * (9 * c + w + 3 * f));
  EXPECT_FALSE(p1.retained.contains("attn.lse"));
}

// The second pass at a shape reuses the graph built by the first: same forward bits, and a
// backward within rounding of the first.
TEST(FlashAttention, RepeatedPassesAgree) {
  PIPEPLAN_REQUIRE_GPU();
  PIPEPLAN_REQUIRE_FUSED_ATTENTION();
  const ModelConfig m = llama_head_dim_model(8);
  cuda::CudaBackend backend({Attention::flash, nullptr});
  const BlockPasses first = run_block(backend, m, 71);
  const BlockPasses second = run_block(backend, m, 71);
  EXPECT_EQ(first.output, second.output);
  EXPECT_LT(relative_error(second.input_grad, first.input_grad), kRepeatTolerance);
}

// A head dim cuDNN has no engine for (D = 4: SDPA wants a multiple of 8) fails in one line that
// names the shape, from the first pass at that shape.
TEST(FlashAttention, AnUnsupportedShapeFailsInOneLineNamingIt) {
  PIPEPLAN_REQUIRE_GPU();
  PIPEPLAN_REQUIRE_FUSED_ATTENTION();
  const ModelConfig m = pipeplan::testing::gradcheck_model();  // hidden 16, 4 heads: D = 4
  cuda::CudaBackend backend({Attention::flash, nullptr});
  const LayerParams layer = backend.init_layer(m, LayerKind::block, 1, 1);
  const Tensor x = backend.upload(random_values(2 * m.seq * m.hidden, 5), {2, m.seq, m.hidden});
  try {
    (void)backend.forward(layer, x, {});
    backend.synchronize();
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("attention flash: cuDNN SDPA forward", 0), 0U) << what;
    EXPECT_NE(what.find("(B, H, KV, T, D) = (2, 4, 2, 5, 4)"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(FlashAttention, TheProfileSaysWhichKernelRan) {
  PIPEPLAN_REQUIRE_GPU();
  PIPEPLAN_REQUIRE_FUSED_ATTENTION();
  const GpuProfileOptions options =
      pipeplan::testing::quick_profile_options(Attention::flash, 1, 2);
  const Profile profile = cuda::measure_profile(options);
  EXPECT_NE(profile.provenance.notes.find("attention flash: cuDNN SDPA"), std::string::npos)
      << profile.provenance.notes;
  // The block's stash is the flash stash: no (B, H, T, T) term.
  const ModelConfig& m = options.model;
  const std::int64_t t = m.seq, c = m.hidden, f = m.ffn_hidden;
  const std::int64_t w = (m.heads + 2 * m.kv_heads) * (m.hidden / m.heads);
  EXPECT_EQ(profile.cost(LayerKind::block, 1).stash_bytes,
            2 * t * (5 * c + w + 3 * f) + 2 * 4 * t + 4 * m.heads * t);
}

// Where fused attention is unavailable (built without the cudnn-frontend headers, or no cuDNN 9
// loads), flash is refused in one line naming why and the unfused mode; the other modes never
// are. With it, flash passes and says which cuDNN it found. Needs no GPU: cuDNN loads without one.
TEST(FlashAttention, UnavailableFlashIsRefusedInOneLineNamingWhyAndTheAlternative) {
  EXPECT_NO_THROW(cuda::check_attention_available(Attention::materialized));
  EXPECT_NO_THROW(cuda::check_attention_available(Attention::recompute));
  const std::string why = cuda::fused_attention_unavailable();
  if (cuda::fused_attention_built() && why.empty()) {
    EXPECT_NO_THROW(cuda::check_attention_available(Attention::flash));
    const std::string description = cuda::fused_attention_description();
    EXPECT_EQ(description.rfind("cuDNN SDPA, cuDNN 9.", 0), 0U) << description;
    EXPECT_NE(description.find(", cudnn-frontend 1."), std::string::npos) << description;
    return;
  }
  if (!cuda::fused_attention_built()) {
    EXPECT_NE(why.find("built without the cudnn-frontend headers"), std::string::npos) << why;
    EXPECT_EQ(cuda::fused_attention_description(), "");
  }
  try {
    cuda::check_attention_available(Attention::flash);
    FAIL() << "flash was not refused: " << why;
  } catch (const FieldError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.field(), "attention");
    EXPECT_NE(what.find("flash (cuDNN's fused attention) is unavailable: " + why),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("recompute to run the unfused path"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

// A cuDNN that does not load is named with the loader's reason. cuDNN is loaded once per process,
// so this runs in a fresh one (a threadsafe death test re-executes the binary).
TEST(FlashAttentionDeathTest, ACudnnThatDoesNotLoadIsNamedWithTheLoadersReason) {
  if (!cuda::fused_attention_built()) GTEST_SKIP() << "built without the cudnn-frontend headers";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const char* kVariable = "PIPEPLAN_CUDNN_LIBRARY";
  const testing::ScopedEnv missing(kVariable, "/nonexistent/libcudnn.so.9");
  EXPECT_EXIT(
      {
        try {
          cuda::check_attention_available(Attention::flash);
        } catch (const Error& e) {
          std::cerr << e.what() << std::endl;
          std::_Exit(3);
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(3),
      "flash \\(cuDNN's fused attention\\) is unavailable: cannot load "
      "/nonexistent/libcudnn.so.9: .*No such file.*PIPEPLAN_CUDNN_LIBRARY.*recompute");
}

}  // namespace
}  // namespace pipeplan
