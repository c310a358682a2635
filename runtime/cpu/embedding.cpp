#include "runtime/cpu/embedding.h"

#include <algorithm>
#include <string>

#include "planner/base/error.h"

namespace pipeplan::cpu {

template <typename T>
void embedding_forward(T* y, const std::int32_t* tokens, const T* wte, std::int64_t n,
                       std::int64_t c, std::int64_t v) {
  for (std::int64_t r = 0; r < n; ++r) {
    const std::int64_t token = tokens[r];
    if (token < 0 || token >= v) {
      throw Error("token " + std::to_string(token) + " at position " + std::to_string(r) +
                  " is outside the vocabulary [0, " + std::to_string(v) + ")");
    }
    std::copy(wte + token * c, wte + (token + 1) * c, y + r * c);
  }
}

template <typename T>
void embedding_backward_p2(T* dwte, std::span<const EmbeddingRows<T>> blocks, std::int64_t c) {
  for (const EmbeddingRows<T>& block : blocks) {
    for (std::int64_t r = 0; r < block.rows; ++r) {
      T* row = dwte + std::int64_t{block.tokens[r]} * c;
      for (std::int64_t i = 0; i < c; ++i)
        row[i] += block.dy[r * c + i];
    }
  }
}

#define PIPEPLAN_INSTANTIATE(T)                                                       \
  template void embedding_forward<T>(T*, const std::int32_t*, const T*, std::int64_t, \
                                     std::int64_t, std::int64_t);                     \
  template void embedding_backward_p2<T>(T*, std::span<const EmbeddingRows<T>>, std::int64_t);
PIPEPLAN_INSTANTIATE(float)
PIPEPLAN_INSTANTIATE(double)
#undef PIPEPLAN_INSTANTIATE

}  // namespace pipeplan::cpu
