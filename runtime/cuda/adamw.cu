// AdamW (Loshchilov & Hutter) on fp32 master weights and moments; writes the bf16 weights the
// GEMMs read. Same arithmetic as runtime/cpu/adamw.cpp, in fp32.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace pipeplan::cuda {

namespace {

__global__ void adamw_kernel(float* master, float* m, float* v, const float* grad, bf16* weight,
                             std::int64_t n, AdamWStep step) {
  const std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = grad[i];
  const float m_new = step.beta1 * m[i] + (1.0f - step.beta1) * g;
  const float v_new = step.beta2 * v[i] + (1.0f - step.beta2) * g * g;
  const float m_hat = m_new / step.m_correction;
  const float v_hat = v_new / step.v_correction;
  const float w = master[i];
  const float updated = w - step.lr * (m_hat / (sqrtf(v_hat) + step.eps) + step.weight_decay * w);
  m[i] = m_new;
  v[i] = v_new;
  master[i] = updated;
  weight[i] = __float2bfloat16(updated);
}

}  // namespace

void adamw_update(float* master, float* m, float* v, const float* grad, bf16* weight,
                  std::int64_t n, const AdamWStep& step, cudaStream_t stream) {
  if (n == 0) return;
  launch(adamw_kernel, grid_for(n, 256), 256, stream, master, m, v, grad, weight, n, step);
}

}  // namespace pipeplan::cuda
