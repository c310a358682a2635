#include "runtime/cuda/attention.h"

#include <cmath>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/matmul.h"

namespace pipeplan::cuda {

namespace {

// Pointers and strides of one sequence b's heads inside qkv / out rows and a (H, T, T) buffer,
// for the group member g: the batch index of each call is the kv head.
struct HeadViews {
  const AttentionDims& dims;
  std::int64_t d() const { return dims.head_dim(); }
  std::int64_t group() const { return dims.heads / dims.kv_heads; }
  std::int64_t width() const { return dims.qkv_width(); }
  std::int64_t t() const { return dims.seq; }
  // q head kv·G + g of sequence b; consecutive kv heads are G·D apart
  std::int64_t q_offset(std::int64_t b, std::int64_t g) const {
    return b * t() * width() + g * d();
  }
  std::int64_t k_offset(std::int64_t b) const { return b * t() * width() + dims.heads * d(); }
  std::int64_t v_offset(std::int64_t b) const {
    return b * t() * width() + (dims.heads + dims.kv_heads) * d();
  }
  std::int64_t out_offset(std::int64_t b, std::int64_t g) const {
    return b * t() * dims.channels + g * d();
  }
  std::int64_t square_offset(std::int64_t g) const { return g * t() * t(); }  // within (H, T, T)
};

float softmax_scale(const AttentionDims& dims) {
  return static_cast<float>(1.0 / std::sqrt(double(dims.head_dim())));
}

// probs_b (H, T, T) = causal softmax(scale · Q·Kᵀ) of sequence b.
void probabilities(DeviceContext& ctx, bf16* probs_b, const bf16* qkv, std::int64_t b,
                   const AttentionDims& dims) {
  const HeadViews view{dims};
  const std::int64_t t = view.t(), g_count = view.group();
  for (std::int64_t g = 0; g < g_count; ++g) {
    // row-major S (Ti, Tj) = Q·Kᵀ  <=>  col-major Sᵀ (Tj, Ti) = K-view(D, Tj)ᵀ · Q-view(D, Ti)
    batched_gemm(ctx, true, false, t, t, view.d(), softmax_scale(dims),
                 {qkv + view.k_offset(b), view.width(), view.d()},
                 {qkv + view.q_offset(b, g), view.width(), g_count * view.d()}, 0.0f,
                 probs_b + view.square_offset(g), t, g_count * t * t, dims.kv_heads);
  }
  causal_softmax_forward(probs_b, dims.heads * t, t, ctx.stream());
}

}  // namespace

void attention_core_forward(DeviceContext& ctx, bf16* out, bf16* probs, const bf16* qkv,
                            const AttentionDims& dims) {
  const HeadViews view{dims};
  const std::int64_t t = view.t(), g_count = view.group();
  Tensor scratch;
  if (probs == nullptr) scratch = ctx.empty({dims.heads, t, t}, DType::bf16);
  for (std::int64_t b = 0; b < dims.batch; ++b) {
    bf16* probs_b =
        probs != nullptr ? probs + b * dims.heads * t * t : static_cast<bf16*>(scratch.data());
    probabilities(ctx, probs_b, qkv, b, dims);
    for (std::int64_t g = 0; g < g_count; ++g) {
      // col-major outᵀ (D, Ti) = V-view (D, Tj) · P-view (Tj, Ti)
      batched_gemm(ctx, false, false, view.d(), t, t, 1.0f,
                   {qkv + view.v_offset(b), view.width(), view.d()},
                   {probs_b + view.square_offset(g), t, g_count * t * t}, 0.0f,
                   out + view.out_offset(b, g), dims.channels, g_count * view.d(), dims.kv_heads);
    }
  }
}

void attention_core_backward_p1(DeviceContext& ctx, bf16* dqkv, const bf16* dout, const bf16* qkv,
                                const bf16* probs, const AttentionDims& dims) {
  const HeadViews view{dims};
  const std::int64_t t = view.t(), g_count = view.group(), d = view.d(), w = view.width();
  const std::int64_t square = g_count * t * t;  // stride between kv heads in (H, T, T)
  Tensor recomputed;
  if (probs == nullptr) recomputed = ctx.empty({dims.heads, t, t}, DType::bf16);
  const Tensor dscores = ctx.empty({dims.heads, t, t}, DType::bf16);
  bf16* ds = static_cast<bf16*>(dscores.data());
  // A kv head's dK and dV sum the products of its G query heads. With G > 1 the sums run in an
  // fp32 (T, [dK | dV]) scratch, rounded to bf16 once per sequence: G additions into bf16 would
  // round G times. With G = 1 the one product goes to dqkv directly.
  const std::int64_t kv_width = dims.kv_heads * d;
  Tensor kv_sums;
  if (g_count > 1) kv_sums = ctx.empty({t, 2 * kv_width}, DType::f32);
  // dKᵀ or dVᵀ (D, Tj) of every kv head (+)= a · b, for group member g.
  const auto kv_gradient = [&](std::int64_t b, std::int64_t g, bool is_v, BatchedOperand a,
                               BatchedOperand bop) {
    const float beta = g == 0 ? 0.0f : 1.0f;
    if (g_count > 1) {
      float* sums = static_cast<float*>(kv_sums.data()) + (is_v ? kv_width : 0);
      batched_gemm(ctx, false, true, d, t, t, 1.0f, a, bop, beta, sums, 2 * kv_width, d,
                   dims.kv_heads);
    } else {
      batched_gemm(ctx, false, true, d, t, t, 1.0f, a, bop, beta,
                   dqkv + (is_v ? view.v_offset(b) : view.k_offset(b)), w, d, dims.kv_heads);
    }
  };
  for (std::int64_t b = 0; b < dims.batch; ++b) {
    const bf16* p = probs != nullptr ? probs + b * dims.heads * t * t
                                     : static_cast<const bf16*>(recomputed.data());
    if (probs == nullptr) probabilities(ctx, static_cast<bf16*>(recomputed.data()), qkv, b, dims);
    for (std::int64_t g = 0; g < g_count; ++g) {
      const bf16* dout_g = dout + view.out_offset(b, g);
      // dP (Ti, Tj) = dout·Vᵀ  <=>  col-major dPᵀ (Tj, Ti) = V-view(D, Tj)ᵀ · dout-view(D, Ti)
      batched_gemm(ctx, true, false, t, t, d, 1.0f, {qkv + view.v_offset(b), w, d},
                   {dout_g, dims.channels, g_count * d}, 0.0f, ds + view.square_offset(g), t,
                   square, dims.kv_heads);
      // dV (Tj, D) += Pᵀ·dout  <=>  col-major dVᵀ (D, Tj) += dout-view (D, Ti) · P (Ti, Tj)
      kv_gradient(b, g, true, {dout_g, dims.channels, g_count * d},
                  {p + view.square_offset(g), t, square});
    }
    causal_softmax_backward(ds, p, dims.heads * t, t, softmax_scale(dims), ctx.stream());
    for (std::int64_t g = 0; g < g_count; ++g) {
      // dQ (Ti, D) = dS·K  <=>  col-major dQᵀ (D, Ti) = K-view (D, Tj) · dS-view (Tj, Ti)
      batched_gemm(ctx, false, false, d, t, t, 1.0f, {qkv + view.k_offset(b), w, d},
                   {ds + view.square_offset(g), t, square}, 0.0f, dqkv + view.q_offset(b, g), w,
                   g_count * d, dims.kv_heads);
      // dK (Tj, D) += dSᵀ·Q  <=>  col-major dKᵀ (D, Tj) += Q-view (D, Ti) · dS (Ti, Tj)
      kv_gradient(b, g, false, {qkv + view.q_offset(b, g), w, g_count * d},
                  {ds + view.square_offset(g), t, square});
    }
    if (g_count > 1) {
      cast_f32_to_bf16_rows(dqkv + view.k_offset(b), w, static_cast<const float*>(kv_sums.data()),
                            t, 2 * kv_width, ctx.stream());
    }
  }
}

}  // namespace pipeplan::cuda
