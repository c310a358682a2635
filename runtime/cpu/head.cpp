#include "runtime/cpu/head.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "planner/base/error.h"
#include "runtime/cpu/matmul.h"
#include "runtime/cpu/rmsnorm.h"

namespace pipeplan::cpu {

namespace {

void check_targets(const std::int32_t* targets, std::int64_t n, std::int64_t v) {
  for (std::int64_t r = 0; r < n; ++r) {
    if (targets[r] < 0 || targets[r] >= v) {
      throw Error("target " + std::to_string(targets[r]) + " at position " + std::to_string(r) +
                  " is outside the vocabulary [0, " + std::to_string(v) + ")");
    }
  }
}

// Turns a row of logits into probabilities in place; returns −log p[target].
template <typename T>
double softmax_cross_entropy(T* row, std::int64_t v, std::int32_t target) {
  const T max_logit = *std::max_element(row, row + v);
  double sum = 0;
  for (std::int64_t i = 0; i < v; ++i)
    sum += std::exp(double(row[i] - max_logit));
  const double target_logit = double(row[target] - max_logit);
  for (std::int64_t i = 0; i < v; ++i) {
    row[i] = static_cast<T>(std::exp(double(row[i] - max_logit)) / sum);
  }
  return std::log(sum) - target_logit;
}

}  // namespace

template <typename T>
void head_forward(T* loss, const HeadStash<T>& stash, const T* x, const std::int32_t* targets,
                  const HeadWeights<T>& weights, std::int64_t n, std::int64_t c, std::int64_t v) {
  check_targets(targets, n, v);
  rmsnorm_forward(stash.xn, stash.xhat, stash.rstd, x, weights.norm, n, c);
  matmul_forward(stash.probs, stash.xn, weights.lm, n, c, v);  // logits, then probs in place
  double total = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    total += softmax_cross_entropy(stash.probs + r * v, v, targets[r]);
  }
  loss[0] = static_cast<T>(total / double(n));
}

template <typename T>
void head_backward_p1(T* dx, T* dlogits, T* dxn, T loss_grad, const HeadStash<T>& stash,
                      const std::int32_t* targets, const HeadWeights<T>& weights, std::int64_t n,
                      std::int64_t c, std::int64_t v) {
  const T scale = loss_grad / static_cast<T>(n);
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t i = 0; i < v; ++i) {
      const T onehot = i == targets[r] ? T{1} : T{0};
      dlogits[r * v + i] = scale * (stash.probs[r * v + i] - onehot);
    }
  }
  std::fill(dxn, dxn + n * c, T{0});
  matmul_backward_p1(dxn, dlogits, weights.lm, n, c, v);
  rmsnorm_backward_p1(dx, dxn, stash.xhat, stash.rstd, weights.norm, n, c);
}

template <typename T>
void head_backward_p2(const HeadGrads<T>& grads, std::span<const HeadRows<T>> blocks,
                      std::int64_t c, std::int64_t v) {
  std::vector<MatmulRows<T>> lm_rows;
  std::vector<RmsnormRows<T>> norm_rows;
  for (const HeadRows<T>& block : blocks) {
    lm_rows.push_back({block.xn, block.dlogits, block.rows});
    norm_rows.push_back({block.xhat, block.dxn, block.rows});
  }
  matmul_backward_p2<T>(grads.lm, lm_rows, c, v);
  rmsnorm_backward_p2<T>(grads.norm, norm_rows, c);
}

#define PIPEPLAN_INSTANTIATE(T)                                                                   \
  template void head_forward<T>(T*, const HeadStash<T>&, const T*, const std::int32_t*,           \
                                const HeadWeights<T>&, std::int64_t, std::int64_t, std::int64_t); \
  template void head_backward_p1<T>(T*, T*, T*, T, const HeadStash<T>&, const std::int32_t*,      \
                                    const HeadWeights<T>&, std::int64_t, std::int64_t,            \
                                    std::int64_t);                                                \
  template void head_backward_p2<T>(const HeadGrads<T>&, std::span<const HeadRows<T>>,            \
                                    std::int64_t, std::int64_t);
PIPEPLAN_INSTANTIATE(float)
PIPEPLAN_INSTANTIATE(double)
#undef PIPEPLAN_INSTANTIATE

}  // namespace pipeplan::cpu
