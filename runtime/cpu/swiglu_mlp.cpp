#include "runtime/cpu/swiglu_mlp.h"

#include <cmath>
#include <vector>

#include "runtime/cpu/matmul.h"

namespace pipeplan::cpu {

namespace {
template <typename T>
T sigmoid(T z) {
  return T{1} / (T{1} + std::exp(-z));
}
}  // namespace

template <typename T>
void swiglu_mlp_forward(T* y, const SwigluStash<T>& stash, const T* x,
                        const SwigluWeights<T>& weights, std::int64_t n, std::int64_t c,
                        std::int64_t f) {
  matmul_forward(stash.gate, x, weights.gate, n, c, f);
  matmul_forward(stash.up, x, weights.up, n, c, f);
  for (std::int64_t i = 0; i < n * f; ++i) {
    stash.h[i] = stash.gate[i] * sigmoid(stash.gate[i]) * stash.up[i];
  }
  matmul_forward(y, stash.h, weights.down, n, f, c);
}

template <typename T>
void swiglu_mlp_backward_p1(T* dx, T* dgate, T* dup, const T* dy, const SwigluStash<T>& stash,
                            const SwigluWeights<T>& weights, std::int64_t n, std::int64_t c,
                            std::int64_t f) {
  std::vector<T> dh(static_cast<std::size_t>(n * f), T{0});
  matmul_backward_p1(dh.data(), dy, weights.down, n, f, c);
  for (std::int64_t i = 0; i < n * f; ++i) {
    const T s = sigmoid(stash.gate[i]);
    const T silu = stash.gate[i] * s;
    // d silu(z)/dz = s · (1 + z · (1 − s))
    dgate[i] = dh[i] * stash.up[i] * s * (T{1} + stash.gate[i] * (T{1} - s));
    dup[i] = dh[i] * silu;
  }
  matmul_backward_p1(dx, dgate, weights.gate, n, c, f);
  matmul_backward_p1(dx, dup, weights.up, n, c, f);
}

template <typename T>
void swiglu_mlp_backward_p2(const SwigluGrads<T>& grads, std::span<const SwigluRows<T>> blocks,
                            std::int64_t c, std::int64_t f) {
  std::vector<MatmulRows<T>> gate_rows, up_rows, down_rows;
  for (const SwigluRows<T>& block : blocks) {
    gate_rows.push_back({block.x, block.dgate, block.rows});
    up_rows.push_back({block.x, block.dup, block.rows});
    down_rows.push_back({block.h, block.dy, block.rows});
  }
  matmul_backward_p2<T>(grads.gate, gate_rows, c, f);
  matmul_backward_p2<T>(grads.up, up_rows, c, f);
  matmul_backward_p2<T>(grads.down, down_rows, f, c);
}

#define PIPEPLAN_INSTANTIATE(T)                                                                  \
  template void swiglu_mlp_forward<T>(T*, const SwigluStash<T>&, const T*,                       \
                                      const SwigluWeights<T>&, std::int64_t, std::int64_t,       \
                                      std::int64_t);                                             \
  template void swiglu_mlp_backward_p1<T>(T*, T*, T*, const T*, const SwigluStash<T>&,           \
                                          const SwigluWeights<T>&, std::int64_t, std::int64_t,   \
                                          std::int64_t);                                         \
  template void swiglu_mlp_backward_p2<T>(const SwigluGrads<T>&, std::span<const SwigluRows<T>>, \
                                          std::int64_t, std::int64_t);
PIPEPLAN_INSTANTIATE(float)
PIPEPLAN_INSTANTIATE(double)
#undef PIPEPLAN_INSTANTIATE

}  // namespace pipeplan::cpu
