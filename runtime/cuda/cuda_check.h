// One error-check macro per library (llm.c, NCCL): each names the file, the line, the call and
// the library's own error string, and throws pipeplan::Error so the CLI prints one line.
#pragma once

#include <string>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include "planner/base/error.h"

namespace pipeplan::cuda {

[[noreturn]] inline void throw_failure(const char* library, const char* message, const char* call,
                                       const char* file, int line) {
  throw Error(std::string(library) + " error '" + message + "' in " + call + " at " + file + ":" +
              std::to_string(line));
}

// The driver's message for `status` (green_context.cpp; the driver is reached through
// cudaGetDriverEntryPointByVersion, so nothing links libcuda and CPU-only machines run).
const char* driver_error_string(CUresult status);

}  // namespace pipeplan::cuda

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    const cudaError_t pipeplan_status_ = (call);                                           \
    if (pipeplan_status_ != cudaSuccess) {                                                 \
      ::pipeplan::cuda::throw_failure("CUDA", cudaGetErrorString(pipeplan_status_), #call, \
                                      __FILE__, __LINE__);                                 \
    }                                                                                      \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, asynchronous faults at the
// next synchronising call.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                                      \
  do {                                                                                          \
    const cublasStatus_t pipeplan_status_ = (call);                                             \
    if (pipeplan_status_ != CUBLAS_STATUS_SUCCESS) {                                            \
      ::pipeplan::cuda::throw_failure("cuBLAS", cublasGetStatusString(pipeplan_status_), #call, \
                                      __FILE__, __LINE__);                                      \
    }                                                                                           \
  } while (0)

#define CU_CHECK(call)                                                                         \
  do {                                                                                         \
    const CUresult pipeplan_status_ = (call);                                                  \
    if (pipeplan_status_ != CUDA_SUCCESS) {                                                    \
      ::pipeplan::cuda::throw_failure("CUDA driver",                                           \
                                      ::pipeplan::cuda::driver_error_string(pipeplan_status_), \
                                      #call, __FILE__, __LINE__);                              \
    }                                                                                          \
  } while (0)

// NCCL_CHECK needs <nccl.h>; the transports that use NCCL include it before this header.
#define NCCL_CHECK(call)                                                                   \
  do {                                                                                     \
    const ncclResult_t pipeplan_status_ = (call);                                          \
    if (pipeplan_status_ != ncclSuccess) {                                                 \
      ::pipeplan::cuda::throw_failure("NCCL", ncclGetErrorString(pipeplan_status_), #call, \
                                      __FILE__, __LINE__);                                 \
    }                                                                                      \
  } while (0)
