// Launchers of the hand-written kernels, one section per .cu file (one file per op, llm.c
// style). Every tensor argument carries its shape; bf16 = __nv_bfloat16, row-major, N = B·T
// tokens. All launches go to `stream` and return at once; a launch error throws Error.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace pipeplan::cuda {

using bf16 = __nv_bfloat16;

// ---- elementwise.cu
void fill_f32(float* out, std::int64_t n, float value, cudaStream_t stream);     // (n)
void add_f32(float* out, const float* in, std::int64_t n, cudaStream_t stream);  // out += in, (n)
void cast_f32_to_bf16(bf16* out, const float* in, std::int64_t n, cudaStream_t stream);
// out (rows, cols) with rows out_ld apart = bf16(in), in (rows, cols) contiguous.
void cast_f32_to_bf16_rows(bf16* out, std::int64_t out_ld, const float* in, std::int64_t rows,
                           std::int64_t cols, cudaStream_t stream);

// ---- rmsnorm.cu: y = x̂ ⊙ g with x̂ = x · rstd, rstd = 1/sqrt(mean(x²) + eps) (fp32 math).
void rmsnorm_forward(bf16* y,        // (N, C)
                     bf16* xhat,     // (N, C)
                     float* rstd,    // (N)
                     const bf16* x,  // (N, C)
                     const bf16* g,  // (C)
                     std::int64_t n, std::int64_t c, double eps, cudaStream_t stream);
// p1: dx = residual + rstd ⊙ (dy⊙g − x̂ · mean(dy⊙g⊙x̂)); residual may be null (then 0).
void rmsnorm_backward_p1(bf16* dx,              // (N, C) overwritten
                         const bf16* residual,  // (N, C) or null
                         const bf16* dy,        // (N, C)
                         const bf16* xhat,      // (N, C)
                         const float* rstd,     // (N)
                         const bf16* g,         // (C)
                         std::int64_t n, std::int64_t c, cudaStream_t stream);
// p2: dg += Σ_rows dy ⊙ x̂ (fp32 accumulator).
void rmsnorm_backward_p2(float* dg,         // (C) accumulated
                         const bf16* xhat,  // (rows, C)
                         const bf16* dy,    // (rows, C)
                         std::int64_t rows, std::int64_t c, cudaStream_t stream);

// ---- rope.cu: rotate pairs (2i, 2i+1) of the q and k heads by sign · t · base^(−2i/D).
void rope_rotate(bf16* qkv,  // (B, T, (H + 2·KV)·D) in place
                 std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t kv_heads,
                 std::int64_t head_dim, double base, float sign, cudaStream_t stream);

// ---- softmax.cu: causal softmax over rows of a (rows, T) score matrix; row r is query
// position r mod T, so entries j > r mod T are masked (written 0).
void causal_softmax_forward(bf16* probs,  // (rows, T) scaled scores in, probabilities out
                            std::int64_t rows, std::int64_t seq, cudaStream_t stream);
// ds = scale · p ⊙ (dp − Σ_j p_j dp_j), in place over dp.
void causal_softmax_backward(bf16* dscores,      // (rows, T) dp in, ds out
                             const bf16* probs,  // (rows, T)
                             std::int64_t rows, std::int64_t seq, float scale, cudaStream_t stream);

// ---- swiglu.cu: h = silu(gate) ⊙ up.
void swiglu_forward(bf16* h,                               // (N, F)
                    const bf16* gate,                      // (N, F)
                    const bf16* up,                        // (N, F)
                    std::int64_t n, cudaStream_t stream);  // n = N·F elements
void swiglu_backward_p1(bf16* dgate,                       // (N, F)
                        bf16* dup,                         // (N, F)
                        const bf16* dh,                    // (N, F)
                        const bf16* gate,                  // (N, F)
                        const bf16* up,                    // (N, F)
                        std::int64_t n, cudaStream_t stream);

// ---- embedding.cu: y = wte[tokens]; p2 scatter-adds dy rows into the fp32 gradient.
// Tokens outside [0, V) give zero rows (validate tokens on the host before upload).
void embedding_forward(bf16* y,                     // (N, C)
                       const std::int32_t* tokens,  // (N)
                       const bf16* wte,             // (V, C)
                       std::int64_t n, std::int64_t c, std::int64_t v, cudaStream_t stream);
void embedding_backward_p2(float* dwte,                 // (V, C) accumulated
                           const std::int32_t* tokens,  // (rows)
                           const bf16* dy,              // (rows, C)
                           std::int64_t rows, std::int64_t c, std::int64_t v, cudaStream_t stream);

// ---- cross_entropy.cu: logits → p − onehot in place (the target's p − 1 computed in fp32, so
// that a confident row keeps its gradient), per-row loss −log p[target].
void cross_entropy_forward(bf16* probs,                  // (N, V) logits in, p − onehot out
                           float* losses,                // (N)
                           const std::int32_t* targets,  // (N)
                           std::int64_t n, std::int64_t v, cudaStream_t stream);
void mean_f32(float* out,           // (1)
              const float* values,  // (n)
              std::int64_t n, cudaStream_t stream);
// dlogits = dloss / N · (p − onehot), in place over the forward's p − onehot. dloss is one
// element, bf16 or f32 (as uploaded).
void cross_entropy_backward_p1(bf16* dlogits,  // (N, V) p − onehot in, dlogits out
                               const void* dloss, bool dloss_is_bf16, std::int64_t n,
                               std::int64_t v, cudaStream_t stream);

// ---- adamw.cu: fp32 master weights and moments, bf16 copy of the weights for the GEMMs.
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay;
  float m_correction, v_correction;  // 1 − β^t
};
void adamw_update(float* master,      // (n)
                  float* m,           // (n)
                  float* v,           // (n)
                  const float* grad,  // (n)
                  bf16* weight,       // (n) written from master
                  std::int64_t n, const AdamWStep& step, cudaStream_t stream);

}  // namespace pipeplan::cuda
