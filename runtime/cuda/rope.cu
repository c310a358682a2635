// RoPE (Su et al. 2021) on adjacent pairs of every q and k head, in place; sign −1 is the
// backward (the transpose of a rotation). One thread per (token, head, 4 pairs), or per pair where
// the heads do not start on 16 bytes.
#include <cmath>

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace pipeplan::cuda {

namespace {

constexpr int kThreads = 256;

// One thread per W/2 adjacent pairs of one head (W = 1 is one pair read as two scalars).
template <int W>
__global__ void rope_kernel(bf16* qkv, std::int64_t tokens, int seq, int rotated_heads,
                            int head_dim, int width, float log2_base, float sign) {
  constexpr int kPairs = W >= 2 ? W / 2 : 1;  // pairs per thread
  constexpr int kValues = W >= 2 ? W : 2;     // values per thread
  const int groups = head_dim / kValues;      // per head
  const std::int64_t index = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (index >= tokens * rotated_heads * groups) return;
  const int group = static_cast<int>(index % groups);
  const int h = static_cast<int>((index / groups) % rotated_heads);
  const std::int64_t token = index / (std::int64_t{groups} * rotated_heads);
  const int t = static_cast<int>(token % seq);
  bf16* values = qkv + token * width + h * head_dim + group * kValues;
  Pack<kValues> in;
  if constexpr (W >= 2) {
    in = load_pack<W>(values);
  } else {
    in.v[0] = values[0];
    in.v[1] = values[1];
  }
  Pack<kValues> out;
  for (int k = 0; k < kPairs; ++k) {
    const int i = group * kPairs + k;  // the pair's index within the head
    const float inv_freq = exp2f(-2.0f * float(i) / float(head_dim) * log2_base);
    float sin_a, cos_a;
    sincosf(float(t) * inv_freq, &sin_a, &cos_a);
    sin_a *= sign;
    const float a = __bfloat162float(in.v[2 * k]);
    const float b = __bfloat162float(in.v[2 * k + 1]);
    out.v[2 * k] = __float2bfloat16(a * cos_a - b * sin_a);
    out.v[2 * k + 1] = __float2bfloat16(a * sin_a + b * cos_a);
  }
  if constexpr (W >= 2) {
    store_pack<W>(values, out);
  } else {
    values[0] = out.v[0];
    values[1] = out.v[1];
  }
}

}  // namespace

void rope_rotate(bf16* qkv, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                 std::int64_t kv_heads, std::int64_t head_dim, double base, float sign,
                 cudaStream_t stream) {
  const std::int64_t tokens = batch * seq;
  const std::int64_t rotated = heads + kv_heads;  // q then k heads, contiguous in a row
  if (tokens * rotated * (head_dim / 2) == 0) return;
  const int width = static_cast<int>((heads + 2 * kv_heads) * head_dim);
  const auto log2_base = static_cast<float>(std::log2(base));
  // Packs need every head (so every row, a whole number of heads) to start on 16 bytes.
  if (vectorizable(head_dim, qkv)) {
    const std::int64_t threads = tokens * rotated * (head_dim / kPack);
    launch(rope_kernel<kPack>, grid_for(threads, kThreads), kThreads, stream, qkv, tokens,
           static_cast<int>(seq), static_cast<int>(rotated), static_cast<int>(head_dim), width,
           log2_base, sign);
  } else {
    const std::int64_t threads = tokens * rotated * (head_dim / 2);
    launch(rope_kernel<1>, grid_for(threads, kThreads), kThreads, stream, qkv, tokens,
           static_cast<int>(seq), static_cast<int>(rotated), static_cast<int>(head_dim), width,
           log2_base, sign);
  }
}

}  // namespace pipeplan::cuda
