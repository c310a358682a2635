// What `pipeplan env` asks the CUDA module (GpuPlugin::environment, runtime/gpu_plugin.h): the
// visible GPUs, and which CUDA libraries the module runs on, from where, at which version.
#pragma once

#include <string>

#include "runtime/gpu_plugin.h"

namespace pipeplan::cuda {

// Never throws for a missing driver, GPU or cuDNN: GpuEnvironment says what is missing. Loads
// cuDNN as fused attention does (PIPEPLAN_CUDNN_LIBRARY honoured) when the module has it.
GpuEnvironment query_environment();

// The NCCL this module runs on: its version (ncclGetVersion) and the file it was loaded from;
// `error` says why there is none (built without NCCL).
GpuLibraryInfo loaded_nccl();
// "NCCL 2.32.3 from /path/libnccl.so.2", for run headers; "NCCL (not built)" without it.
std::string loaded_nccl_text();

}  // namespace pipeplan::cuda
