// The stand-in's own rules (fake_device.h), each shown to refuse what breaks it, and the backend's
// green-context locking shown to keep them: the rest of this binary is the GPU suite
// (tests/runtime/cuda/*.cpp) running on the stand-in.
#include "tests/runtime/cuda/fake_device/fake_device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

#include "planner/base/error.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/green_context.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/profiler.h"
#include "tests/runtime/cuda/gpu_test_support.h"
#include "tests/runtime/models.h"

namespace pipeplan {
namespace {

using cuda::GreenContext;
using cuda::ScopedContext;

std::vector<std::unique_ptr<GreenContext>> two_stages() {
  return GreenContext::partition(0, 2, 32);
}

template <typename Fn>
Fn driver(const char* symbol) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult status{};
  EXPECT_EQ(
      cudaGetDriverEntryPointByVersion(symbol, &function, CUDA_VERSION, cudaEnableDefault, &status),
      cudaSuccess);
  return reinterpret_cast<Fn>(function);
}

TEST(FakeDeviceRules, AnEventIsRecordedOnlyOnAStreamOfItsOwnContext) {
  const auto stages = two_stages();
  cudaEvent_t event = cuda::create_event_for(stages[0]->stream(), cudaEventDefault);
  {
    const ScopedContext current(stages[1]->context());
    EXPECT_EQ(cudaEventRecord(event, stages[1]->stream()), cudaErrorInvalidResourceHandle);
    EXPECT_NE(std::string(cudaGetErrorString(cudaErrorInvalidResourceHandle))
                  .find("event and stream must share a context"),
              std::string::npos);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  }
  {
    const ScopedContext current(stages[0]->context());
    EXPECT_EQ(cudaEventRecord(event, stages[0]->stream()), cudaSuccess);
    EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
  }
}

// A wait on an event never recorded would order nothing on a GPU: refused, naming the rule; once
// recorded, a stream of another stage (context) may wait on it.
TEST(FakeDeviceRules, AStreamWaitsOnlyOnARecordedEvent) {
  const auto stages = two_stages();
  cudaEvent_t event = cuda::create_event_for(stages[0]->stream(), cudaEventDisableTiming);
  {
    const ScopedContext current(stages[1]->context());
    EXPECT_EQ(cudaStreamWaitEvent(stages[1]->stream(), event, 0), cudaErrorInvalidResourceHandle);
    EXPECT_NE(fake_cuda::last_rule_error().find("an event never recorded"), std::string::npos)
        << fake_cuda::last_rule_error();
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  }
  {
    const ScopedContext current(stages[0]->context());
    ASSERT_EQ(cudaEventRecord(event, stages[0]->stream()), cudaSuccess);
  }
  {
    const ScopedContext current(stages[1]->context());
    EXPECT_EQ(cudaStreamWaitEvent(stages[1]->stream(), event, 0), cudaSuccess);
  }
  const ScopedContext current(stages[0]->context());
  EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
}

// A device-to-device copy runs only once something must follow it (fake_device.h), so a reader
// on another stream that does not wait for it reads what was there before; a wait on an event
// recorded after it, or work queued behind it on its stream, runs it first.
TEST(FakeDevice, ADeviceCopyRunsOnceSomethingFollowsIt) {
  const fake_cuda::AllWorkDeferred order(false);  // the memsets run at once
  constexpr std::size_t kBytes = 64;
  unsigned char* from = nullptr;
  unsigned char* to = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&from), kBytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&to), kBytes), cudaSuccess);
  cudaStream_t copying = nullptr, reading = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&copying, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&reading, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(to, 0, kBytes, copying), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(from, 7, kBytes, copying), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(to, from, kBytes, cudaMemcpyDeviceToDevice, copying), cudaSuccess);
  EXPECT_EQ(to[0], 0) << "the copy ran before anything had to follow it";
  ASSERT_EQ(cudaMemsetAsync(from, 9, kBytes, copying), cudaSuccess);  // queued behind it
  EXPECT_EQ(to[kBytes - 1], 7);
  EXPECT_EQ(from[0], 9);
  ASSERT_EQ(cudaMemcpyAsync(to, from, kBytes, cudaMemcpyDeviceToDevice, copying), cudaSuccess);
  cudaEvent_t copied = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(copied, copying), cudaSuccess);
  EXPECT_EQ(to[0], 7);
  ASSERT_EQ(cudaStreamWaitEvent(reading, copied, 0), cudaSuccess);  // another stream waits
  EXPECT_EQ(to[0], 9);
  EXPECT_EQ(cudaEventDestroy(copied), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(copying), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(reading), cudaSuccess);
  EXPECT_EQ(cudaFree(from), cudaSuccess);
  EXPECT_EQ(cudaFree(to), cudaSuccess);
}

