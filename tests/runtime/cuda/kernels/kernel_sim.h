// Runs runtime/cuda's hand-written kernels on the CPU, so that CI (which has no GPU) checks their
// indexing and reductions against the CPU references, and the sanitizer build checks every
// memory access they make. Include this before a .cu file compiled as C++ (kernel_sources.cpp.in);
// common.cuh's launch() then calls sim::run instead of <<<>>>.
//
// What is modelled, and what is not:
// - A launch runs its blocks one after another; a block runs its threads as OS threads, so
//   __syncthreads is a barrier over the block and __shfl_xor_sync a barrier over the warp.
// - __shared__ is `static`: one copy per kernel, which is one per block since blocks never overlap.
// - A thread that returns leaves the block's barriers (as on sm_70 and later). A full-mask shuffle
//   in a warp that lost a lane, a partial warp, or any other mask is reported as an error.
// - atomicAdd is a relaxed atomic add; launches are synchronous; streams are ignored.
// - Not modelled: memory ordering weaker than C++'s, warp-synchronous code without shuffles,
//   timing, occupancy and dynamic shared memory (no kernel here uses them).
#pragma once

#define PIPEPLAN_KERNEL_SIM 1

#include <cmath>
#include <functional>

#include <cuda_bf16.h>     // host conversions only
#include <cuda_runtime.h>  // dim3, uint3, cudaStream_t: types only, nothing links libcudart

#undef __shared__
#define __shared__ static

// The built-in variables of the running thread (per OS thread; set by sim::run).
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

namespace pipeplan::cuda::sim {

// Runs `body` once per thread of a grid × block launch; throws std::runtime_error naming what a
// thread did wrong (a bad shuffle, an exception), after every thread has finished.
void run(dim3 grid, dim3 block, const std::function<void()>& body);

void syncthreads();
float shfl_xor(unsigned int mask, float value, int lane_mask);

}  // namespace pipeplan::cuda::sim

// NOLINTBEGIN(bugprone-reserved-identifier): the CUDA names the kernels call.
inline void __syncthreads() {
  pipeplan::cuda::sim::syncthreads();
}
inline float __shfl_xor_sync(unsigned int mask, float value, int lane_mask) {
  return pipeplan::cuda::sim::shfl_xor(mask, value, lane_mask);
}
float atomicAdd(float* address, float value);

namespace pipeplan::cuda {
// Device math the host library lacks (found before any global declaration from CUDA's headers).
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
inline float __expf(float x) {
  return std::exp(x);
}
}  // namespace pipeplan::cuda
// NOLINTEND(bugprone-reserved-identifier)
