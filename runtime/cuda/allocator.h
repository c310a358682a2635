// A caching device allocator with exact byte accounting, one per pipeline stage (one per
// backend). Freed blocks go back to a per-size free list instead of cudaFree, so steady-state
// training never calls cudaMalloc; `current_bytes` and `peak_bytes` count the bytes the tensors
// asked for (not the rounded block sizes), so they equal the sums of Tensor::bytes() and can be
// set beside the planner's stash/retained predictions. `reserved_bytes` is what cudaMalloc holds.
//
// Reuse across streams: a block is freed (by whichever thread drops its last owner) while kernels
// queued on the stage's stream may still read it. The stage's stream may reuse it at once (stream
// order); another stream (a transport's copy into the stage's memory) must first wait for those
// kernels. The stage's FenceClock counts the events recorded on its stream (StepEvents records one
// after every compute node); a cached block remembers the count when it was freed, so the first
// event recorded after that follows every kernel that could read it (allocate_fenced).
//
// Overlapped pairs: a stage may run an overlapped pair's second op on a side stream (CudaBackend's
// begin_pair / begin_second / end_pair), which waits for the stage's stream at the pair's start
// (the fork) and which the stage's stream waits for at its end (the join). While a pair is open,
// the stage's stream may still be reading blocks freed since the fork (the pair's first op runs
// beside the second), and the side stream may be reading blocks it freed itself. So, between
// begin_pair and end_pair, the side lane (the thread that called set_side_lane(true)) takes only
// blocks freed before the fork or freed by the side lane in this pair, and every other
// allocation skips the blocks the side lane freed in this pair. After end_pair the stage's stream
// has joined the side stream and every block is for anyone again. A block the side lane frees
// must not still be read by the pair's first op: the two ops of a pair share no tensors.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace pipeplan::cuda {

struct AllocatorStats {
  std::int64_t current_bytes = 0;   // live tensors, requested sizes
  std::int64_t peak_bytes = 0;      // max of current_bytes since the last reset_peak()
  std::int64_t reserved_bytes = 0;  // device memory held (live + cached blocks, rounded)
  std::int64_t malloc_calls = 0;    // cudaMalloc calls so far (0 new ones once warm)
};

// How many events a stage has recorded on its stream so far (the "fences"): advanced by the
// thread that records them, right after each record, and read by the threads that free blocks.
class FenceClock {
 public:
  std::int64_t now() const { return recorded_.load(std::memory_order_acquire); }
  void advance() { recorded_.fetch_add(1, std::memory_order_acq_rel); }

 private:
  std::atomic<std::int64_t> recorded_{0};
};

class DeviceAllocator {
 public:
  static constexpr std::int64_t kAlignment = 512;  // block sizes are multiples of this
  // FencedBlock::freed_at of a block fresh from cudaMalloc: no kernel has touched it.
  static constexpr std::int64_t kNeverUsed = -1;

  struct FencedBlock {
    std::shared_ptr<void> data;
    // The fence count when the block was last freed (kNeverUsed: fresh): another stream may write
    // it once fence number `freed_at` (0-based: the first recorded after the free) has completed.
    std::int64_t freed_at = kNeverUsed;
  };

  DeviceAllocator() : state_(std::make_shared<State>()) {}
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // Device memory of `bytes` (> 0), freed back into the cache when the last owner goes. The
  // cache outlives the allocator if tensors do.
  std::shared_ptr<void> allocate(std::int64_t bytes);
  // The same, for a writer on another stream: says which fence to wait for first.
  FencedBlock allocate_fenced(std::int64_t bytes);
  // The stage's fence clock (shared: StepEvents advances it, the cache outlives both).
  const std::shared_ptr<FenceClock>& fence_clock() const { return state_->fences; }
  AllocatorStats stats() const;
  void reset_peak();
  // cudaFree of every cached (unused) block.
  void release_cached();
  // Whether a failed cudaMalloc frees the cache and tries once more (the default). cudaFree waits
  // for the whole device: where NCCL kernels wait on the device for another stage's progress
  // (an NCCL transport's receives, queued ahead), freeing mid-step can wait on a stage that waits
  // for this one, so a run over NCCL fails with the sizes instead.
  void set_trim_on_oom(bool on);

  // An overlapped pair's lanes (see the top of this file). begin_pair: the fork, before the
  // pair's first op is queued; set_side_lane(true) on the thread that queues the second op, before
  // it, and (false) after; end_pair once the stage's stream waits for the side stream.
  void begin_pair();
  void set_side_lane(bool on);
  void end_pair();

 private:
  struct CachedBlock {
    void* block = nullptr;
    std::int64_t freed_at = 0;  // the fence clock's count when it was freed
    std::int64_t serial = 0;    // State::releases when it was freed
    bool side = false;          // freed by the side lane
  };
  struct State {
    std::mutex mutex;
    std::multimap<std::int64_t, CachedBlock> free_blocks;  // rounded size -> block
    AllocatorStats stats;
    std::shared_ptr<FenceClock> fences = std::make_shared<FenceClock>();
    std::int64_t releases = 0;  // blocks freed so far
    bool pair_open = false;
    bool trim_on_oom = true;
    std::int64_t fork_serial = 0;  // `releases` at begin_pair
    void release(void* block, std::int64_t requested, std::int64_t rounded);
    void release_cached_locked();
    // Whether a block may go to the side lane (side) or to anyone else now (caller holds mutex).
    bool usable(const CachedBlock& cached, bool side) const;
  };
  std::shared_ptr<State> state_;
};

}  // namespace pipeplan::cuda