// With all work deferred, a kernel too runs only once something must follow it: a stream that
// reads what another stream's kernel writes, without waiting for it, reads what was there before,
// and with the wait it reads what the kernel wrote.
TEST(FakeDevice, WithAllWorkDeferredAKernelRunsOnceSomethingFollowsIt) {
  const fake_cuda::AllWorkDeferred order(true);
  constexpr std::int64_t kCount = 64;
  float* written = nullptr;
  float* sum = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&written), kCount * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&sum), kCount * sizeof(float)), cudaSuccess);
  std::fill_n(written, kCount, 0.0f);  // device memory is host memory here
  std::fill_n(sum, kCount, 0.0f);
  cudaStream_t writing = nullptr, reading = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&writing, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&reading, cudaStreamNonBlocking), cudaSuccess);

  cuda::fill_f32(written, kCount, 3.0f, writing);
  EXPECT_EQ(written[0], 0.0f) << "the kernel ran before anything had to follow it";
  cuda::add_f32(sum, written, kCount, reading);  // no wait: reads the 0s
  ASSERT_EQ(cudaStreamSynchronize(reading), cudaSuccess);
  EXPECT_EQ(sum[kCount - 1], 0.0f);
  EXPECT_EQ(written[0], 0.0f) << "a synchronisation of one stream ran another's work";

  cudaEvent_t filled = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(filled, writing), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(reading, filled, 0), cudaSuccess);
  EXPECT_EQ(written[kCount - 1], 3.0f);
  cuda::add_f32(sum, written, kCount, reading);
  EXPECT_EQ(sum[0], 0.0f);
  ASSERT_EQ(cudaStreamSynchronize(reading), cudaSuccess);
  EXPECT_EQ(sum[0], 3.0f);

  EXPECT_EQ(cudaEventDestroy(filled), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(writing), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(reading), cudaSuccess);
  EXPECT_EQ(cudaFree(written), cudaSuccess);
  EXPECT_EQ(cudaFree(sum), cudaSuccess);
}

TEST(FakeDeviceRules, AKernelGoesOnlyToAStreamOfTheCurrentContext) {
  const auto stages = two_stages();
  float* values = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&values), 64 * sizeof(float)), cudaSuccess);
  {
    const ScopedContext current(stages[0]->context());
    try {
      cuda::fill_f32(values, 64, 1.0f, stages[1]->stream());
      ADD_FAILURE() << "a launch to another context's stream was not refused";
    } catch (const std::runtime_error& error) {
      EXPECT_NE(
          std::string(error.what()).find("a launch must go to a stream of the current context"),
          std::string::npos)
          << error.what();
    }
    cuda::fill_f32(values, 64, 2.0f, stages[0]->stream());
    ASSERT_EQ(cudaStreamSynchronize(stages[0]->stream()), cudaSuccess);
  }
  EXPECT_EQ(values[63], 2.0f);
  EXPECT_EQ(cudaFree(values), cudaSuccess);
  EXPECT_EQ(cudaFree(values), cudaErrorInvalidDevicePointer);  // freed twice
}

