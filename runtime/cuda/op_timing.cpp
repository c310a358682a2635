#include "runtime/cuda/op_timing.h"

#include <algorithm>
#include <vector>

#include "planner/base/stats.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/green_context.h"

namespace pipeplan::cuda {

namespace {

// Two events in the stream's context, destroyed with the scope.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  explicit EventPair(cudaStream_t stream) : start(create_event_for(stream, cudaEventDefault)) {
    try {
      stop = create_event_for(stream, cudaEventDefault);
    } catch (...) {
      cudaEventDestroy(start);
      throw;
    }
  }
  ~EventPair() {
    cudaEventDestroy(start);  // no throwing from a destructor
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

// Runs `once` (which records `events`) `warmup` + `repetitions` times, `setup` before each, and
// returns the timed runs' median, min and max of the time between the two events.
OpTiming sample(const EventPair& events, int warmup, int repetitions,
                const std::function<void()>& setup, const std::function<void()>& once) {
  std::vector<double> samples;
  for (int i = 0; i < warmup + repetitions; ++i) {
    if (setup) setup();
    once();
    CUDA_CHECK(cudaEventSynchronize(events.stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events.start, events.stop));
    if (i >= warmup) samples.push_back(1000.0 * ms);
  }
  const auto [min, max] = std::minmax_element(samples.begin(), samples.end());
  return {median(samples), *min, *max};
}

}  // namespace

OpTiming time_op(cudaStream_t stream, int warmup, int repetitions,
                 const std::function<void()>& setup, const std::function<void()>& timed) {
  const EventPair events(stream);
  return sample(events, warmup, repetitions, setup, [&] {
    CUDA_CHECK(cudaEventRecord(events.start, stream));
    timed();
    CUDA_CHECK(cudaEventRecord(events.stop, stream));
  });
}

OpTiming time_pair(cudaStream_t a, cudaStream_t b, int warmup, int repetitions,
                   const std::function<void()>& setup, const std::function<void()>& on_a,
                   const std::function<void()>& on_b) {
  const EventPair events(a);
  const EventPair joins(b);  // joins.start: b's end, which a waits for
  return sample(events, warmup, repetitions, setup, [&] {
    CUDA_CHECK(cudaEventRecord(events.start, a));
    CUDA_CHECK(cudaStreamWaitEvent(b, events.start, 0));
    on_a();
    on_b();
    CUDA_CHECK(cudaEventRecord(joins.start, b));
    CUDA_CHECK(cudaStreamWaitEvent(a, joins.start, 0));
    CUDA_CHECK(cudaEventRecord(events.stop, a));
  });
}

}  // namespace pipeplan::cuda
