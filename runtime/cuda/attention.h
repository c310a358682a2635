// The attention core on the GPU (the part of attention without weights; the QKV and O
// projections are GEMMs in block.cpp): per head, S = scale·Q·Kᵀ and dS products on cuBLAS
// strided-batched GEMMs, causal softmax and its backward as kernels (softmax.cu). Grouped-query
// heads: query head h = kv·G + g reads kv head kv, so each call batches over kv heads for one g;
// p1 sums a kv head's G dK and dV products in fp32 and rounds them to bf16 once.
//
// Modes (profiles/profile.h `Attention`), by what forward keeps for p1:
//   materialized  probs (B, H, T, T) bf16 in the stash: 2·B·H·T² bytes held from F to p1.
//   recompute     nothing extra; p1 recomputes S and the softmax (one more Q·Kᵀ per head).
//   flash         not here: cuDNN's fused SDPA (sdpa.h); where that is unavailable the backend
//                 refuses flash (check_attention_available), it never runs `recompute` instead.
// In every mode the passes that need probabilities build them one sequence at a time in a
// transient (H, T, T) scratch, freed before the pass returns; p1 also holds dS (H, T, T) bf16
// and, with G > 1, the fp32 dK and dV sums (T, 2·KV·D) of one sequence.
#pragma once

#include "profiles/profile.h"
#include "runtime/cuda/context.h"
#include "runtime/cuda/kernels.h"
#include "runtime/layer_spec.h"

namespace pipeplan::cuda {

// out = softmax(scale·Q·Kᵀ, causal)·V per head; `probs` (materialized mode) receives the
// probabilities of all B sequences, or is null (then a per-sequence scratch is used).
void attention_core_forward(DeviceContext& ctx,
                            bf16* out,        // (B, T, H·D)
                            bf16* probs,      // (B, H, T, T) or null
                            const bf16* qkv,  // (B, T, (H + 2·KV)·D) after RoPE
                            const AttentionDims& dims);

// dqkv = backward of the core for dout; probabilities from `probs` or recomputed when null.
void attention_core_backward_p1(DeviceContext& ctx,
                                bf16* dqkv,         // (B, T, (H + 2·KV)·D) overwritten
                                const bf16* dout,   // (B, T, H·D)
                                const bf16* qkv,    // (B, T, (H + 2·KV)·D) after RoPE
                                const bf16* probs,  // (B, H, T, T) or null
                                const AttentionDims& dims);

}  // namespace pipeplan::cuda