TEST(FakeDeviceRules, AGreenContextIsCurrentOnOneThreadAtATime) {
  const auto stages = two_stages();
  const auto push = driver<decltype(&cuCtxPushCurrent)>("cuCtxPushCurrent");
  const auto pop = driver<decltype(&cuCtxPopCurrent)>("cuCtxPopCurrent");
  CUcontext context = stages[0]->context();
  std::latch pushed(1), checked(1);
  std::thread holder([&] {
    EXPECT_EQ(push(context), CUDA_SUCCESS);
    pushed.count_down();
    checked.wait();
    CUcontext popped = nullptr;
    EXPECT_EQ(pop(&popped), CUDA_SUCCESS);
    EXPECT_EQ(popped, context);
  });
  pushed.wait();
  EXPECT_EQ(push(context), CUDA_ERROR_INVALID_CONTEXT);  // current on `holder`
  EXPECT_NE(fake_cuda::last_rule_error().find("current to only one thread at a time"),
            std::string::npos);
  EXPECT_EQ(push(stages[1]->context()), CUDA_SUCCESS);  // another green context is free
  CUcontext popped = nullptr;
  EXPECT_EQ(pop(&popped), CUDA_SUCCESS);
  checked.count_down();
  holder.join();
  EXPECT_EQ(push(context), CUDA_SUCCESS);  // free again
  EXPECT_EQ(pop(&popped), CUDA_SUCCESS);
}

// The backend's side of the last rule: ScopedContext holds the stage's lock while its context is
// pushed, so threads that share a stage (compute, send, receive) take turns and break nothing.
TEST(FakeDeviceRules, ScopedContextLetsThreadsShareAStageWithoutBreakingARule) {
  const auto stages = two_stages();
  float* values = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&values), 256 * sizeof(float)), cudaSuccess);
  const std::int64_t before = fake_cuda::counters().rule_errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const ScopedContext outer(stages[0]->context());
        const ScopedContext inner(stages[0]->context());  // recursive, as nested backend calls
        cuda::fill_f32(values, 256, float(t), stages[0]->stream());
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  EXPECT_EQ(fake_cuda::counters().rule_errors, before);
  EXPECT_EQ(cudaFree(values), cudaSuccess);
}

// A device the planner has no gpus.json entry for: the profiler says so before it measures
// anything (a profile naming an unknown GPU could not be planned from), and --gpu overrides.
TEST(FakeDeviceProfiler, RefusesAGpuWithoutAGpusJsonEntryBeforeMeasuring) {
  GpuProfileOptions options = pipeplan::testing::quick_profile_options(Attention::recompute, 0, 1);
  fake_cuda::set_device_name("Tesla T4");
  const std::int64_t launches = fake_cuda::counters().launches;
  try {
    (void)cuda::measure_profile(options);
    ADD_FAILURE() << "an unknown GPU was profiled";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("'Tesla T4'"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("gpus.json"), std::string::npos) << error.what();
  }
  EXPECT_EQ(fake_cuda::counters().launches, launches) << "it measured before refusing";
  options.gpu = "h100-pcie";
  const Profile profile = cuda::measure_profile(options);
  fake_cuda::set_device_name("");
  EXPECT_EQ(profile.gpu, "h100-pcie");
  EXPECT_EQ(profile.provenance.gpu, "Tesla T4");
}

// A failed cudaMalloc frees the cache and tries again; over NCCL (set_trim_on_oom(false)) it
// fails naming the sizes instead, since cudaFree would wait for the whole device, receives that
// wait on other stages included.
TEST(FakeDeviceAllocator, AFailedMallocFreesTheCacheUnlessNcclWaitsOnTheDevice) {
  for (const bool trim : {true, false}) {
    cuda::DeviceAllocator allocator;
    allocator.set_trim_on_oom(trim);
    fake_cuda::set_device_memory_limit(fake_cuda::counters().live_device + 8192);
    allocator.allocate(4096).reset();  // cached: the device holds it
    EXPECT_EQ(allocator.stats().reserved_bytes, 4096);
    if (trim) {
      const auto block = allocator.allocate(8192);  // fits once the cached block is freed
      EXPECT_EQ(allocator.stats().reserved_bytes, 8192);
    } else {
      try {
        (void)allocator.allocate(8192);
        ADD_FAILURE() << "allocated past the device's memory";
      } catch (const Error& error) {
        const std::string text = error.what();
        EXPECT_NE(text.find("cudaMalloc of 8192 bytes failed (out of memory)"), std::string::npos)
            << text;
        EXPECT_NE(text.find("4096 reserved"), std::string::npos) << text;
      }
      EXPECT_EQ(allocator.stats().reserved_bytes, 4096) << "the cache was freed";
    }
    fake_cuda::set_device_memory_limit(0);
  }
}

}  // namespace
}  // namespace pipeplan
