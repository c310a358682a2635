// The GPU profiler behind `pipeplan profile --backend cuda`: runs each layer kind of the model
// (embedding, one block, head) on the CUDA backend at each micro-batch size and writes the
// planner's Profile (profiles/profile.h) with measured times and allocator-counted bytes. The
// CLI reaches it through the plugin boundary (runtime/gpu_plugin.h).
#pragma once

#include "profiles/profile.h"
#include "runtime/gpu_plugin.h"

namespace pipeplan::cuda {

// Throws Error("no CUDA device found") without a GPU.
Profile measure_profile(const GpuProfileOptions& options);

}  // namespace pipeplan::cuda
