// SwiGLU gate (Shazeer 2020): h = silu(gate) ⊙ up and its p1; the three GEMMs are in block.cpp.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace pipeplan::cuda {

namespace {

__global__ void swiglu_forward_kernel(bf16* h, const bf16* gate, const bf16* up, std::int64_t n) {
  const std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float z = __bfloat162float(gate[i]);
  const float silu = z / (1.0f + __expf(-z));
  h[i] = __float2bfloat16(silu * __bfloat162float(up[i]));
}

__global__ void swiglu_backward_p1_kernel(bf16* dgate, bf16* dup, const bf16* dh, const bf16* gate,
                                          const bf16* up, std::int64_t n) {
  const std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float z = __bfloat162float(gate[i]);
  const float s = 1.0f / (1.0f + __expf(-z));
  const float grad = __bfloat162float(dh[i]);
  // d silu(z)/dz = s · (1 + z · (1 − s))
  dgate[i] = __float2bfloat16(grad * __bfloat162float(up[i]) * s * (1.0f + z * (1.0f - s)));
  dup[i] = __float2bfloat16(grad * z * s);
}

}  // namespace

void swiglu_forward(bf16* h, const bf16* gate, const bf16* up, std::int64_t n,
                    cudaStream_t stream) {
  if (n == 0) return;
  launch(swiglu_forward_kernel, grid_for(n, 256), 256, stream, h, gate, up, n);
}

void swiglu_backward_p1(bf16* dgate, bf16* dup, const bf16* dh, const bf16* gate, const bf16* up,
                        std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(swiglu_backward_p1_kernel, grid_for(n, 256), 256, stream, dgate, dup, dh, gate, up, n);
}

}  // namespace pipeplan::cuda
