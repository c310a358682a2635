// Causal softmax over materialised attention scores, forward and backward. One block per row;
// the row is read from bf16, reduced in fp32.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace pipeplan::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void causal_softmax_forward_kernel(bf16* probs, int seq) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const int t = static_cast<int>(row % seq);  // query position: keys 0..t are visible
  bf16* p = probs + row * seq;
  float local_max = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x)
    local_max = fmaxf(local_max, __bfloat162float(p[j]));
  const float row_max = block_max(local_max, scratch);
  float local_sum = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x)
    local_sum += __expf(__bfloat162float(p[j]) - row_max);
  const float inv_sum = 1.0f / block_sum(local_sum, scratch);
  for (int j = threadIdx.x; j < seq; j += blockDim.x) {
    const float value = j <= t ? __expf(__bfloat162float(p[j]) - row_max) * inv_sum : 0.0f;
    p[j] = __float2bfloat16(value);
  }
}

__global__ void causal_softmax_backward_kernel(bf16* dscores, const bf16* probs, int seq,
                                               float scale) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const int t = static_cast<int>(row % seq);
  bf16* ds = dscores + row * seq;
  const bf16* p = probs + row * seq;
  float local = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x)
    local += __bfloat162float(p[j]) * __bfloat162float(ds[j]);
  const float weighted = block_sum(local, scratch);
  for (int j = threadIdx.x; j < seq; j += blockDim.x) {
    const float value =
        j <= t ? scale * __bfloat162float(p[j]) * (__bfloat162float(ds[j]) - weighted) : 0.0f;
    ds[j] = __float2bfloat16(value);
  }
}

}  // namespace

void causal_softmax_forward(bf16* probs, std::int64_t rows, std::int64_t seq, cudaStream_t stream) {
  if (rows == 0) return;
  launch(causal_softmax_forward_kernel, static_cast<unsigned>(rows), kThreads, stream, probs,
         static_cast<int>(seq));
}

void causal_softmax_backward(bf16* dscores, const bf16* probs, std::int64_t rows, std::int64_t seq,
                             float scale, cudaStream_t stream) {
  if (rows == 0) return;
  launch(causal_softmax_backward_kernel, static_cast<unsigned>(rows), kThreads, stream, dscores,
         probs, static_cast<int>(seq), scale);
}

}  // namespace pipeplan::cuda
