// Device helpers shared by the kernels (included by .cu files only).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "runtime/cuda/cuda_check.h"

namespace pipeplan::cuda {

constexpr int kWarp = 32;

__device__ inline float warp_sum(float value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ inline float warp_max(float value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats; the trailing barrier lets a caller reuse it at once.
__device__ inline float block_sum(float value, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  value = warp_sum(value);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  value = lane < warps ? scratch[lane] : 0.0f;
  value = warp_sum(value);
  __syncthreads();
  return value;
}

__device__ inline float block_max(float value, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  value = warp_max(value);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  value = lane < warps ? scratch[lane] : -INFINITY;
  value = warp_max(value);
  __syncthreads();
  return value;
}

// Every kernel launch goes through here: `kernel` on `stream` with no dynamic shared memory,
// then the launch check. The one <<<>>> in the backend, so that the kernel tests can run the same
// kernels on the CPU (tests/runtime/cuda/kernels/kernel_sim.h defines PIPEPLAN_KERNEL_SIM).
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
            const Args&... args) {
#ifdef PIPEPLAN_KERNEL_SIM
  sim::run(grid, block, stream, [&] { kernel(args...); });
#else
  // clang-format reads a .cuh as plain C++ and would split the >>>.
  // clang-format off
  kernel<<<grid, block, 0, stream>>>(args...);
  // clang-format on
  CUDA_CHECK_LAUNCH();
#endif
}

inline unsigned int grid_for(std::int64_t n, int threads) {
  return static_cast<unsigned int>((n + threads - 1) / threads);
}

}  // namespace pipeplan::cuda
