// A caching device allocator with exact byte accounting, one per pipeline stage (one per
// backend). Freed blocks go back to a per-size free list instead of cudaFree, so steady-state
// training never calls cudaMalloc; `current_bytes` and `peak_bytes` count the bytes the tensors
// asked for (not the rounded block sizes), so they equal the sums of Tensor::bytes() and can be
// set beside the planner's stash/retained predictions. `reserved_bytes` is what cudaMalloc holds.
#pragma once

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

class DeviceAllocator {
 public:
  static constexpr std::int64_t kAlignment = 512;  // block sizes are multiples of this

  DeviceAllocator() : state_(std::make_shared<State>()) {}
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // Device memory of `bytes` (> 0), freed back into the cache when the last owner goes. The
  // cache outlives the allocator if tensors do.
  std::shared_ptr<void> allocate(std::int64_t bytes);
  AllocatorStats stats() const;
  void reset_peak();
  // cudaFree of every cached (unused) block.
  void release_cached();

 private:
  struct State {
    std::mutex mutex;
    std::multimap<std::int64_t, void*> free_blocks;  // rounded size -> block
    AllocatorStats stats;
    void release(void* block, std::int64_t requested, std::int64_t rounded);
    void release_cached_locked();
  };
  std::shared_ptr<State> state_;
};

}  // namespace pipeplan::cuda
