// Device helpers shared by the kernels (included by .cu files only).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>

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

// W consecutive bf16 values moved as one access: W = 8 is one 16-byte load or store (a warp then
// moves 512 contiguous bytes per instruction instead of 64), W = 1 the scalar fallback for rows
// whose length or address is not a multiple of 16 bytes. The memory-bound kernels are templates
// on W and pick 8 where vectorizable() allows.
constexpr int kPack = 8;
template <int W>
struct alignas(W * sizeof(__nv_bfloat16)) Pack {
  __nv_bfloat16 v[W];
};

template <int W>
__device__ inline Pack<W> load_pack(const __nv_bfloat16* at) {
#ifdef PIPEPLAN_KERNEL_SIM
  // On the CPU: a misaligned vector access, which faults on the GPU, is reported, and the values
  // are copied one by one (no type punning).
  if (reinterpret_cast<std::uintptr_t>(at) % sizeof(Pack<W>) != 0) {
    throw std::runtime_error("misaligned pack load");
  }
  Pack<W> pack;
  for (int k = 0; k < W; ++k)
    pack.v[k] = at[k];
  return pack;
#else
  return *reinterpret_cast<const Pack<W>*>(at);
#endif
}

template <int W>
__device__ inline void store_pack(__nv_bfloat16* at, const Pack<W>& pack) {
#ifdef PIPEPLAN_KERNEL_SIM
  if (reinterpret_cast<std::uintptr_t>(at) % sizeof(Pack<W>) != 0) {
    throw std::runtime_error("misaligned pack store");
  }
  for (int k = 0; k < W; ++k)
    at[k] = pack.v[k];
#else
  *reinterpret_cast<Pack<W>*>(at) = pack;
#endif
}

// True when every pointer is 16-byte aligned and `length` (a row's or a whole tensor's element
// count) a multiple of kPack, so a kernel may move kPack values per access.
template <typename... Pointers>
inline bool vectorizable(std::int64_t length, const Pointers*... pointers) {
  const auto aligned = [](const void* p) {
    return p == nullptr || reinterpret_cast<std::uintptr_t>(p) % sizeof(Pack<kPack>) == 0;
  };
  return length % kPack == 0 && (aligned(pointers) && ...);
}

// Every kernel launch goes through here: `kernel` on `stream` with no dynamic shared memory,
// then the launch check. The one <<<>>> in the backend, so that the kernel tests can run the same
// kernels on the CPU (tests/runtime/cuda/kernels/kernel_sim.h defines PIPEPLAN_KERNEL_SIM).
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
            const Args&... args) {
#ifdef PIPEPLAN_KERNEL_SIM
  // By value: the simulator may run the kernel after this returns, as a GPU does.
  sim::run(grid, block, stream, [=] { kernel(args...); });
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

// Threads for a block that works on `items` (packs of a row, say): whole warps, enough for one
// item each, at most `most`.
inline int threads_for(std::int64_t items, int most) {
  const std::int64_t warps = (items + kWarp - 1) / kWarp;
  return static_cast<int>(std::min<std::int64_t>(most, std::max<std::int64_t>(1, warps) * kWarp));
}

}  // namespace pipeplan::cuda
