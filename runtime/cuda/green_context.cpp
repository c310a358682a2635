#include "runtime/cuda/green_context.h"

#include <string>

#include "runtime/cuda/cuda_check.h"

namespace pipeplan::cuda {

namespace {

// Driver entry points fetched through the runtime: linking libcuda directly would stop every
// binary (the CLI, the tests) from starting on a machine without a GPU driver.
template <typename Fn>
Fn driver_function(const char* symbol, int version = 12040) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult status{};
  CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &function, static_cast<unsigned>(version),
                                              cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || function == nullptr) {
    throw Error(std::string("the CUDA driver lacks ") + symbol + " (green contexts need 12.4+)");
  }
  return reinterpret_cast<Fn>(function);
}

#define PIPEPLAN_DRIVER(name) driver_function<decltype(&name)>(#name)

}  // namespace

const char* driver_error_string(CUresult status) {
  const char* message = nullptr;
  try {
    if (PIPEPLAN_DRIVER(cuGetErrorString)(status, &message) != CUDA_SUCCESS) message = nullptr;
  } catch (const Error&) {
    message = nullptr;
  }
  return message != nullptr ? message : "unknown driver error";
}

GreenContext::GreenContext(int device, int sm_count) {
  if (sm_count <= 0) throw Error("--sm-partition: must be a positive SM count");
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaFree(nullptr));  // initialises the runtime and the driver
  CUdevice dev = 0;
  CU_CHECK(PIPEPLAN_DRIVER(cuDeviceGet)(&dev, device));
  CUdevResource all{};
  CU_CHECK(PIPEPLAN_DRIVER(cuDeviceGetDevResource)(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  if (static_cast<unsigned>(sm_count) > all.sm.smCount) {
    throw Error("--sm-partition " + std::to_string(sm_count) + ": the device has only " +
                std::to_string(all.sm.smCount) + " SMs");
  }
  CUdevResource part{}, remaining{};
  unsigned int groups = 1;
  CU_CHECK(PIPEPLAN_DRIVER(cuDevSmResourceSplitByCount)(&part, &groups, &all, &remaining, 0,
                                                        static_cast<unsigned>(sm_count)));
  if (groups != 1) throw Error("--sm-partition: the driver made no SM partition");
  sm_count_ = static_cast<int>(part.sm.smCount);
  CUdevResourceDesc desc = nullptr;
  CU_CHECK(PIPEPLAN_DRIVER(cuDevResourceGenerateDesc)(&desc, &part, 1));
  CU_CHECK(PIPEPLAN_DRIVER(cuGreenCtxCreate)(&green_, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  // Runtime-API calls (cuBLAS, kernel launches) use the current context: make it this one.
  CU_CHECK(PIPEPLAN_DRIVER(cuCtxFromGreenCtx)(&context_, green_));
  CU_CHECK(PIPEPLAN_DRIVER(cuCtxSetCurrent)(context_));
  CUstream stream = nullptr;
  CU_CHECK(PIPEPLAN_DRIVER(cuGreenCtxStreamCreate)(&stream, green_, CU_STREAM_NON_BLOCKING, 0));
  stream_ = stream;
}

GreenContext::~GreenContext() {
  // Destructors do not throw: failures here are left for the next checked call to report.
  try {
    if (stream_ != nullptr) PIPEPLAN_DRIVER(cuStreamDestroy)(stream_);
    if (green_ != nullptr) PIPEPLAN_DRIVER(cuGreenCtxDestroy)(green_);
  } catch (const Error&) {
  }
}

}  // namespace pipeplan::cuda
