// Token embedding (no learned positions: the blocks apply RoPE). Its input is integer tokens, so
// p1 computes nothing; it retains the tokens and dY, and p2 scatters dY rows into dW.
#pragma once

#include <cstdint>
#include <span>

namespace pipeplan::cpu {

// One micro-batch's rows, as retained from p1 for p2.
template <typename T>
struct EmbeddingRows {
  const std::int32_t* tokens;  // (rows)
  const T* dy;                 // (rows, C)
  std::int64_t rows;
};

// Throws Error naming the position of a token outside [0, V).
template <typename T>
void embedding_forward(T* y,                        // (N, C) overwritten
                       const std::int32_t* tokens,  // (N)
                       const T* wte,                // (V, C)
                       std::int64_t n, std::int64_t c, std::int64_t v);

// p2: dwte[token] += dy row, over the rows of all blocks.
template <typename T>
void embedding_backward_p2(T* dwte,  // (V, C) accumulated
                           std::span<const EmbeddingRows<T>> blocks, std::int64_t c);

}  // namespace pipeplan::cpu
