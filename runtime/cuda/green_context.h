// One GPU as several pipeline stages (BRIEF §4): a CUDA green context owns a partition of the
// SMs (Hopper: multiples of 8, at least 8); kernels on its stream run on those SMs only. HBM
// bandwidth and L2 stay shared, so a profile taken inside one is an *emulated* stage's profile.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

namespace pipeplan::cuda {

class GreenContext {
 public:
  // Throws Error when the device cannot give `sm_count` SMs (rounded up by the driver to its
  // granularity) or the driver lacks green contexts (CUDA < 12.4).
  GreenContext(int device, int sm_count);
  ~GreenContext();
  GreenContext(const GreenContext&) = delete;
  GreenContext& operator=(const GreenContext&) = delete;

  cudaStream_t stream() const { return stream_; }
  int sm_count() const { return sm_count_; }  // what the driver actually granted

 private:
  CUgreenCtx green_ = nullptr;
  CUcontext context_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int sm_count_ = 0;
};

}  // namespace pipeplan::cuda
