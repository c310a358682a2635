// RoPE (Su et al. 2021) on adjacent pairs of every q and k head, in place; sign −1 is the
// backward (the transpose of a rotation). One thread per (token, head, pair).
#include <cmath>

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace pipeplan::cuda {

namespace {

__global__ void rope_kernel(bf16* qkv, std::int64_t tokens, int seq, int rotated_heads,
                            int head_dim, int width, float log2_base, float sign) {
  const int pairs = head_dim / 2;
  const std::int64_t index = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (index >= tokens * rotated_heads * pairs) return;
  const int i = static_cast<int>(index % pairs);
  const int h = static_cast<int>((index / pairs) % rotated_heads);
  const std::int64_t token = index / (std::int64_t{pairs} * rotated_heads);
  const int t = static_cast<int>(token % seq);
  const float inv_freq = exp2f(-2.0f * float(i) / float(head_dim) * log2_base);
  float sin_a, cos_a;
  sincosf(float(t) * inv_freq, &sin_a, &cos_a);
  sin_a *= sign;
  bf16* pair = qkv + token * width + h * head_dim + 2 * i;
  const float a = __bfloat162float(pair[0]);
  const float b = __bfloat162float(pair[1]);
  pair[0] = __float2bfloat16(a * cos_a - b * sin_a);
  pair[1] = __float2bfloat16(a * sin_a + b * cos_a);
}

}  // namespace

void rope_rotate(bf16* qkv, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                 std::int64_t kv_heads, std::int64_t head_dim, double base, float sign,
                 cudaStream_t stream) {
  const std::int64_t tokens = batch * seq;
  const std::int64_t rotated = heads + kv_heads;  // q then k heads, contiguous in a row
  const std::int64_t total = tokens * rotated * (head_dim / 2);
  if (total == 0) return;
  const int width = static_cast<int>((heads + 2 * kv_heads) * head_dim);
  launch(rope_kernel, grid_for(total, 256), 256, stream, qkv, tokens, static_cast<int>(seq),
         static_cast<int>(rotated), static_cast<int>(head_dim), width,
         static_cast<float>(std::log2(base)), sign);
}

}  // namespace pipeplan::cuda
