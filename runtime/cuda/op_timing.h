// Timing GPU work with CUDA events: the profiler's per-layer passes and the GEMM answers that
// bench_block --gemm-candidates compares (matmul.cpp) go through the same loop.
#pragma once

#include <functional>

#include <cuda_runtime.h>

namespace pipeplan::cuda {

struct OpTiming {
  double median_us = 0, min_us = 0, max_us = 0;
};

// Times `timed` with CUDA events on `stream` (made in the stream's context: a green context's
// stream is not the primary's), `warmup` untimed runs and then `repetitions` timed ones, each
// waited for; `setup` (may be empty) runs untimed before each. An exception from `setup` or
// `timed` propagates, the events freed.
OpTiming time_op(cudaStream_t stream, int warmup, int repetitions,
                 const std::function<void()>& setup, const std::function<void()>& timed);

// Times two pieces of work at once: `on_a` queued on stream `a` and `on_b` on stream `b` (both
// in one context), from an event on `a` that `b` waits for to the later of the two ends (`a`
// waits for `b`'s), as time_op does otherwise. What an overlapped pair takes (profiles/overlap.h).
OpTiming time_pair(cudaStream_t a, cudaStream_t b, int warmup, int repetitions,
                   const std::function<void()>& setup, const std::function<void()>& on_a,
                   const std::function<void()>& on_b);

}  // namespace pipeplan::cuda
