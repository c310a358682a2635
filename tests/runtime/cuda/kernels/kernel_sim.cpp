#include "tests/runtime/cuda/kernels/kernel_sim.h"

#include <array>
#include <atomic>
#include <barrier>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace pipeplan::cuda::sim {

namespace {

constexpr unsigned int kWarp = 32;
constexpr unsigned int kMaxThreads = 1024;

struct Warp {
  explicit Warp(unsigned int count) : lanes(count), barrier(count) {}
  unsigned int lanes;
  std::barrier<> barrier;
  std::array<float, kWarp> slots{};
  std::atomic<unsigned int> exited{0};
};

struct Block {
  explicit Block(unsigned int threads) : barrier(threads) {
    for (unsigned int first = 0; first < threads; first += kWarp)
      warps.push_back(std::make_unique<Warp>(std::min(kWarp, threads - first)));
  }
  std::barrier<> barrier;
  std::vector<std::unique_ptr<Warp>> warps;
  std::mutex mutex;
  std::string error;  // the first thread's error, if any

  void fail(const std::string& what) {
    const std::lock_guard lock(mutex);
    if (error.empty()) error = what;
  }
};

thread_local Block* current_block = nullptr;
thread_local unsigned int current_thread = 0;  // linear index in the block

Block& block_of_caller(const char* what) {
  if (current_block == nullptr)
    throw std::logic_error(std::string(what) + " called outside a simulated kernel");
  return *current_block;
}

std::string position() {
  return "block (" + std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) + "," +
         std::to_string(blockIdx.z) + ") thread " + std::to_string(current_thread);
}

void run_thread(Block& block, dim3 grid, dim3 shape, uint3 block_index, unsigned int linear,
                const std::function<void()>& body) {
  current_block = &block;
  current_thread = linear;
  gridDim = grid;
  blockDim = shape;
  blockIdx = block_index;
  threadIdx = uint3{linear % shape.x, (linear / shape.x) % shape.y, linear / (shape.x * shape.y)};
  try {
    body();
  } catch (const std::exception& error) {
    block.fail(position() + ": " + error.what());
  }
  // A thread that has returned no longer takes part in the block's barriers.
  Warp& warp = *block.warps[linear / kWarp];
  warp.exited.fetch_add(1);
  warp.barrier.arrive_and_drop();
  block.barrier.arrive_and_drop();
  current_block = nullptr;
}

}  // namespace

void run(dim3 grid, dim3 block, const std::function<void()>& body) {
  const std::uint64_t threads = std::uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > kMaxThreads)
    throw std::runtime_error("kernel_sim: a block of " + std::to_string(threads) +
                             " threads (1 to 1024 allowed)");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535)
    throw std::runtime_error("kernel_sim: grid (" + std::to_string(grid.x) + "," +
                             std::to_string(grid.y) + "," + std::to_string(grid.z) +
                             ") is not launchable");
  // One OS thread per thread of the block, made once per launch and reused for every block:
  // `gate` starts a block (or, with `finished` set, ends the launch) and waits for its end.
  const auto count = static_cast<unsigned int>(threads);
  std::barrier<> gate(count + 1);
  Block* current = nullptr;
  uint3 index{};
  bool finished = false;
  std::string error;
  {
    std::vector<std::jthread> workers;
    workers.reserve(count);
    for (unsigned int t = 0; t < count; ++t) {
      workers.emplace_back([&, t] {
        for (;;) {
          gate.arrive_and_wait();
          if (finished) return;
          run_thread(*current, grid, block, index, t, body);
          gate.arrive_and_wait();
        }
      });
    }
    for (unsigned int z = 0; z < grid.z && error.empty(); ++z) {
      for (unsigned int y = 0; y < grid.y && error.empty(); ++y) {
        for (unsigned int x = 0; x < grid.x && error.empty(); ++x) {
          Block state(count);
          current = &state;
          index = uint3{x, y, z};
          gate.arrive_and_wait();  // the block runs
          gate.arrive_and_wait();  // every thread has returned
          error = state.error;
        }
      }
    }
    finished = true;
    gate.arrive_and_wait();
  }  // joined here
  if (!error.empty()) throw std::runtime_error("kernel_sim: " + error);
}

void syncthreads() {
  block_of_caller("__syncthreads").barrier.arrive_and_wait();
}

float shfl_xor(unsigned int mask, float value, int lane_mask) {
  Block& block = block_of_caller("__shfl_xor_sync");
  Warp& warp = *block.warps[current_thread / kWarp];
  if (mask != 0xffffffffu || warp.lanes != kWarp || warp.exited.load() != 0 || lane_mask < 0 ||
      lane_mask >= static_cast<int>(kWarp)) {
    throw std::logic_error("__shfl_xor_sync(mask " + std::to_string(mask) + ", lane mask " +
                           std::to_string(lane_mask) + ") needs a full warp of 32 live lanes and " +
                           "a lane mask below 32; this warp has " + std::to_string(warp.lanes) +
                           " lanes, " + std::to_string(warp.exited.load()) + " returned");
  }
  const unsigned int lane = current_thread % kWarp;
  warp.slots[lane] = value;
  warp.barrier.arrive_and_wait();
  const float other = warp.slots[lane ^ static_cast<unsigned int>(lane_mask)];
  warp.barrier.arrive_and_wait();
  return other;
}

}  // namespace pipeplan::cuda::sim

float atomicAdd(float* address, float value) {
  return std::atomic_ref<float>(*address).fetch_add(value, std::memory_order_relaxed);
}
