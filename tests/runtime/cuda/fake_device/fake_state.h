// The stand-in's objects and shared state (fake_device.h says what it models), used by
// fake_runtime.cpp (runtime and driver), fake_cublas.cpp and fake_nccl.cpp.
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
  // number in the stream's order; `queued` numbers the stream's deferred work so far, and `ran` is
  // the number up to which all of it has run (read without the lock). Work returns false when it
  // cannot run yet (not ready): it stays at the front, and everything behind it waits.
  std::mutex mutex;
  std::deque<std::pair<std::int64_t, std::function<bool()>>> deferred;
  std::int64_t queued = 0;
  std::atomic<std::int64_t> ran = 0;
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
// needs done first. Returns whether it got there (false: work that is not ready stopped it).
bool run_deferred(cudaStream_t stream, std::int64_t upto = INT64_MAX);

// The same from inside deferred work, which holds its own stream's lock: a stream (not the null
// one) that another thread is running, or this one further out, is not waited for (that could
// wait in a circle); the caller's work is then not ready and is tried again later.
bool run_deferred_from_work(cudaStream_t stream, std::int64_t upto);

// A synchronisation: run_deferred until it gets there, sleeping briefly between tries.
void run_deferred_until_done(cudaStream_t stream, std::int64_t upto = INT64_MAX);

// Queues `work` on `stream` (not the null stream) to run when something must follow it
// (run_deferred), where it may report that it is not ready; returns its number in the stream's
// order.
std::int64_t queue(cudaStream_t stream, std::function<bool()> work);

// Queues `work`, which is always ready, on `stream`; on the null stream, runs it now, after
// everything queued on the device.
void defer(cudaStream_t stream, std::function<void()> work);

// A kernel, GEMM or memset on `stream` (checked by check_launch_stream): deferred in the "all
// deferred" order, else run now, after the copies deferred before it on its stream (deferred
// behind them when some of them are not ready). It must own what it reads but device memory; it
// runs on whichever thread makes it run.
void run_or_defer(cudaStream_t stream, std::function<void()> work);

}  // namespace pipeplan::fake_cuda
