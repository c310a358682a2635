#include "runtime/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/cpu/matmul.h"

namespace pipeplan::cpu {

namespace {

// RoPE (Su et al. 2021) on adjacent pairs (2i, 2i+1) of every q and k head: rotate by
// t · base^(−2i/D). `sign` −1 rotates back, which is the transpose, i.e. the backward.
template <typename T>
void rope_rotate(T* qkv,  // (B, T, (H + 2·KV)·D): q and k heads in place
                 const AttentionDims& dims, double sign) {
  const std::int64_t d = dims.head_dim();
  const std::int64_t width = dims.qkv_width();
  const std::int64_t rotated_heads = dims.heads + dims.kv_heads;  // q then k, contiguous
  for (std::int64_t t = 0; t < dims.seq; ++t) {
    for (std::int64_t i = 0; i < d / 2; ++i) {
      const double angle = double(t) * std::pow(kRopeBase, -2.0 * double(i) / double(d));
      const T cos_a = static_cast<T>(std::cos(angle));
      const T sin_a = static_cast<T>(sign * std::sin(angle));
      for (std::int64_t b = 0; b < dims.batch; ++b) {
        T* row = qkv + (b * dims.seq + t) * width;
        for (std::int64_t h = 0; h < rotated_heads; ++h) {
          T* pair = row + h * d + 2 * i;
          const T a = pair[0];
          const T c = pair[1];
          pair[0] = a * cos_a - c * sin_a;
          pair[1] = a * sin_a + c * cos_a;
        }
      }
    }
  }
}

template <typename T>
T serial_dot(const T* a, const T* b, std::int64_t len) {
  T sum = 0;
  for (std::int64_t i = 0; i < len; ++i)
    sum += a[i] * b[i];
  return sum;
}

// Offsets into a qkv row of query head h and of its kv head.
struct HeadOffsets {
  std::int64_t q, k, v;
};
HeadOffsets head_offsets(const AttentionDims& dims, std::int64_t h) {
  const std::int64_t d = dims.head_dim();
  const std::int64_t kv = h / (dims.heads / dims.kv_heads);
  return {h * d, (dims.heads + kv) * d, (dims.heads + dims.kv_heads + kv) * d};
}

template <typename T>
void attention_core_forward(T* out,        // (B, T, H·D) overwritten
                            T* probs,      // (B, H, T, T) overwritten
                            const T* qkv,  // (B, T, (H + 2·KV)·D)
                            const AttentionDims& dims) {
  const std::int64_t d = dims.head_dim(), s = dims.seq, width = dims.qkv_width();
  const T scale = static_cast<T>(1.0 / std::sqrt(double(d)));
  std::fill(out, out + dims.tokens() * dims.channels, T{0});
  for (std::int64_t b = 0; b < dims.batch; ++b) {
    const T* base = qkv + b * s * width;
    for (std::int64_t h = 0; h < dims.heads; ++h) {
      const HeadOffsets off = head_offsets(dims, h);
      for (std::int64_t t = 0; t < s; ++t) {
        T* p = probs + ((b * dims.heads + h) * s + t) * s;
        const T* q = base + t * width + off.q;
        T max_score = -std::numeric_limits<T>::infinity();
        for (std::int64_t j = 0; j <= t; ++j) {
          p[j] = scale * serial_dot(q, base + j * width + off.k, d);
          max_score = std::max(max_score, p[j]);
        }
        T sum = 0;
        for (std::int64_t j = 0; j <= t; ++j)
          sum += (p[j] = std::exp(p[j] - max_score));
        for (std::int64_t j = 0; j <= t; ++j)
          p[j] /= sum;
        std::fill(p + t + 1, p + s, T{0});
        T* o = out + (b * s + t) * dims.channels + h * d;
        for (std::int64_t j = 0; j <= t; ++j) {
          const T* v = base + j * width + off.v;
          for (std::int64_t i = 0; i < d; ++i)
            o[i] += p[j] * v[i];
        }
      }
    }
  }
}

// Softmax backward: ds_j = p_j (dp_j − Σ_k p_k dp_k), with dp_j = dout · v_j.
template <typename T>
void attention_core_backward(T* dqkv,         // (B, T, (H + 2·KV)·D) accumulated
                             const T* dout,   // (B, T, H·D)
                             const T* qkv,    // (B, T, (H + 2·KV)·D)
                             const T* probs,  // (B, H, T, T)
                             const AttentionDims& dims) {
  const std::int64_t d = dims.head_dim(), s = dims.seq, width = dims.qkv_width();
  const T scale = static_cast<T>(1.0 / std::sqrt(double(d)));
  std::vector<T> dp(static_cast<std::size_t>(s));
  for (std::int64_t b = 0; b < dims.batch; ++b) {
    const T* base = qkv + b * s * width;
    T* dbase = dqkv + b * s * width;
    for (std::int64_t h = 0; h < dims.heads; ++h) {
      const HeadOffsets off = head_offsets(dims, h);
      for (std::int64_t t = 0; t < s; ++t) {
        const T* p = probs + ((b * dims.heads + h) * s + t) * s;
        const T* g = dout + (b * s + t) * dims.channels + h * d;
        T weighted = 0;
        for (std::int64_t j = 0; j <= t; ++j) {
          dp[j] = serial_dot(g, base + j * width + off.v, d);
          weighted += p[j] * dp[j];
          T* dv = dbase + j * width + off.v;
          for (std::int64_t i = 0; i < d; ++i)
            dv[i] += p[j] * g[i];
        }
        const T* q = base + t * width + off.q;
        T* dq = dbase + t * width + off.q;
        for (std::int64_t j = 0; j <= t; ++j) {
          const T ds = scale * p[j] * (dp[j] - weighted);
          const T* k = base + j * width + off.k;
          T* dk = dbase + j * width + off.k;
          for (std::int64_t i = 0; i < d; ++i) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void attention_forward(T* y, const AttentionStash<T>& stash, const T* x,
                       const AttentionWeights<T>& weights, const AttentionDims& dims) {
  const std::int64_t n = dims.tokens(), c = dims.channels;
  matmul_forward(stash.qkv, x, weights.wqkv, n, c, dims.qkv_width());
  rope_rotate(stash.qkv, dims, 1.0);
  attention_core_forward(stash.out, stash.probs, stash.qkv, dims);
  matmul_forward(y, stash.out, weights.wo, n, c, c);
}

template <typename T>
void attention_backward_p1(T* dx, T* dqkv, const T* dy, const AttentionStash<T>& stash,
                           const AttentionWeights<T>& weights, const AttentionDims& dims) {
  const std::int64_t n = dims.tokens(), c = dims.channels, width = dims.qkv_width();
  std::vector<T> dout(static_cast<std::size_t>(n * c), T{0});
  matmul_backward_p1(dout.data(), dy, weights.wo, n, c, c);
  std::fill(dqkv, dqkv + n * width, T{0});
  attention_core_backward(dqkv, dout.data(), stash.qkv, stash.probs, dims);
  rope_rotate(dqkv, dims, -1.0);
  matmul_backward_p1(dx, dqkv, weights.wqkv, n, c, width);
}

template <typename T>
void attention_backward_p2(const AttentionGrads<T>& grads, std::span<const AttentionRows<T>> blocks,
                           const AttentionDims& dims) {
  std::vector<MatmulRows<T>> qkv_rows, o_rows;
  for (const AttentionRows<T>& block : blocks) {
    qkv_rows.push_back({block.x, block.dqkv, block.rows});
    o_rows.push_back({block.out, block.dy, block.rows});
  }
  matmul_backward_p2<T>(grads.wqkv, qkv_rows, dims.channels, dims.qkv_width());
  matmul_backward_p2<T>(grads.wo, o_rows, dims.channels, dims.channels);
}

#define PIPEPLAN_INSTANTIATE(T)                                                             \
  template void attention_forward<T>(T*, const AttentionStash<T>&, const T*,                \
                                     const AttentionWeights<T>&, const AttentionDims&);     \
  template void attention_backward_p1<T>(T*, T*, const T*, const AttentionStash<T>&,        \
                                         const AttentionWeights<T>&, const AttentionDims&); \
  template void attention_backward_p2<T>(const AttentionGrads<T>&,                          \
                                         std::span<const AttentionRows<T>>, const AttentionDims&);
PIPEPLAN_INSTANTIATE(float)
PIPEPLAN_INSTANTIATE(double)
#undef PIPEPLAN_INSTANTIATE

}  // namespace pipeplan::cpu
