// What `pipeplan env` asks the CUDA module (GpuPlugin::environment, runtime/gpu_plugin.h): the
// visible GPUs, and which CUDA libraries the module runs on, from where, at which version.
#pragma once

#include "runtime/gpu_plugin.h"

namespace pipeplan::cuda {

// Never throws for a missing driver, GPU or cuDNN: GpuEnvironment says what is missing. Loads
// cuDNN as fused attention does (PIPEPLAN_CUDNN_LIBRARY honoured) when the module has it.
GpuEnvironment query_environment();

}  // namespace pipeplan::cuda
