#include "runtime/cuda/allocator.h"

#include <algorithm>
#include <string>

#include "runtime/cuda/cuda_check.h"

namespace pipeplan::cuda {

namespace {
std::int64_t round_up(std::int64_t bytes) {
  return (bytes + DeviceAllocator::kAlignment - 1) / DeviceAllocator::kAlignment *
         DeviceAllocator::kAlignment;
}

// The allocator whose side lane this thread is queueing (set_side_lane), if any.
thread_local const void* side_lane_of = nullptr;
}  // namespace

void DeviceAllocator::State::release(void* block, std::int64_t requested, std::int64_t rounded) {
  const bool side = side_lane_of == this;
  const std::lock_guard lock(mutex);
  stats.current_bytes -= requested;
  // Read after the last owner let go: every kernel that used the block was queued before now.
  free_blocks.emplace(rounded, CachedBlock{block, fences->now(), ++releases, side && pair_open});
}

bool DeviceAllocator::State::usable(const CachedBlock& cached, bool side) const {
  if (!pair_open) return true;
  const bool since_fork = cached.serial > fork_serial;
  // The side lane: what the fork covers, or what it freed itself. Anyone else: not what the
  // side lane freed in this pair (the stage's stream has not joined it yet).
  return side ? !since_fork || cached.side : !(since_fork && cached.side);
}

void DeviceAllocator::begin_pair() {
  const std::lock_guard lock(state_->mutex);
  state_->pair_open = true;
  state_->fork_serial = state_->releases;
}

void DeviceAllocator::set_side_lane(bool on) {
  side_lane_of = on ? state_.get() : nullptr;
}

void DeviceAllocator::end_pair() {
  const std::lock_guard lock(state_->mutex);
  state_->pair_open = false;
}

void DeviceAllocator::State::release_cached_locked() {
  for (const auto& [size, cached] : free_blocks) {
    cudaFree(cached.block);  // no throw: also runs from destructors
    stats.reserved_bytes -= size;
  }
  free_blocks.clear();
}

DeviceAllocator::~DeviceAllocator() {
  const std::lock_guard lock(state_->mutex);
  state_->release_cached_locked();
}

std::shared_ptr<void> DeviceAllocator::allocate(std::int64_t bytes) {
  return allocate_fenced(bytes).data;
}

DeviceAllocator::FencedBlock DeviceAllocator::allocate_fenced(std::int64_t bytes) {
  if (bytes <= 0) throw Error("device allocation of " + std::to_string(bytes) + " bytes");
  const std::int64_t rounded = round_up(bytes);
  void* block = nullptr;
  std::int64_t freed_at = kNeverUsed;
  {
    const bool side = side_lane_of == state_.get();
    const std::lock_guard lock(state_->mutex);
    // Exact size only: a larger cached block would hide fragmentation in the reserved figure.
    // Blocks of one size come back oldest free first (multimap keeps insertion order): the one
    // whose readers are most likely done.
    auto [it, end] = state_->free_blocks.equal_range(rounded);
    while (it != end && !state_->usable(it->second, side))
      ++it;
    if (it != end) {
      block = it->second.block;
      freed_at = it->second.freed_at;
      state_->free_blocks.erase(it);
    }
  }
  if (block == nullptr) {
    cudaError_t status = cudaMalloc(&block, static_cast<std::size_t>(rounded));
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it, then free the cache and try once more where allowed
      bool trim = true;
      AllocatorStats held;
      {
        const std::lock_guard lock(state_->mutex);
        trim = state_->trim_on_oom;
        held = state_->stats;
      }
      if (!trim) {
        throw Error("device memory: cudaMalloc of " + std::to_string(rounded) +
                    " bytes failed (out of memory) with " + std::to_string(held.current_bytes) +
                    " bytes in use and " + std::to_string(held.reserved_bytes) +
                    " reserved; the cache is not freed during a step over NCCL (cudaFree would "
                    "wait for receives that wait on other stages)");
      }
      release_cached();
      status = cudaMalloc(&block, static_cast<std::size_t>(rounded));
    }
    CUDA_CHECK(status);
    const std::lock_guard lock(state_->mutex);
    state_->stats.reserved_bytes += rounded;
    ++state_->stats.malloc_calls;
  }
  {
    const std::lock_guard lock(state_->mutex);
    state_->stats.current_bytes += bytes;
    state_->stats.peak_bytes = std::max(state_->stats.peak_bytes, state_->stats.current_bytes);
  }
  std::shared_ptr<State> state = state_;
  return {std::shared_ptr<void>(
              block, [state, bytes, rounded](void* ptr) { state->release(ptr, bytes, rounded); }),
          freed_at};
}

AllocatorStats DeviceAllocator::stats() const {
  const std::lock_guard lock(state_->mutex);
  return state_->stats;
}

void DeviceAllocator::reset_peak() {
  const std::lock_guard lock(state_->mutex);
  state_->stats.peak_bytes = state_->stats.current_bytes;
}

void DeviceAllocator::set_trim_on_oom(bool on) {
  const std::lock_guard lock(state_->mutex);
  state_->trim_on_oom = on;
}

void DeviceAllocator::release_cached() {
  const std::lock_guard lock(state_->mutex);
  state_->release_cached_locked();
}

}  // namespace pipeplan::cuda
