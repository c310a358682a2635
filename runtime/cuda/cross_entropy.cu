// Softmax cross-entropy over the vocabulary: forward turns logits into probabilities in place
// and writes each row's loss; p1 turns the probabilities into dlogits in place. One block per
// row, fp32 reductions.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace pipeplan::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void cross_entropy_forward_kernel(bf16* probs, float* losses,
                                             const std::int32_t* targets, std::int64_t v) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  bf16* p = probs + row * v;
  float local_max = -INFINITY;
  for (std::int64_t i = threadIdx.x; i < v; i += blockDim.x)
    local_max = fmaxf(local_max, __bfloat162float(p[i]));
  const float row_max = block_max(local_max, scratch);
  float local_sum = 0.0f;
  for (std::int64_t i = threadIdx.x; i < v; i += blockDim.x)
    local_sum += __expf(__bfloat162float(p[i]) - row_max);
  const float sum = block_sum(local_sum, scratch);
  const std::int64_t target = targets[row];
  if (threadIdx.x == 0) {
    // Read the target logit before any thread overwrites it (the barrier below orders it).
    const float target_logit =
        target >= 0 && target < v ? __bfloat162float(p[target]) - row_max : -INFINITY;
    losses[row] = logf(sum) - target_logit;
  }
  __syncthreads();
  const float inv_sum = 1.0f / sum;
  for (std::int64_t i = threadIdx.x; i < v; i += blockDim.x)
    p[i] = __float2bfloat16(__expf(__bfloat162float(p[i]) - row_max) * inv_sum);
}

__global__ void mean_kernel(float* out, const float* values, std::int64_t n) {
  __shared__ float scratch[32];
  float local = 0.0f;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x)
    local += values[i];
  const float total = block_sum(local, scratch);
  if (threadIdx.x == 0) out[0] = total / float(n);
}

__global__ void cross_entropy_backward_kernel(bf16* dlogits, const std::int32_t* targets,
                                              const void* dloss, bool dloss_is_bf16, std::int64_t n,
                                              std::int64_t v) {
  const float grad = dloss_is_bf16 ? __bfloat162float(*static_cast<const bf16*>(dloss))
                                   : *static_cast<const float*>(dloss);
  const float scale = grad / float(n);
  const std::int64_t row = blockIdx.x;
  const std::int64_t target = targets[row];
  bf16* d = dlogits + row * v;
  for (std::int64_t i = threadIdx.x; i < v; i += blockDim.x) {
    const float onehot = i == target ? 1.0f : 0.0f;
    d[i] = __float2bfloat16(scale * (__bfloat162float(d[i]) - onehot));
  }
}

}  // namespace

void cross_entropy_forward(bf16* probs, float* losses, const std::int32_t* targets, std::int64_t n,
                           std::int64_t v, cudaStream_t stream) {
  if (n == 0) return;
  launch(cross_entropy_forward_kernel, static_cast<unsigned>(n), kThreads, stream, probs, losses,
         targets, v);
}

void mean_f32(float* out, const float* values, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(mean_kernel, 1, 1024, stream, out, values, n);
}

void cross_entropy_backward_p1(bf16* dlogits, const std::int32_t* targets, const void* dloss,
                               bool dloss_is_bf16, std::int64_t n, std::int64_t v,
                               cudaStream_t stream) {
  if (n == 0) return;
  launch(cross_entropy_backward_kernel, static_cast<unsigned>(n), kThreads, stream, dlogits,
         targets, dloss, dloss_is_bf16, n, v);
}

}  // namespace pipeplan::cuda
