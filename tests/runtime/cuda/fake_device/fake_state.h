// The stand-in's objects and shared state (fake_device.h says what it models), used by
// fake_runtime.cpp (runtime and driver) and fake_cublas.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include <cuda.h>
#include <cuda_runtime.h>

#include "tests/runtime/cuda/fake_device/fake_device.h"

// The driver's opaque handle types, defined here (the headers leave them incomplete).
struct CUctx_st {
  bool green = false;
  unsigned int sms = 0;
  std::string name;
  std::mutex mutex;
  std::set<std::thread::id> current_on;  // threads whose current context this is
};

struct CUstream_st {
  CUctx_st* context = nullptr;
  int priority = 0;  // as created (cudaStreamGetPriority reads it back)
  // Work queued on the stream and not run yet (fake_device.h: copies, or all work), each with its
  // number in the stream's order; `queued` numbers the stream's deferred work so far.
  std::mutex mutex;
  std::deque<std::pair<std::int64_t, std::function<void()>>> deferred;
  std::int64_t queued = 0;
};

struct CUevent_st {
  CUctx_st* context = nullptr;
  unsigned int flags = 0;
  std::atomic<bool> recorded = false;  // recorded on one thread, waited on from another
  std::chrono::steady_clock::time_point at{};
  // What the last record follows: the deferred work of `stream` up to number `upto`.
  CUstream_st* stream = nullptr;
  std::int64_t upto = 0;
};

struct CUgreenCtx_st {
  CUctx_st context;
};

struct CUdevResourceDesc_st {
  unsigned int sms = 0;
};

namespace pipeplan::fake_cuda {

inline constexpr unsigned int kDeviceSms = 132;     // an H100 SXM's count
inline constexpr unsigned int kPartitionStep = 8;   // Hopper's SM partition granularity
inline constexpr int kGreatestStreamPriority = -5;  // an H100's; the least is 0

CUctx_st* current_context();                // the calling thread's (the primary if none was set)
CUctx_st* context_of(cudaStream_t stream);  // the null stream: the current context

// Records that a rule was broken (fake_device.h): counted, kept for last_rule_error() and for
// the error string of `status` on this thread; returns the message.
std::string break_rule(const std::string& message, int status);
// The message of the last rule this thread broke with `status`, or null.
const char* rule_message_for(int status);

// Kernel launches and cuBLAS calls: the stream must be the current context's (CUDA programming
// guide, "Stream and Event Behavior": a launch to a stream not associated with the current device
// fails). Returns "" or the broken rule's message, recorded with `status` (the error the caller
// returns).
std::string check_launch_stream(cudaStream_t stream, const char* call, int status);

void count_launch();
void count_gemm();

// Runs the work deferred on `stream` (the null stream: on every stream), in order, up to number
// `upto`: what a wait on an event, a synchronisation or work queued after them on that stream
// needs done first.
void run_deferred(cudaStream_t stream, std::int64_t upto = INT64_MAX);

// Queues `work` on `stream` to run when something must follow it (run_deferred); on the null
// stream, runs it now, after everything queued on the device.
void defer(cudaStream_t stream, std::function<void()> work);

// A kernel, GEMM or memset on `stream` (checked by check_launch_stream): deferred in the "all
// deferred" order, else run now, after the copies deferred before it on its stream. It must own
// what it reads but device memory; it runs on whichever thread makes it run.
void run_or_defer(cudaStream_t stream, std::function<void()> work);

}  // namespace pipeplan::fake_cuda
