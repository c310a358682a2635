#include "runtime/cuda/green_context.h"

#include <map>
#include <string>

#include <cudaTypedefs.h>

#include "runtime/cuda/cuda_check.h"

namespace pipeplan::cuda {

namespace {

// Driver entry points fetched through the runtime: linking libcuda directly would stop every
// binary (the CLI, the tests) from starting on a machine without a GPU driver. Asked for at the
// version of the cuda.h compiled against (CUDA_VERSION), so each symbol resolves to the ABI its
// prototype here declares; an older version fails for functions added later (cuGreenCtxStreamCreate
// is 12.5's, so asking at 12.4 answers "version not sufficient"). That holds for every function
// fetched through PIPEPLAN_DRIVER (cudaTypedefs.h lists no ABI of theirs newer than cuda.h's
// prototype); cuStreamGetCtx has one (12.5's three-argument form), so it is fetched by its
// explicit typedef and version.
template <typename Fn>
Fn driver_function(const char* symbol, int version = CUDA_VERSION) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult status{};
  CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &function, static_cast<unsigned>(version),
                                              cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || function == nullptr) {
    throw Error(std::string("the CUDA driver lacks ") + symbol + " at version " +
                std::to_string(version) + " (green contexts need a CUDA 12.5+ driver)");
  }
  return reinterpret_cast<Fn>(function);
}

