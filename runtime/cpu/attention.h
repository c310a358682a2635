// Causal self-attention with RoPE, as in LLaMA: qkv = x·Wqkv^T, RoPE on q and k, softmax
// attention (grouped-query when kv_heads < heads: query head h reads kv head h / (H / KV)), then
// y = out·Wo^T. The attention core has no weights, so it finishes in p1; p2 is the two GEMMs.
// Probabilities are materialised (B, H, T, T): a reference, not flash attention.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/layer_spec.h"  // AttentionDims, kRopeBase

namespace pipeplan::cpu {

template <typename T>
struct AttentionWeights {
  const T* wqkv;  // ((H + 2·KV)·D, C)
  const T* wo;    // (C, H·D)
};

template <typename T>
struct AttentionGrads {
  T* wqkv;  // ((H + 2·KV)·D, C) accumulated
  T* wo;    // (C, H·D) accumulated
};

// Written by forward, read by p1.
template <typename T>
struct AttentionStash {
  T* qkv;    // (B, T, (H + 2·KV)·D) after RoPE
  T* probs;  // (B, H, T, T) softmax, zero above the diagonal
  T* out;    // (B, T, H·D) attention output before Wo; retained as X of Wo
};

// One micro-batch, as retained from p1 for p2.
template <typename T>
struct AttentionRows {
  const T* x;     // (rows, C) input (X of Wqkv)
  const T* dqkv;  // (rows, (H + 2·KV)·D) (dY of Wqkv)
  const T* out;   // (rows, H·D) (X of Wo)
  const T* dy;    // (rows, C) (dY of Wo)
  std::int64_t rows;
};

template <typename T>
void attention_forward(T* y,  // (B, T, C) overwritten
                       const AttentionStash<T>& stash,
                       const T* x,  // (B, T, C)
                       const AttentionWeights<T>& weights, const AttentionDims& dims);

// p1: dx += dY·Wo → attention core backward → RoPE backward → ·Wqkv.
template <typename T>
void attention_backward_p1(T* dx,        // (B, T, C) accumulated
                           T* dqkv,      // (B, T, (H + 2·KV)·D) overwritten; retained for p2
                           const T* dy,  // (B, T, C)
                           const AttentionStash<T>& stash, const AttentionWeights<T>& weights,
                           const AttentionDims& dims);

template <typename T>
void attention_backward_p2(const AttentionGrads<T>& grads, std::span<const AttentionRows<T>> blocks,
                           const AttentionDims& dims);

}  // namespace pipeplan::cpu
