// One GPU as several pipeline stages: a CUDA green context owns a partition of the
// SMs (Hopper: multiples of 8, at least 8); kernels on its stream run on those SMs only. HBM
// bandwidth and L2 stay shared, so a profile taken inside one is an *emulated* stage's profile.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

namespace pipeplan::cuda {

class GreenContext {
 public:
  // Throws Error when the device cannot give `sm_count` SMs (rounded up by the driver to its
  // granularity) or the driver lacks green contexts (CUDA < 12.4).
  GreenContext(int device, int sm_count);
  // `parts` disjoint partitions of `sm_per_part` SMs each, split from the device in one call (so
  // no two share an SM): one per emulated pipeline stage. Throws Error when the driver cannot.
  static std::vector<std::unique_ptr<GreenContext>> partition(int device, int parts,
                                                              int sm_per_part);
  ~GreenContext();
  GreenContext(const GreenContext&) = delete;
  GreenContext& operator=(const GreenContext&) = delete;

  cudaStream_t stream() const { return stream_; }
  int sm_count() const { return sm_count_; }      // what the driver actually granted
  CUcontext context() const { return context_; }  // for ScopedContext
  // Makes this the calling thread's current context (as the one-partition constructor leaves
  // it), after something made another one current (partition() and cudaSetDevice make the
  // device's primary context current). Returns false where the driver refused.
  bool make_current() const noexcept;
  // One more stream whose work runs on this partition's SMs (an emulated stage's transfer
  // streams), of the given priority (cudaDeviceGetStreamPriorityRange; 0 is the default); owned
  // by the green context, destroyed with it.
  cudaStream_t create_stream(int priority = 0);

 private:
  GreenContext() = default;
  void create(CUdevice dev, CUdevResource part);

  CUgreenCtx green_ = nullptr;
  CUcontext context_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaStream_t> extra_streams_;  // create_stream holds api_mutex_
  std::recursive_mutex api_mutex_;           // ScopedContext's lock for this context
  // Takes the context out of ScopedContext's registry when this goes, also when a constructor
  // throws after create() registered it (members are destroyed then; the destructor does not run).
  struct Registration {
    CUcontext context = nullptr;
    Registration() = default;
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;
    ~Registration();
  } registration_;
  int sm_count_ = 0;
};

// A new event in the context `stream` belongs to: cuEventRecord wants event and stream from one
// context, and a green context's streams belong to it, not to the primary context a thread has
// after cudaSetDevice. `flags` as cudaEventCreateWithFlags.
cudaEvent_t create_event_for(cudaStream_t stream, unsigned int flags);

// The context a stream belongs to (cuStreamGetCtx): for a stream made by
// cuGreenCtxStreamCreate, its green context's. Null for the null stream.
CUcontext context_of(cudaStream_t stream);

// Makes `context` current on this thread for its lifetime (cuCtxPushCurrent / cuCtxPopCurrent).
// For a green context it also holds that context's lock (recursive) for its lifetime: the
// driver wants a green context current on one thread at a time and does not synchronise API
// calls that reach one from several threads, while an emulated stage has several (compute, send,
// receive). So every API call on a stage's streams or events goes inside one of these: the
// backend's calls (StageBackend in cuda_run.cpp), the step's event records (StepEvents), the
// device-local transport's records, waits and copies. Blocking waits stay outside
// (cudaEventSynchronize), and during a step the backend's calls only queue work. A null context
// does nothing.
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext context);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  std::unique_lock<std::recursive_mutex> lock_;  // a member: released after the destructor's pop
  bool pushed_ = false;
};

}  // namespace pipeplan::cuda
