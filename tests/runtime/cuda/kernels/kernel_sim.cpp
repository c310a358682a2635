#include "tests/runtime/cuda/kernels/kernel_sim.h"

#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PIPEPLAN_SIM_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define PIPEPLAN_SIM_ASAN 1
#endif
#ifdef PIPEPLAN_SIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace pipeplan::cuda::sim {

namespace {

constexpr unsigned int kWarp = 32;
constexpr unsigned int kMaxThreads = 1024;
// A kernel thread's stack: kernels keep a few scalars there; the rest is for an error's message
// and ASan's redzones. Small because ASan clears a stack's shadow on every switch to it. Reserved,
// not committed; one guard page below, so an overflow faults.
constexpr std::size_t kStackBytes = std::size_t{64} << 10;

// A suspended execution: the stack pointer where its registers are saved (x86-64), or a ucontext
// (elsewhere, where a switch costs a signal-mask system call).
#if defined(__x86_64__)
struct Context {
  void* sp = nullptr;
};

// Saves the callee-saved registers (SysV x86-64: rbx, rbp, r12 to r15) on the current stack and
// its pointer in *from, then loads `to` and returns into it. MXCSR and the x87 control word are
// not switched: no kernel changes them.
extern "C" void pipeplan_sim_switch(void** from, void* to);
asm(R"(
    .text
    .globl pipeplan_sim_switch
    .hidden pipeplan_sim_switch
    .type pipeplan_sim_switch, @function
pipeplan_sim_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size pipeplan_sim_switch, .-pipeplan_sim_switch
)");

// A context that starts `entry` (which must never return) on `stack`: six zero registers for
// pipeplan_sim_switch to pop (rbp = 0 ends frame-pointer walks), then `entry` as the return
// address, above it a null return address for `entry`, so that it starts with the stack aligned
// as after a call.
void make_context(Context& context, void* stack, std::size_t bytes, void (*entry)()) {
  auto* top = reinterpret_cast<void**>(static_cast<char*>(stack) + bytes);  // 16-byte aligned
  top[-1] = nullptr;
  top[-2] = reinterpret_cast<void*>(entry);
  for (int slot = 3; slot <= 8; ++slot)
    top[-slot] = nullptr;
  context.sp = top - 8;
}

void switch_context(Context& from, Context& to) {
  pipeplan_sim_switch(&from.sp, to.sp);
}
#else
struct Context {
  ucontext_t uc{};
};

void make_context(Context& context, void* stack, std::size_t bytes, void (*entry)()) {
  getcontext(&context.uc);
  context.uc.uc_stack.ss_sp = stack;
  context.uc.uc_stack.ss_size = bytes;
  context.uc.uc_link = nullptr;  // entry never returns
  makecontext(&context.uc, entry, 0);
}

void switch_context(Context& from, Context& to) {
  swapcontext(&from.uc, &to.uc);
}
#endif

// One simulated thread: a context on its own stack, resumed by the block's scheduler.
struct Fiber {
  Context context;
  void* stack = nullptr;  // kStackBytes, above a guard page
  unsigned int linear = 0;
  bool done = false;
#ifdef PIPEPLAN_SIM_ASAN
  void* fake_stack = nullptr;
#endif
};

// Stacks outlive launches (mapping 1024 of them per launch would dominate small kernels).
class StackPool {
 public:
  void* get(std::size_t index) {
    while (stacks_.size() <= index) {
      const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
      void* base = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
      if (base == MAP_FAILED) throw std::runtime_error("kernel_sim: cannot map a thread's stack");
      if (mprotect(base, page, PROT_NONE) != 0)
        throw std::runtime_error("kernel_sim: cannot protect a thread's stack guard page");
      stacks_.push_back(static_cast<char*>(base) + page);
    }
    return stacks_[index];
  }

 private:
  std::vector<void*> stacks_;  // mapped until exit
};

struct Warp {
  unsigned int lanes = 0;
  unsigned int exited = 0;
  unsigned int arrived = 0;                         // lanes waiting in the current shuffle
  std::uint64_t round = 0;                          // shuffles completed
  std::array<std::array<float, kWarp>, 2> slots{};  // by round parity: a lane is at most one ahead
};

struct Block {
  explicit Block(unsigned int threads) : live(threads) {
    for (unsigned int first = 0; first < threads; first += kWarp)
      warps.push_back(Warp{std::min(kWarp, threads - first)});
  }
  unsigned int live;           // threads that have not returned
  unsigned int arrived = 0;    // threads waiting at __syncthreads
  std::uint64_t round = 0;     // barriers completed
  std::uint64_t progress = 0;  // every arrival and return: a pass without it is a deadlock
  std::vector<Warp> warps;
  std::string error;  // the first thread's error, if any

