// Softmax cross-entropy over the vocabulary: forward turns logits into p − onehot (the loss
// gradient before its scale) in place and writes each row's loss; p1 scales it into dlogits in
// place. One block per row, fp32 reductions.
//
// The target's p − 1 is computed in fp32 as −(sum of the row's other exponentials) / (sum of
// all), not as bf16(p) − 1: between 0.5 and 1 bf16 steps by 2⁻⁸, so a confident row
// (p ≥ 1 − 2⁻⁹, common once a model trains) would store p = 1 and lose its target gradient, and
// the row's gradient would no longer sum to 0. The CPU reference keeps fp32 probabilities.
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
  const std::int64_t target = targets[row];
  float local_sum = 0.0f, local_others = 0.0f;
  for (std::int64_t i = threadIdx.x; i < v; i += blockDim.x) {
    const float e = __expf(__bfloat162float(p[i]) - row_max);
    local_sum += e;
    if (i != target) local_others += e;
  }
  const float sum = block_sum(local_sum, scratch);
  const float others = block_sum(local_others, scratch);
  if (threadIdx.x == 0) {
    // Read the target logit before any thread overwrites it (the barrier below orders it).
    const float target_logit =
        target >= 0 && target < v ? __bfloat162float(p[target]) - row_max : -INFINITY;
    losses[row] = logf(sum) - target_logit;
  }
  __syncthreads();
  const float inv_sum = 1.0f / sum;
  for (std::int64_t i = threadIdx.x; i < v; i += blockDim.x) {
    p[i] = __float2bfloat16(i == target ? -others * inv_sum
                                        : __expf(__bfloat162float(p[i]) - row_max) * inv_sum);
  }
}

__global__ void mean_kernel(float* out, const float* values, std::int64_t n) {
  __shared__ float scratch[32];
  float local = 0.0f;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x)
    local += values[i];
  const float total = block_sum(local, scratch);
  if (threadIdx.x == 0) out[0] = total / float(n);
}

__global__ void cross_entropy_backward_kernel(bf16* dlogits, const void* dloss, bool dloss_is_bf16,
                                              std::int64_t n, std::int64_t v) {
  const float grad = dloss_is_bf16 ? __bfloat162float(*static_cast<const bf16*>(dloss))
                                   : *static_cast<const float*>(dloss);
  const float scale = grad / float(n);
  bf16* d = dlogits + static_cast<std::int64_t>(blockIdx.x) * v;
  for (std::int64_t i = threadIdx.x; i < v; i += blockDim.x)
    d[i] = __float2bfloat16(scale * __bfloat162float(d[i]));
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

void cross_entropy_backward_p1(bf16* dlogits, const void* dloss, bool dloss_is_bf16, std::int64_t n,
                               std::int64_t v, cudaStream_t stream) {
  if (n == 0) return;
  launch(cross_entropy_backward_kernel, static_cast<unsigned>(n), kThreads, stream, dlogits, dloss,
         dloss_is_bf16, n, v);
}

}  // namespace pipeplan::cuda
