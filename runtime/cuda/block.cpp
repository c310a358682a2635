// One transformer block on the GPU: x1 = x + attention(rmsnorm(x)); y = x1 + mlp(rmsnorm(x1)).
// The residual adds ride the O and down projections' GEMMs (their C operand). `attention`: flash
// is cuDNN's fused SDPA (sdpa.h), the others the batched-GEMM core (attention.h).
#include <string>
#include <vector>

#include "runtime/cuda/attention.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/layers.h"
#include "runtime/cuda/matmul.h"
#include "runtime/cuda/op_marks.h"
#include "runtime/cuda/sdpa.h"

namespace pipeplan::cuda {

namespace {

const bf16* weight(const LayerParams& layer, std::string_view name) {
  return bf16_ptr(layer.at(name).weight);
}

float* grad(LayerParams& layer, std::string_view name) {
  return f32_ptr(layer.at(name).grad);
}

// PaLM's attention FLOPs for op marks: forward 4·(H·D)·T per token, p1 twice that.
double attention_flops(const AttentionDims& dims, int multiple) {
  return multiple * 4.0 * static_cast<double>(dims.heads * dims.head_dim()) *
         static_cast<double>(dims.seq) * static_cast<double>(dims.tokens());
}

// Runs one memory-bound kernel under an op mark with the bytes it must move at least (bf16
// tensors, 2 bytes a value), so that bench_block --breakdown reports its bandwidth.
template <typename Kernel>
void memory_bound(DeviceContext& ctx, const char* label, double bytes, Kernel&& kernel) {
  const OpMark mark(
      ctx, [label] { return std::string(label); }, 0, bytes);
  kernel();
}

// Bytes of `tensors` bf16 tensors of `values` values each, plus `extra`.
double bf16_bytes(int tensors, std::int64_t values, double extra = 0) {
  return 2.0 * tensors * static_cast<double>(values) + extra;
}

// RoPE in place over the q and k heads: each value read and written once.
double rope_bytes(const AttentionDims& dims) {
  return bf16_bytes(2, dims.tokens() * (dims.heads + dims.kv_heads) * dims.head_dim());
}

// RMSNorm's rstd (fp32 per row) and gain (bf16 per column).
double rmsnorm_side_bytes(std::int64_t n, std::int64_t c) {
  return 4.0 * static_cast<double>(n) + 2.0 * static_cast<double>(c);
}

}  // namespace

Tensor block_forward(DeviceContext& ctx, const LayerParams& layer, const Tensor& x,
                     Attention attention, Stash& stash) {
  const AttentionDims dims = block_dims(layer.model, x);
  const std::int64_t b = dims.batch, s = dims.seq, c = dims.channels, n = dims.tokens();
  const std::int64_t f = layer.model.ffn_hidden, w = dims.qkv_width();
  cudaStream_t stream = ctx.stream();
  for (const TensorSpec& spec : stash_specs(layer.model, LayerKind::block, b, s, attention))
    stash.put(spec.name, ctx.empty(spec.shape, stash_dtype(spec.role)));
  const auto at = [&](const char* name) { return bf16_ptr(stash.at(name)); };

  const double norm_bytes = bf16_bytes(3, n * c, rmsnorm_side_bytes(n, c));  // x in, y and x̂ out
  memory_bound(ctx, "F rmsnorm", norm_bytes, [&] {
    rmsnorm_forward(at("attn.x"), at("attn_norm.xhat"), f32_ptr(stash.at("attn_norm.rstd")),
                    bf16_ptr(x), weight(layer, "attn_norm"), n, c, kRmsNormEps, stream);
  });
  matmul_forward(ctx, at("attn.qkv"), at("attn.x"), weight(layer, "attn.wqkv"), nullptr, n, c, w);
  memory_bound(ctx, "F rope", rope_bytes(dims), [&] {
    rope_rotate(at("attn.qkv"), b, s, dims.heads, dims.kv_heads, dims.head_dim(), kRopeBase, 1.0f,
                stream);
  });
  if (attention == Attention::flash) {
    const OpMark mark(
        ctx, [] { return std::string("F attention flash"); }, attention_flops(dims, 1));
    sdpa_forward(ctx, at("attn.out"), f32_ptr(stash.at("attn.lse")), at("attn.qkv"), dims);
  } else {
    const OpMark mark(
        ctx, [&] { return "F attention " + std::string(to_string(attention)); },
        attention_flops(dims, 1));
    attention_core_forward(ctx, at("attn.out"),
                           stash.contains("attn.probs") ? at("attn.probs") : nullptr,
                           at("attn.qkv"), dims);
  }
  const Tensor x1 = ctx.empty({b, s, c}, DType::bf16);  // residual stream after attention
  matmul_forward(ctx, bf16_ptr(x1), at("attn.out"), weight(layer, "attn.wo"), bf16_ptr(x), n, c, c);

  memory_bound(ctx, "F rmsnorm", norm_bytes, [&] {
    rmsnorm_forward(at("mlp.x"), at("mlp_norm.xhat"), f32_ptr(stash.at("mlp_norm.rstd")),
                    bf16_ptr(x1), weight(layer, "mlp_norm"), n, c, kRmsNormEps, stream);
  });
  matmul_forward(ctx, at("mlp.gate"), at("mlp.x"), weight(layer, "mlp.w_gate"), nullptr, n, c, f);
  matmul_forward(ctx, at("mlp.up"), at("mlp.x"), weight(layer, "mlp.w_up"), nullptr, n, c, f);
  memory_bound(ctx, "F swiglu", bf16_bytes(3, n * f), [&] {  // gate and up in, h out
    swiglu_forward(at("mlp.h"), at("mlp.gate"), at("mlp.up"), n * f, stream);
  });
  Tensor y = ctx.empty({b, s, c}, DType::bf16);
  matmul_forward(ctx, bf16_ptr(y), at("mlp.h"), weight(layer, "mlp.w_down"), bf16_ptr(x1), n, f, c);
  return y;
}

Tensor block_backward_p1(DeviceContext& ctx, const LayerParams& layer, Stash& stash,
                         const Tensor& dy, Retained& retained) {
  const AttentionDims dims = block_dims(layer.model, dy);
  const Shape shape = stash.at("attn.x").shape();
  if (dy.shape() != shape) {
    throw Error("block output gradient is " + shape_string(dy.shape()) + ", expected " +
                shape_string(shape));
  }
  const std::int64_t b = dims.batch, s = dims.seq, c = dims.channels, n = dims.tokens();
  const std::int64_t f = layer.model.ffn_hidden, w = dims.qkv_width();
  cudaStream_t stream = ctx.stream();
  const auto at = [&](const char* name) { return bf16_ptr(stash.at(name)); };

  BlockGradients made;  // dY of every weight, retained for p2
  made.mlp_dy = dy;

  // MLP branch: dx1 = dy + rmsnorm_p1(W_gateᵀ-path + W_upᵀ-path of swiglu_p1(dy·W_down)).
  made.mlp_dgate = ctx.empty({b, s, f}, DType::bf16);
  made.mlp_dup = ctx.empty({b, s, f}, DType::bf16);
  const bf16* dgate = bf16_ptr(made.mlp_dgate);
  const bf16* dup = bf16_ptr(made.mlp_dup);
  {
    const Tensor dh = ctx.empty({b, s, f}, DType::bf16);  // freed at the end of this scope
    matmul_backward_p1(ctx, bf16_ptr(dh), bf16_ptr(dy), weight(layer, "mlp.w_down"), n, f, c,
                       false);
    memory_bound(ctx, "p1 swiglu", bf16_bytes(5, n * f), [&] {  // dh, gate, up in; 2 out
      swiglu_backward_p1(bf16_ptr(made.mlp_dgate), bf16_ptr(made.mlp_dup), bf16_ptr(dh),
                         at("mlp.gate"), at("mlp.up"), n * f, stream);
    });
  }
  made.mlp_norm_dy = ctx.empty(shape, DType::bf16);
  bf16* dxn2 = bf16_ptr(made.mlp_norm_dy);
  matmul_backward_p1(ctx, dxn2, dgate, weight(layer, "mlp.w_gate"), n, c, f, false);
  matmul_backward_p1(ctx, dxn2, dup, weight(layer, "mlp.w_up"), n, c, f, true);
  made.attn_dy = ctx.empty(shape, DType::bf16);  // dx1, also dY of Wo
  bf16* dx1 = bf16_ptr(made.attn_dy);
  // dy, x̂ and the residual in, dx out
  const double norm_bytes = bf16_bytes(4, n * c, rmsnorm_side_bytes(n, c));
  memory_bound(ctx, "p1 rmsnorm", norm_bytes, [&] {
    rmsnorm_backward_p1(dx1, bf16_ptr(dy), dxn2, at("mlp_norm.xhat"),
                        f32_ptr(stash.at("mlp_norm.rstd")), weight(layer, "mlp_norm"), n, c,
                        stream);
  });

  // Attention branch: dx = dx1 + rmsnorm_p1(Wqkv-path of rope⁻¹(core_p1(dx1·Wo))).
  made.attn_dqkv = ctx.empty({b, s, w}, DType::bf16);
  bf16* dqkv = bf16_ptr(made.attn_dqkv);
  {
    const Tensor dout = ctx.empty(shape, DType::bf16);
    matmul_backward_p1(ctx, bf16_ptr(dout), dx1, weight(layer, "attn.wo"), n, c, c, false);
    const bool flash = stash.contains("attn.lse");
    const OpMark mark(
        ctx, [&] { return std::string(flash ? "p1 attention flash" : "p1 attention"); },
        attention_flops(dims, 2));
    if (flash) {  // cuDNN SDPA's backward, from O and logsumexp
      sdpa_backward(ctx, dqkv, bf16_ptr(dout), at("attn.qkv"), at("attn.out"),
                    f32_ptr(stash.at("attn.lse")), dims);
    } else {
      const bf16* probs = stash.contains("attn.probs") ? at("attn.probs") : nullptr;
      attention_core_backward_p1(ctx, dqkv, bf16_ptr(dout), at("attn.qkv"), probs, dims);
    }
  }
  memory_bound(ctx, "p1 rope", rope_bytes(dims), [&] {
    rope_rotate(dqkv, b, s, dims.heads, dims.kv_heads, dims.head_dim(), kRopeBase, -1.0f, stream);
  });
  made.attn_norm_dy = ctx.empty(shape, DType::bf16);
  bf16* dxn1 = bf16_ptr(made.attn_norm_dy);
  matmul_backward_p1(ctx, dxn1, dqkv, weight(layer, "attn.wqkv"), n, c, w, false);
  Tensor dx = ctx.empty(shape, DType::bf16);
  memory_bound(ctx, "p1 rmsnorm", norm_bytes, [&] {
    rmsnorm_backward_p1(bf16_ptr(dx), dx1, dxn1, at("attn_norm.xhat"),
                        f32_ptr(stash.at("attn_norm.rstd")), weight(layer, "attn_norm"), n, c,
                        stream);
  });

  fill_block_retained(layer.model, b, s, stash, made, retained);
  return dx;
}

void block_backward_p2(DeviceContext& ctx, LayerParams& layer,
                       std::span<const Retained* const> retained) {
  if (retained.empty()) return;
  const std::int64_t c = layer.model.hidden, f = layer.model.ffn_hidden;
  std::vector<MatmulRows> qkv_rows, o_rows, gate_rows, up_rows, down_rows;
  std::int64_t width = 0;
  for (const Retained* set : retained) {
    const AttentionDims dims = block_dims(layer.model, set->at("attn.x"));
    width = dims.qkv_width();
    const std::int64_t rows = dims.tokens();
    const auto at = [&](const char* name) -> const bf16* { return bf16_ptr(set->at(name)); };
    qkv_rows.push_back({at("attn.x"), at("attn.dqkv"), rows});
    o_rows.push_back({at("attn.out"), at("attn.dy"), rows});
    gate_rows.push_back({at("mlp.x"), at("mlp.dgate"), rows});
    up_rows.push_back({at("mlp.x"), at("mlp.dup"), rows});
    down_rows.push_back({at("mlp.h"), at("mlp.dy"), rows});
    // The gain gradients are column sums: no concatenation needed, one pass per micro-batch.
    const double norm_bytes = bf16_bytes(2, rows * c, 4.0 * static_cast<double>(c));  // x̂, dy in
    for (const std::string norm : {"attn_norm", "mlp_norm"}) {
      memory_bound(ctx, "p2 rmsnorm", norm_bytes, [&] {
        rmsnorm_backward_p2(grad(layer, norm), at((norm + ".xhat").c_str()),
                            at((norm + ".dy").c_str()), rows, c, ctx.stream());
      });
    }
  }
  matmul_backward_p2(ctx, grad(layer, "attn.wqkv"), qkv_rows, c, width);
  matmul_backward_p2(ctx, grad(layer, "attn.wo"), o_rows, c, c);
  matmul_backward_p2(ctx, grad(layer, "mlp.w_gate"), gate_rows, c, f);
  matmul_backward_p2(ctx, grad(layer, "mlp.w_up"), up_rows, c, f);
  matmul_backward_p2(ctx, grad(layer, "mlp.w_down"), down_rows, f, c);
}

}  // namespace pipeplan::cuda