  void fail(const std::string& what) {
    if (error.empty()) error = what;
  }
};

// The scheduler's state for the launch running on this host thread.
struct Running {
  Block* block = nullptr;
  Fiber* fiber = nullptr;  // the one executing, null in the scheduler
  Context scheduler;
  const std::function<void()>* body = nullptr;
#ifdef PIPEPLAN_SIM_ASAN
  const void* scheduler_stack = nullptr;
  std::size_t scheduler_stack_size = 0;
#endif
};

thread_local Running running;

Block& block_of_caller(const char* what) {
  if (running.block == nullptr || running.fiber == nullptr)
    throw std::logic_error(std::string(what) + " called outside a simulated kernel");
  return *running.block;
}

std::string position() {
  return "block (" + std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) + "," +
         std::to_string(blockIdx.z) + ") thread " + std::to_string(running.fiber->linear);
}

void set_thread_index(unsigned int linear) {
  threadIdx = uint3{linear % blockDim.x, (linear / blockDim.x) % blockDim.y,
                    linear / (blockDim.x * blockDim.y)};
}

// From the running fiber back to the scheduler; returns when the scheduler resumes it.
void yield() {
  Fiber* self = running.fiber;
#ifdef PIPEPLAN_SIM_ASAN
  __sanitizer_start_switch_fiber(&self->fake_stack, running.scheduler_stack,
                                 running.scheduler_stack_size);
#endif
  switch_context(self->context, running.scheduler);
#ifdef PIPEPLAN_SIM_ASAN
  __sanitizer_finish_switch_fiber(self->fake_stack, &running.scheduler_stack,
                                  &running.scheduler_stack_size);
#endif
}

// A fiber's entry: the kernel's body, then leaving the block's barriers (as on sm_70 and later).
void fiber_main() {
#ifdef PIPEPLAN_SIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &running.scheduler_stack, &running.scheduler_stack_size);
#endif
  Block& block = *running.block;
  try {
    (*running.body)();
  } catch (const std::exception& error) {
    block.fail(position() + ": " + error.what());
  }
  Fiber* self = running.fiber;
  Warp& warp = block.warps[self->linear / kWarp];
  ++warp.exited;
  --block.live;
  ++block.progress;
  if (block.arrived > 0 && block.arrived == block.live) {  // the others wait at __syncthreads
    block.arrived = 0;
    ++block.round;
  }
  self->done = true;
#ifdef PIPEPLAN_SIM_ASAN
  __sanitizer_start_switch_fiber(nullptr, running.scheduler_stack, running.scheduler_stack_size);
#endif
  switch_context(self->context, running.scheduler);  // never resumed
  std::abort();
}

void resume(Fiber& fiber) {
  running.fiber = &fiber;
  set_thread_index(fiber.linear);
#ifdef PIPEPLAN_SIM_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, fiber.stack, kStackBytes);
#endif
  switch_context(running.scheduler, fiber.context);
#ifdef PIPEPLAN_SIM_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  running.fiber = nullptr;
}

// Runs one block to completion: its threads in turn, each until it waits or returns, round after
// round. A round in which no thread arrives anywhere or returns is a deadlock.
void run_block(Block& block, std::vector<Fiber>& fibers, StackPool& stacks) {
  for (std::size_t t = 0; t < fibers.size(); ++t) {
    Fiber& fiber = fibers[t];
    fiber = Fiber{};
    fiber.linear = static_cast<unsigned int>(t);
    fiber.stack = stacks.get(t);
    make_context(fiber.context, fiber.stack, kStackBytes, fiber_main);
  }
  for (;;) {
    const std::uint64_t before = block.progress;
    bool any = false;
    for (Fiber& fiber : fibers) {
      if (fiber.done) continue;
      any = true;
      resume(fiber);
    }
    if (!any) return;
    if (block.progress == before) {
      block.fail("deadlock: " + std::to_string(block.live) + " threads wait at __syncthreads (" +
                 std::to_string(block.arrived) +
                 " arrived) or __shfl_xor_sync and none can go on (divergent barriers)");
      // The waiting fibers are abandoned; their stacks are reused by the next block, without
      // the redzones their frames left.
#ifdef PIPEPLAN_SIM_ASAN
      for (const Fiber& fiber : fibers)
        if (!fiber.done) __asan_unpoison_memory_region(fiber.stack, kStackBytes);
#endif
      return;
    }
  }
}

