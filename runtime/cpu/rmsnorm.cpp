#include "runtime/cpu/rmsnorm.h"

#include <cmath>

namespace pipeplan::cpu {

template <typename T>
void rmsnorm_forward(T* y, T* xhat, T* rstd, const T* x, const T* g, std::int64_t n,
                     std::int64_t c) {
  for (std::int64_t r = 0; r < n; ++r) {
    const T* x_row = x + r * c;
    double sum_squares = 0;
    for (std::int64_t i = 0; i < c; ++i)
      sum_squares += double(x_row[i]) * double(x_row[i]);
    const T s = static_cast<T>(1.0 / std::sqrt(sum_squares / double(c) + kRmsNormEps));
    rstd[r] = s;
    for (std::int64_t i = 0; i < c; ++i) {
      xhat[r * c + i] = x_row[i] * s;
      y[r * c + i] = xhat[r * c + i] * g[i];
    }
  }
}

template <typename T>
void rmsnorm_backward_p1(T* dx, const T* dy, const T* xhat, const T* rstd, const T* g,
                         std::int64_t n, std::int64_t c) {
  for (std::int64_t r = 0; r < n; ++r) {
    const T* dy_row = dy + r * c;
    const T* xhat_row = xhat + r * c;
    double dot = 0;  // Σ dx̂ ⊙ x̂
    for (std::int64_t i = 0; i < c; ++i)
      dot += double(dy_row[i] * g[i]) * double(xhat_row[i]);
    const T mean = static_cast<T>(dot / double(c));
    for (std::int64_t i = 0; i < c; ++i) {
      dx[r * c + i] += rstd[r] * (dy_row[i] * g[i] - xhat_row[i] * mean);
    }
  }
}

template <typename T>
void rmsnorm_backward_p2(T* dg, std::span<const RmsnormRows<T>> blocks, std::int64_t c) {
  for (const RmsnormRows<T>& block : blocks) {
    for (std::int64_t r = 0; r < block.rows; ++r) {
      for (std::int64_t i = 0; i < c; ++i)
        dg[i] += block.dy[r * c + i] * block.xhat[r * c + i];
    }
  }
}

#define PIPEPLAN_INSTANTIATE(T)                                                                  \
  template void rmsnorm_forward<T>(T*, T*, T*, const T*, const T*, std::int64_t, std::int64_t);  \
  template void rmsnorm_backward_p1<T>(T*, const T*, const T*, const T*, const T*, std::int64_t, \
                                       std::int64_t);                                            \
  template void rmsnorm_backward_p2<T>(T*, std::span<const RmsnormRows<T>>, std::int64_t);
PIPEPLAN_INSTANTIATE(float)
PIPEPLAN_INSTANTIATE(double)
#undef PIPEPLAN_INSTANTIATE

}  // namespace pipeplan::cpu
