#include "runtime/cpu/matmul.h"

#include <algorithm>

namespace pipeplan::cpu {

namespace {

// A (64 × 256) fp32 tile of W or dW is 64 KiB: it stays in L2 while the rows of X stream past.
constexpr std::int64_t kRowTile = 64;
constexpr std::int64_t kOutTile = 64;
constexpr std::int64_t kInTile = 256;

template <typename T>
T dot(const T* a, const T* b, std::int64_t len) {
  // Eight independent partial sums let the compiler vectorise without -ffast-math.
  T acc[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    for (int j = 0; j < 8; ++j)
      acc[j] += a[i + j] * b[i + j];
  }
  T tail = 0;
  for (; i < len; ++i)
    tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

template <typename T>
void axpy(T* y, T a, const T* x, std::int64_t len) {
  for (std::int64_t i = 0; i < len; ++i)
    y[i] += a * x[i];
}

}  // namespace

template <typename T>
void matmul_forward(T* y, const T* x, const T* w, std::int64_t n, std::int64_t in,
                    std::int64_t out) {
  std::fill(y, y + n * out, T{0});
  for (std::int64_t r0 = 0; r0 < n; r0 += kRowTile) {
    const std::int64_t r1 = std::min(n, r0 + kRowTile);
    for (std::int64_t o0 = 0; o0 < out; o0 += kOutTile) {
      const std::int64_t o1 = std::min(out, o0 + kOutTile);
      for (std::int64_t i0 = 0; i0 < in; i0 += kInTile) {
        const std::int64_t len = std::min(kInTile, in - i0);
        for (std::int64_t r = r0; r < r1; ++r) {
          for (std::int64_t o = o0; o < o1; ++o) {
            y[r * out + o] += dot(x + r * in + i0, w + o * in + i0, len);
          }
        }
      }
    }
  }
}

template <typename T>
void matmul_backward_p1(T* dx, const T* dy, const T* w, std::int64_t n, std::int64_t in,
                        std::int64_t out) {
  for (std::int64_t r0 = 0; r0 < n; r0 += kRowTile) {
    const std::int64_t r1 = std::min(n, r0 + kRowTile);
    for (std::int64_t i0 = 0; i0 < in; i0 += kInTile) {
      const std::int64_t len = std::min(kInTile, in - i0);
      for (std::int64_t o0 = 0; o0 < out; o0 += kOutTile) {
        const std::int64_t o1 = std::min(out, o0 + kOutTile);
        for (std::int64_t r = r0; r < r1; ++r) {
          for (std::int64_t o = o0; o < o1; ++o) {
            axpy(dx + r * in + i0, dy[r * out + o], w + o * in + i0, len);
          }
        }
      }
    }
  }
}

template <typename T>
void matmul_backward_p2(T* dw, std::span<const MatmulRows<T>> blocks, std::int64_t in,
                        std::int64_t out) {
  for (std::int64_t o0 = 0; o0 < out; o0 += kOutTile) {
    const std::int64_t o1 = std::min(out, o0 + kOutTile);
    for (std::int64_t i0 = 0; i0 < in; i0 += kInTile) {
      const std::int64_t len = std::min(kInTile, in - i0);
      for (const MatmulRows<T>& block : blocks) {
        for (std::int64_t r = 0; r < block.rows; ++r) {
          for (std::int64_t o = o0; o < o1; ++o) {
            axpy(dw + o * in + i0, block.dy[r * out + o], block.x + r * in + i0, len);
          }
        }
      }
    }
  }
}

#define PIPEPLAN_INSTANTIATE(T)                                                           \
  template void matmul_forward<T>(T*, const T*, const T*, std::int64_t, std::int64_t,     \
                                  std::int64_t);                                          \
  template void matmul_backward_p1<T>(T*, const T*, const T*, std::int64_t, std::int64_t, \
                                      std::int64_t);                                      \
  template void matmul_backward_p2<T>(T*, std::span<const MatmulRows<T>>, std::int64_t,   \
                                      std::int64_t);
PIPEPLAN_INSTANTIATE(float)
PIPEPLAN_INSTANTIATE(double)
#undef PIPEPLAN_INSTANTIATE

}  // namespace pipeplan::cpu