// Looked up once per call site (ScopedContext pushes and pops on every backend call).
#define PIPEPLAN_DRIVER(name)                                             \
  ([] {                                                                   \
    static const auto function = driver_function<decltype(&name)>(#name); \
    return function;                                                      \
  }())

// The locks of the live green contexts, by their CUcontext (ScopedContext finds them here).
struct Registry {
  std::mutex mutex;
  std::map<CUcontext, std::recursive_mutex*> locks;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: used by destructors at exit
  return *r;
}

std::recursive_mutex* lock_of(CUcontext context) {
  Registry& r = registry();
  const std::lock_guard guard(r.mutex);
  const auto it = r.locks.find(context);
  return it != r.locks.end() ? it->second : nullptr;
}

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
  if (sm_count <= 0) throw FieldError("sm_partition", "must be a positive SM count");
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaFree(nullptr));  // initialises the runtime and the driver
  CUdevice dev = 0;
  CU_CHECK(PIPEPLAN_DRIVER(cuDeviceGet)(&dev, device));
  CUdevResource all{};
  CU_CHECK(PIPEPLAN_DRIVER(cuDeviceGetDevResource)(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  if (static_cast<unsigned>(sm_count) > all.sm.smCount) {
    throw FieldError("sm_partition", std::to_string(sm_count) + " SMs, but the device has only " +
                                         std::to_string(all.sm.smCount) + " SMs");
  }
  CUdevResource part{}, remaining{};
  unsigned int groups = 1;
  CU_CHECK(PIPEPLAN_DRIVER(cuDevSmResourceSplitByCount)(&part, &groups, &all, &remaining, 0,
                                                        static_cast<unsigned>(sm_count)));
  if (groups != 1) throw FieldError("sm_partition", "the driver made no SM partition");
  create(dev, part);
  // Runtime-API calls (cuBLAS, kernel launches) use the current context: make it this one.
  CU_CHECK(PIPEPLAN_DRIVER(cuCtxSetCurrent)(context_));
}

bool GreenContext::make_current() const noexcept {
  try {
    return PIPEPLAN_DRIVER(cuCtxSetCurrent)(context_) == CUDA_SUCCESS;
  } catch (const Error&) {
    return false;
  }
}

void GreenContext::create(CUdevice dev, CUdevResource part) {
  sm_count_ = static_cast<int>(part.sm.smCount);
  CUdevResourceDesc desc = nullptr;
  CU_CHECK(PIPEPLAN_DRIVER(cuDevResourceGenerateDesc)(&desc, &part, 1));
  CU_CHECK(PIPEPLAN_DRIVER(cuGreenCtxCreate)(&green_, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  CU_CHECK(PIPEPLAN_DRIVER(cuCtxFromGreenCtx)(&context_, green_));
  {
    Registry& r = registry();
    const std::lock_guard guard(r.mutex);
    r.locks[context_] = &api_mutex_;
  }
  registration_.context = context_;
  CUstream stream = nullptr;
  CU_CHECK(PIPEPLAN_DRIVER(cuGreenCtxStreamCreate)(&stream, green_, CU_STREAM_NON_BLOCKING, 0));
  stream_ = stream;
}

std::vector<std::unique_ptr<GreenContext>> GreenContext::partition(int device, int parts,
                                                                   int sm_per_part) {
  if (parts <= 0 || sm_per_part <= 0) {
    throw FieldError("emulate", "needs a positive stage count and SM share");
  }
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaFree(nullptr));  // initialises the runtime and the primary context
  CUdevice dev = 0;
  CU_CHECK(PIPEPLAN_DRIVER(cuDeviceGet)(&dev, device));
  CUdevResource all{};
  CU_CHECK(PIPEPLAN_DRIVER(cuDeviceGetDevResource)(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  std::vector<CUdevResource> groups(static_cast<std::size_t>(parts));
  CUdevResource remaining{};
  auto made = static_cast<unsigned int>(parts);
  CU_CHECK(PIPEPLAN_DRIVER(cuDevSmResourceSplitByCount)(groups.data(), &made, &all, &remaining, 0,
                                                        static_cast<unsigned>(sm_per_part)));
  if (made != static_cast<unsigned int>(parts)) {
    throw FieldError("emulate", std::to_string(parts) + " stages: the driver split the device's " +
                                    std::to_string(all.sm.smCount) + " SMs into only " +
                                    std::to_string(made) + " partitions of " +
                                    std::to_string(sm_per_part));
  }
  std::vector<std::unique_ptr<GreenContext>> contexts;
  for (const CUdevResource& group : groups) {
    std::unique_ptr<GreenContext> context(new GreenContext());
    context->create(dev, group);
    contexts.push_back(std::move(context));
  }
  return contexts;
}

CUcontext context_of(cudaStream_t stream) {
  if (stream == nullptr) return nullptr;
  // Not remembered: a destroyed stream's handle may come back for another context's stream.
  static const auto stream_context =
      driver_function<PFN_cuStreamGetCtx_v9020>("cuStreamGetCtx", 9020);
  CUcontext context = nullptr;
  CU_CHECK(stream_context(stream, &context));
  return context;
}

cudaEvent_t create_event_for(cudaStream_t stream, unsigned int flags) {
  const ScopedContext current(context_of(stream));
  cudaEvent_t event = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&event, flags));
  return event;
}

ScopedContext::ScopedContext(CUcontext context) {
  if (context == nullptr) return;
  if (std::recursive_mutex* lock = lock_of(context)) lock_ = std::unique_lock(*lock);
  CU_CHECK(PIPEPLAN_DRIVER(cuCtxPushCurrent)(context));
  pushed_ = true;
}

ScopedContext::~ScopedContext() {
  if (!pushed_) return;
  CUcontext popped = nullptr;
  try {
    PIPEPLAN_DRIVER(cuCtxPopCurrent)(&popped);
  } catch (const Error&) {
  }
}

cudaStream_t GreenContext::create_stream(int priority) {
  // Transports make streams from their send threads: the driver call reaches this green context.
  const std::lock_guard api(api_mutex_);
  CUstream stream = nullptr;
  // Green-context streams must be non-blocking (driver documentation of cuGreenCtxStreamCreate).
  CU_CHECK(
      PIPEPLAN_DRIVER(cuGreenCtxStreamCreate)(&stream, green_, CU_STREAM_NON_BLOCKING, priority));
  extra_streams_.push_back(stream);
  return stream;
}

GreenContext::Registration::~Registration() {
  if (context == nullptr) return;
  Registry& r = registry();
  const std::lock_guard guard(r.mutex);
  r.locks.erase(context);
}

GreenContext::~GreenContext() {
  // Destructors do not throw: failures here are left for the next checked call to report.
  try {
    // Made current by the one-partition constructor: this thread goes back to no context (the
    // runtime's primary one on its next call) rather than keep a destroyed one current.
    CUcontext current = nullptr;
    if (context_ != nullptr && PIPEPLAN_DRIVER(cuCtxGetCurrent)(&current) == CUDA_SUCCESS &&
        current == context_) {
      PIPEPLAN_DRIVER(cuCtxSetCurrent)(nullptr);
    }
    for (cudaStream_t extra : extra_streams_)
      PIPEPLAN_DRIVER(cuStreamDestroy)(extra);
    if (stream_ != nullptr) PIPEPLAN_DRIVER(cuStreamDestroy)(stream_);
    if (green_ != nullptr) PIPEPLAN_DRIVER(cuGreenCtxDestroy)(green_);
  } catch (const Error&) {
  }
}

}  // namespace pipeplan::cuda
