// A CPU stand-in for the parts of the CUDA runtime, driver, cuBLAS, cuBLASLt and NCCL that
// runtime/cuda calls, so that the GPU tests (tests/runtime/cuda/*.cpp) run in CI, where there is no
// GPU, on the real backend code: its host side, its hand-written kernels (through
// ../kernels/kernel_sim.h), its GEMMs (fp32 loops here) and its NCCL transport (communicators in
// one process). Linked instead of libcudart, libcublas, libcublasLt and libnccl.
//
// One device, shaped like an H100 SXM (132 SMs, 80 GiB, compute capability 9.0; its name,
// kDefaultDeviceName, contains "H100" so that the backend picks that gpus.json entry), which
// set_device_count can report as several. "Device" memory is host memory, so ASan sees every
// access. Times mean nothing.
//
// When queued work runs, in one of two orders (both legal CUDA schedules):
// - copies deferred (the default): kernels, GEMMs and memsets run when they are queued (a GPU that
//   is infinitely fast); device-to-device copies (cudaMemcpyAsync, cudaMemcpyBatchAsync) run only
//   when something must follow them, namely later work on their stream, a wait on or a
//   synchronisation with an event recorded after them, a synchronisation of their stream or the
//   device, or cudaFree. A reader on another stream that does not wait for a copy (the
//   transports' copies between stages) reads stale memory.
// - all deferred (set_all_work_deferred, or PIPEPLAN_FAKE_DEVICE_ORDER=deferred in the
//   environment): kernels, GEMMs and memsets too wait on their stream until something must follow
//   them. A stream that waits on an event runs the work the event follows at that moment, so
//   whatever another stream reads without such a wait has not been written yet: a missing wait
//   between two streams of kernels (a stage's stream and its side stream, say) or a block reused
//   on another stream without one shows as wrong results. Copies to or from the host run at once,
//   after their stream's queue (the host may reuse a pageable source as soon as the call
//   returns).
// So the tests check the order between streams, not only what the backend computes.
//
// NCCL's sends and receives are deferred work in both orders. A send is not ready until its
// receive is posted (nccl.h: a send is blocking for the GPU), so a send nobody receives holds its
// stream; when it runs, it reads its buffer into a message to its peer. A receive, when it runs,
// takes the message of the matching send (the k-th receive from a peer matches its k-th send),
// first running the sender's stream up to that send. Until that send has been queued the receive
// is not ready: it stays queued, and so does everything behind it on its stream. Then an event
// recorded after it is not ready (cudaEventQuery), a stream that waits on that event queues the
// wait, work queued behind it waits in either order, and synchronisations (and cudaFree, and
// destroying the stream) wait until it has run. Calls in a group are issued at its outermost end,
// sends first. Every rank is on the one GPU, so a communicator of several ranks needs what NCCL
// needs for that (NCCL 2.30+, whose version set_nccl_version sets, and
// NCCL_MULTI_RANK_GPU_ENABLE=1). A receive whose byte count differs from its send's stays pending
// with an asynchronous error; ncclCommAbort completes what is queued on the communicator without
// moving data. A nonblocking communicator (ncclConfig_t:: blocking = 0) is ncclInProgress until all
// its ranks have joined (or made the split that makes it) and until each peer it called has called
// it back; the call that leaves it so returns ncclInProgress.
//
// It enforces the CUDA rules the backend is written against, each a call that fails with an
// error naming the rule (the driver would fail, or silently misbehave):
// - an event is recorded only on a stream of the context the event was created in;
// - a stream waits only on an event already recorded (a GPU takes a wait on an event never
//   recorded and orders nothing: a lost dependency, silently);
// - kernels, copies, memsets and cuBLAS calls go to a stream of the calling thread's current
//   context (the backend pushes a stage's context around every call);
// - a green context is current on at most one thread at a time (driver documentation of
//   cuGreenCtxCreate: "a green context can be current to only one thread at a time");
// - cudaFree and cudaFreeHost take only what cudaMalloc and cudaMallocHost gave;
// - several NCCL ranks on one GPU need NCCL 2.30+ and NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL refuses
//   a GPU taken twice), and NCCL's sends and receives obey the kernels' rule above;
// - a nonblocking communicator in progress takes no send, receive or split until
//   ncclCommGetAsyncError has seen it settle (NCCL: poll its state until ncclSuccess first);
// - a communicator is destroyed only once its calls have run, or after ncclCommFinalize or
//   ncclCommAbort (NCCL's destroy would wait for them without bound).
#pragma once

#include <cstdint>
#include <string>

namespace pipeplan::fake_cuda {

// What the stand-in has counted since the process started (tests read it).
struct Counters {
  std::int64_t launches = 0;     // kernels run through kernel_sim
  std::int64_t gemms = 0;        // cuBLASLt and batched cuBLAS calls
  std::int64_t live_device = 0;  // cudaMalloc'd bytes not yet freed
  std::int64_t rule_errors = 0;  // calls refused for breaking one of the rules above
};
Counters counters();

// The last rule a call broke, in words ("" if none): tests check the message.
std::string last_rule_error();

inline constexpr const char* kDefaultDeviceName = "fake_device: CPU stand-in shaped like an H100";

// The name cudaGetDeviceProperties reports from now on ("" restores the default).
void set_device_name(const std::string& name);

// The number of devices cudaGetDeviceCount reports from now on (1 at the start; below 1 restores
// it). Every ordinal is the one stand-in device: cudaSetDevice, cudaGetDevice and
// cudaGetDeviceProperties take each of them, and share its memory, streams and contexts.
void set_device_count(int count);

// cudaMalloc fails (cudaErrorMemoryAllocation) where the device bytes live would pass `bytes`
// from now on; 0 (the start) lifts the limit.
void set_device_memory_limit(std::int64_t bytes);

// Whether kernels, GEMMs and memsets wait on their stream like copies do (the "all deferred"
// order above). Starts as PIPEPLAN_FAKE_DEVICE_ORDER says ("deferred", or "copies", the default);
// a change applies to work queued from then on.
void set_all_work_deferred(bool deferred);
bool all_work_deferred();

// Sets the order (set_all_work_deferred) for one scope, then restores the one before.
class AllWorkDeferred {
 public:
  explicit AllWorkDeferred(bool deferred) : before_(all_work_deferred()) {
    set_all_work_deferred(deferred);
  }
  AllWorkDeferred(const AllWorkDeferred&) = delete;
  AllWorkDeferred& operator=(const AllWorkDeferred&) = delete;
  ~AllWorkDeferred() { set_all_work_deferred(before_); }

 private:
  bool before_;
};

// Communicators finalized (ncclCommFinalize), destroyed and aborted since the process started.
struct NcclCounts {
  std::int64_t finalized = 0;
  std::int64_t destroyed = 0;
  std::int64_t aborted = 0;
};
NcclCounts nccl_counts();

// The version ncclGetVersion reports from now on (NCCL_VERSION(2, 31, 2) = 23102 by default; 0
// restores it). Built where NCCL's header is found (CMakeLists.txt).
void set_nccl_version(int code);

}  // namespace pipeplan::fake_cuda