std::mutex& launch_mutex() {
  static std::mutex mutex;
  return mutex;
}

LaunchHook& launch_hook() {
  static LaunchHook hook;
  return hook;
}

// Runs one launch's blocks, one at a time, on the calling thread.
void execute(dim3 grid, dim3 block, const std::function<void()>& body) {
  const std::lock_guard lock(launch_mutex());
  const std::uint64_t threads = std::uint64_t{block.x} * block.y * block.z;
  static StackPool stacks;  // guarded by the launch mutex
  std::vector<Fiber> fibers(static_cast<std::size_t>(threads));
  gridDim = grid;
  blockDim = block;
  running.body = &body;
  std::string error;
  for (unsigned int z = 0; z < grid.z && error.empty(); ++z) {
    for (unsigned int y = 0; y < grid.y && error.empty(); ++y) {
      for (unsigned int x = 0; x < grid.x && error.empty(); ++x) {
        Block state(static_cast<unsigned int>(threads));
        running.block = &state;
        blockIdx = uint3{x, y, z};
        run_block(state, fibers, stacks);
        error = state.error;
      }
    }
  }
  running = Running{};
  if (!error.empty()) throw std::runtime_error("kernel_sim: " + error);
}

}  // namespace

void set_launch_hook(LaunchHook hook) {
  const std::lock_guard lock(launch_mutex());
  launch_hook() = std::move(hook);
}

void run(dim3 grid, dim3 block, cudaStream_t stream, std::function<void()> body) {
  const std::uint64_t threads = std::uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > kMaxThreads)
    throw std::runtime_error("kernel_sim: a block of " + std::to_string(threads) +
                             " threads (1 to 1024 allowed)");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535)
    throw std::runtime_error("kernel_sim: grid (" + std::to_string(grid.x) + "," +
                             std::to_string(grid.y) + "," + std::to_string(grid.z) +
                             ") is not launchable");
  LaunchHook hook;
  {
    const std::lock_guard lock(launch_mutex());
    hook = launch_hook();
  }
  auto kernel = [grid, block, body = std::move(body)] { execute(grid, block, body); };
  if (hook) {
    hook(stream, std::move(kernel));
  } else {
    kernel();
  }
}

void syncthreads() {
  Block& block = block_of_caller("__syncthreads");
  const std::uint64_t round = block.round;
  ++block.progress;
  if (++block.arrived == block.live) {
    block.arrived = 0;
    ++block.round;
    return;
  }
  while (block.round == round)
    yield();
}

float shfl_xor(unsigned int mask, float value, int lane_mask) {
  Block& block = block_of_caller("__shfl_xor_sync");
  Warp& warp = block.warps[running.fiber->linear / kWarp];
  const auto check = [&] {
    if (mask != 0xffffffffu || warp.lanes != kWarp || warp.exited != 0 || lane_mask < 0 ||
        lane_mask >= static_cast<int>(kWarp)) {
      throw std::logic_error("__shfl_xor_sync(mask " + std::to_string(mask) + ", lane mask " +
                             std::to_string(lane_mask) +
                             ") needs a full warp of 32 live lanes and a lane mask below 32; this "
                             "warp has " +
                             std::to_string(warp.lanes) + " lanes, " + std::to_string(warp.exited) +
                             " returned");
    }
  };
  check();
  const std::uint64_t round = warp.round;
  auto& slots = warp.slots[round % 2];
  const unsigned int lane = running.fiber->linear % kWarp;
  slots[lane] = value;
  ++block.progress;
  if (++warp.arrived == kWarp) {
    warp.arrived = 0;
    ++warp.round;
  } else {
    while (warp.round == round) {
      yield();
      check();  // a lane returned while this one waited
    }
  }
  return slots[lane ^ static_cast<unsigned int>(lane_mask)];
}

}  // namespace pipeplan::cuda::sim

float atomicAdd(float* address, float value) {
  return std::atomic_ref<float>(*address).fetch_add(value, std::memory_order_relaxed);
}
