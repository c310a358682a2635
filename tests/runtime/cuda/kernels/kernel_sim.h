// Runs runtime/cuda's hand-written kernels on the CPU, so that CI (which has no GPU) checks their
// indexing and reductions against the CPU references, and the sanitizer build checks every
// memory access they make. Include this before a .cu file compiled as C++ (kernel_sources.cpp.in);
// common.cuh's launch() then calls sim::run instead of <<<>>>.
//
// What is modelled, and what is not:
// - A launch runs its blocks one after another, on the calling thread. A block's threads are
//   fibers (ucontext, each with its own stack) that run in turn, each until it reaches
//   __syncthreads (a barrier over the block), __shfl_xor_sync (a barrier over the warp) or its
//   end; a round in which no thread can go on is reported as a deadlock. Deterministic, and
//   cheap enough to run the GPU tests' shapes (ASan is told of every switch).
// - __shared__ is `static`: one copy per kernel, which is one per block since blocks never overlap.
// - A thread that returns leaves the block's barriers (as on sm_70 and later). A full-mask shuffle
//   in a warp that lost a lane, a partial warp, or any other mask is reported as an error.
// - atomicAdd is a relaxed atomic add. Kernels run one at a time (so a static __shared__ is never
//   shared by two launches from two host threads). Each launch goes to the launch hook where
//   one is set: the CPU stand-in for the CUDA runtime (../fake_device) checks its stream there
//   and runs it at once or queues it on that stream.
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

// The built-in variables of the running simulated thread (set by sim::run before each switch).
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

namespace pipeplan::cuda::sim {

// Launches a grid × block kernel on `stream` that runs `body` once per thread; throws
// std::runtime_error naming what a thread did wrong (a bad shuffle, an exception), after every
// thread has finished. Without a launch hook the kernel runs at once, on the calling thread.
// A launch whose shape no GPU can launch is refused here, at once.
void run(dim3 grid, dim3 block, cudaStream_t stream, std::function<void()> body);

// A launch hook is handed every launch: its stream and the kernel itself, to run now or later
// (a stand-in for a device's queue), on any thread; it may throw to refuse the launch. `body`
// must then own what it reads (launch() in common.cuh captures the kernel's arguments by value).
using LaunchHook = std::function<void(cudaStream_t stream, std::function<void()> kernel)>;
void set_launch_hook(LaunchHook hook);  // none by default

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
