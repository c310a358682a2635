// The CUDA runtime and driver calls of runtime/cuda, on the CPU (fake_device.h).
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tests/runtime/cuda/fake_device/fake_state.h"
#include "tests/runtime/cuda/kernels/kernel_sim.h"

namespace pipeplan::fake_cuda {

namespace {

struct State {
  std::mutex mutex;
  Counters counters;
  std::string last_rule;
  std::string device_name = kDefaultDeviceName;
  std::int64_t device_memory_limit = 0;  // set_device_memory_limit; 0: only the host's
  int device_count = 1;                  // set_device_count
  std::map<void*, std::size_t> device_blocks, host_blocks;
  std::set<CUstream_st*> streams;  // live ones: a device-wide synchronisation runs their copies
  // Destroyed streams, emptied, kept until exit: work on other streams, events and NCCL's records
  // of queued sends may still name them (and find nothing left to run).
  std::vector<std::unique_ptr<CUstream_st>> destroyed;
  // Everything the driver hands out lives until exit (reachable, so LeakSanitizer is quiet about
  // what the backend never destroys, such as resource descriptors).
  std::vector<std::unique_ptr<CUdevResourceDesc_st>> descs;
};

State& state() {
  static State* s = new State();  // never destroyed: destructors of statics call into it
  return *s;
}

CUctx_st& primary() {
  static CUctx_st* context = [] {
    auto* c = new CUctx_st();
    c->sms = kDeviceSms;
    c->name = "the primary context";
    return c;
  }();
  return *context;
}

// This thread's context stack (top = current) and the last error the runtime API returned.
struct ThreadState {
  std::vector<CUctx_st*> stack;
  cudaError_t last_error = cudaSuccess;
  int rule_status = 0;
  int device = 0;  // cudaSetDevice's
  std::string rule_message;
  ~ThreadState() {
    if (!stack.empty()) leave(stack.back());
  }
  static void leave(CUctx_st* context) {
    const std::lock_guard lock(context->mutex);
    context->current_on.erase(std::this_thread::get_id());
  }
};

thread_local ThreadState thread_state;

// Makes `next` this thread's current context in place of the top; refuses (and changes nothing)
// when `next` is a green context current on another thread.
CUresult switch_top(CUctx_st* previous, CUctx_st* next, const char* call) {
  if (next != nullptr && next != previous) {
    const std::lock_guard lock(next->mutex);
    if (next->green && !next->current_on.empty()) {
      break_rule(std::string(call) + ": " + next->name +
                     " is already current on another thread; a green context can be current "
                     "to only one thread at a time (cuGreenCtxCreate)",
                 CUDA_ERROR_INVALID_CONTEXT);
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    next->current_on.insert(std::this_thread::get_id());
  }
  if (previous != nullptr && previous != next) ThreadState::leave(previous);
  return CUDA_SUCCESS;
}

cudaError_t fail(cudaError_t status) {
  thread_state.last_error = status;
  return status;
}

std::size_t round_up(std::size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace

CUctx_st* current_context() {
  return thread_state.stack.empty() ? &primary() : thread_state.stack.back();
}

CUctx_st* context_of(cudaStream_t stream) {
  return stream != nullptr ? stream->context : current_context();
}

std::string break_rule(const std::string& message, int status) {
  {
    State& s = state();
    const std::lock_guard lock(s.mutex);
    ++s.counters.rule_errors;
    s.last_rule = message;
  }
  thread_state.rule_status = status;
  thread_state.rule_message = "fake_device: " + message;
  return thread_state.rule_message;
}

const char* rule_message_for(int status) {
  return thread_state.rule_status == status ? thread_state.rule_message.c_str() : nullptr;
}

namespace {

// The streams whose work this thread is running, outermost first (work may run another stream's).
thread_local std::vector<CUstream_st*> running;

// Runs `stream`'s work up to `upto`, its lock held. Work is taken off the queue first, so work
// that throws (a kernel's error) is not run again; work that is not ready goes back.
bool run_locked(CUstream_st* stream, std::int64_t upto) {
  running.push_back(stream);
  struct Leave {
    ~Leave() { running.pop_back(); }
  } leave;
  while (!stream->deferred.empty() && stream->deferred.front().first <= upto) {
    auto [number, work] = std::move(stream->deferred.front());
    stream->deferred.pop_front();
    if (!work()) {
      stream->deferred.emplace_front(number, std::move(work));
      return false;
    }
    stream->ran.store(number);
  }
  return true;
}

}  // namespace

bool run_deferred(cudaStream_t stream, std::int64_t upto) {
  if (stream == nullptr) {  // the legacy stream: after all work queued on the device
    std::vector<CUstream_st*> streams;
    {
      const std::lock_guard lock(state().mutex);
      streams.assign(state().streams.begin(), state().streams.end());
    }
    bool done = true;
    for (CUstream_st* s : streams)
      done = run_deferred(s, upto) && done;
    return done;
  }
  // The stream's lock is held while its work runs, so that two threads run it in order.
  const std::lock_guard lock(stream->mutex);
  return run_locked(stream, upto);
}

bool run_deferred_from_work(cudaStream_t stream, std::int64_t upto) {
  if (stream->ran.load() >= upto) return true;
  if (std::find(running.begin(), running.end(), stream) != running.end()) return false;
  const std::unique_lock lock(stream->mutex, std::try_to_lock);
  return lock.owns_lock() && run_locked(stream, upto);
}

void run_deferred_until_done(cudaStream_t stream, std::int64_t upto) {
  while (!run_deferred(stream, upto))
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

std::int64_t queue(cudaStream_t stream, std::function<bool()> work) {
  const std::lock_guard lock(stream->mutex);
  stream->deferred.emplace_back(++stream->queued, std::move(work));
  return stream->queued;
}

void defer(cudaStream_t stream, std::function<void()> work) {
  if (stream == nullptr) {
    run_deferred_until_done(nullptr);
    work();
    return;
  }
  queue(stream, [work = std::move(work)] {
    work();
    return true;
  });
}

namespace {
std::atomic<bool>& all_deferred() {
  static std::atomic<bool> deferred = [] {
    const char* order = std::getenv("PIPEPLAN_FAKE_DEVICE_ORDER");
    return order != nullptr && std::string(order) == "deferred";
  }();
  return deferred;
}
}  // namespace

void set_all_work_deferred(bool deferred) {
  all_deferred().store(deferred);
}

bool all_work_deferred() {
  return all_deferred().load();
}

void run_or_defer(cudaStream_t stream, std::function<void()> work) {
  // Stream order: the work queued before it runs first, or it queues behind what is not ready.
  if (!all_work_deferred() && run_deferred(stream)) {
    work();
  } else {
    defer(stream, std::move(work));
  }
}

namespace {

// Runs what a recorded event follows (nothing for one never recorded); whether it all ran.
bool run_before(cudaEvent_t event) {
  return !event->recorded.load() || run_deferred(event->stream, event->upto);
}

CUstream_st* new_stream(CUctx_st* context, int priority) {
  auto* stream = new CUstream_st();
  stream->context = context;
  stream->priority = priority;
  const std::lock_guard lock(state().mutex);
  state().streams.insert(stream);
  return stream;
}

void delete_stream(CUstream_st* stream) {
  run_deferred_until_done(stream);
  const std::lock_guard lock(state().mutex);
  state().streams.erase(stream);
  state().destroyed.emplace_back(stream);
}
}  // namespace

std::string check_launch_stream(cudaStream_t stream, const char* call, int status) {
  CUctx_st* current = current_context();
  CUctx_st* owner = context_of(stream);
  if (owner == current) return "";
  return break_rule(std::string(call) + " on a stream of " + owner->name +
                        " while the calling thread's current context is " + current->name +
                        " (a launch must go to a stream of the current context)",
                    status);
}

void count_launch() {
  const std::lock_guard lock(state().mutex);
  ++state().counters.launches;
}

void count_gemm() {
  const std::lock_guard lock(state().mutex);
  ++state().counters.gemms;
}

Counters counters() {
  const std::lock_guard lock(state().mutex);
  return state().counters;
}

void set_device_name(const std::string& name) {
  const std::lock_guard lock(state().mutex);
  state().device_name = name.empty() ? std::string(kDefaultDeviceName) : name;
}

namespace {
// An ordinal of one of the devices cudaGetDeviceCount reports.
bool is_device(int device) {
  const std::lock_guard lock(state().mutex);
  return device >= 0 && device < state().device_count;
}
}  // namespace

void set_device_count(int count) {
  const std::lock_guard lock(state().mutex);
  state().device_count = std::max(count, 1);
}

void set_device_memory_limit(std::int64_t bytes) {
  const std::lock_guard lock(state().mutex);
  state().device_memory_limit = std::max<std::int64_t>(bytes, 0);
}

std::string last_rule_error() {
  const std::lock_guard lock(state().mutex);
  return state().last_rule;
}

namespace {
// Kernels run through kernel_sim; its hook checks each launch's stream here.
const bool hook_installed = [] {
  cuda::sim::set_launch_hook([](cudaStream_t stream, std::function<void()> kernel) {
    const std::string broken = check_launch_stream(stream, "kernel launch", cudaErrorLaunchFailure);
    if (!broken.empty()) throw std::runtime_error(broken);
    count_launch();
    run_or_defer(stream, std::move(kernel));
  });
  return true;
}();
}  // namespace

}  // namespace pipeplan::fake_cuda

using namespace pipeplan::fake_cuda;  // NOLINT(google-build-using-namespace): the C API below

// ---- runtime: device, errors

cudaError_t cudaGetDeviceCount(int* count) {
  const std::lock_guard lock(state().mutex);
  *count = state().device_count;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!is_device(device)) return fail(cudaErrorInvalidDevice);
  thread_state.device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = thread_state.device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!is_device(device)) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  {
    const std::lock_guard lock(state().mutex);
    std::strncpy(prop->name, state().device_name.c_str(), sizeof(prop->name) - 1);
  }
  prop->multiProcessorCount = static_cast<int>(kDeviceSms);
  prop->totalGlobalMem = std::size_t{80} << 30;
  prop->major = 9;
  prop->minor = 0;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}

// The stand-in's address on a bus no management library knows (the profiler's clock sampler
// then finds no device in NVML, where NVML is there at all).
cudaError_t cudaDeviceGetPCIBusId(char* pci_bus_id, int len, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  if (pci_bus_id == nullptr || len < 13) return fail(cudaErrorInvalidValue);
  std::strncpy(pci_bus_id, "00000000:FF:00.0", static_cast<std::size_t>(len) - 1);
  pci_bus_id[len - 1] = '\0';
  return cudaSuccess;
}

// The versions of the headers it is built with (the backend reports which libraries it loaded).
cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDA_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t last = thread_state.last_error;
  thread_state.last_error = cudaSuccess;
  return last;
}

cudaError_t cudaPeekAtLastError() {
  return thread_state.last_error;
}

const char* cudaGetErrorString(cudaError_t error) {
  if (const char* rule = rule_message_for(error)) return rule;
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    default:
      return "fake_device: unexpected error";
  }
}

cudaError_t cudaDeviceSynchronize() {
  run_deferred_until_done(nullptr);
  return cudaSuccess;
}

// ---- runtime: memory

cudaError_t cudaMalloc(void** pointer, std::size_t size) {
  *pointer = nullptr;
  if (size == 0) return cudaSuccess;
  {
    const std::lock_guard lock(state().mutex);
    const std::int64_t limit = state().device_memory_limit;
    if (limit > 0 && state().counters.live_device + static_cast<std::int64_t>(size) > limit)
      return fail(cudaErrorMemoryAllocation);
  }
  void* block = std::aligned_alloc(256, round_up(size));
  if (block == nullptr) return fail(cudaErrorMemoryAllocation);
  const std::lock_guard lock(state().mutex);
  state().device_blocks[block] = size;
  state().counters.live_device += static_cast<std::int64_t>(size);
  *pointer = block;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;  // also the runtime's "initialise" idiom
  run_deferred_until_done(nullptr);            // cudaFree synchronises the device
  bool known = false;
  {
    const std::lock_guard lock(state().mutex);
    const auto it = state().device_blocks.find(pointer);
    if (it != state().device_blocks.end()) {
      known = true;
      state().counters.live_device -= static_cast<std::int64_t>(it->second);
      state().device_blocks.erase(it);
    }
  }
  if (!known) {  // break_rule takes the state's lock
    break_rule("cudaFree of a pointer cudaMalloc did not return (or freed twice)",
               cudaErrorInvalidDevicePointer);
    return fail(cudaErrorInvalidDevicePointer);
  }
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** pointer, std::size_t size) {
  *pointer = std::aligned_alloc(256, round_up(size == 0 ? 1 : size));
  if (*pointer == nullptr) return fail(cudaErrorMemoryAllocation);
  const std::lock_guard lock(state().mutex);
  state().host_blocks[*pointer] = size;
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pointer, std::size_t size, unsigned int /*flags*/) {
  return cudaMallocHost(pointer, size);
}

cudaError_t cudaFreeHost(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  bool known = false;
  {
    const std::lock_guard lock(state().mutex);
    known = state().host_blocks.erase(pointer) != 0;
  }
  if (!known) {
    break_rule("cudaFreeHost of a pointer cudaMallocHost did not return", cudaErrorInvalidValue);
    return fail(cudaErrorInvalidValue);
  }
  std::free(pointer);
  return cudaSuccess;
}

// Device-to-device: deferred (fake_device.h); to or from the host: at once, after the stream's
// deferred work, or, when some of it is not ready, queued behind it, with a host source copied
// first (the host may reuse a pageable source as soon as the call returns).
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (kind == cudaMemcpyDeviceToDevice) {
    defer(stream, [dst, src, count] { std::memmove(dst, src, count); });
  } else if (run_deferred(stream)) {
    std::memmove(dst, src, count);
  } else if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost) {
    const auto* from = static_cast<const unsigned char*>(src);
    defer(stream, [dst, staged = std::vector<unsigned char>(from, from + count)] {
      std::memcpy(dst, staged.data(), staged.size());
    });
  } else {
    defer(stream, [dst, src, count] { std::memmove(dst, src, count); });
  }
  return cudaSuccess;
}

// The driver rejects a batch whose attributes are missing, do not start at copy 0, or leave the
// source access order invalid (the zero value): so does the stand-in, then copies in order.
cudaError_t cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs, const size_t* sizes,
                                 size_t count, cudaMemcpyAttributes* attrs, size_t* attrs_idxs,
                                 size_t num_attrs, cudaStream_t stream) {
  if (count == 0 || attrs == nullptr || attrs_idxs == nullptr || num_attrs == 0 ||
      num_attrs > count || attrs_idxs[0] != 0) {
    return fail(cudaErrorInvalidValue);
  }
  for (size_t a = 0; a < num_attrs; ++a) {
    if (attrs[a].srcAccessOrder == cudaMemcpySrcAccessOrderInvalid) {
      return fail(cudaErrorInvalidValue);
    }
  }
  std::vector<void*> to(dsts, dsts + count);  // the caller's arrays need not outlive the call
  std::vector<const void*> from(srcs, srcs + count);
  std::vector<std::size_t> bytes(sizes, sizes + count);
  defer(stream, [to = std::move(to), from = std::move(from), bytes = std::move(bytes)] {
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i] > 0) std::memmove(to[i], from[i], bytes[i]);
    }
  });
  return cudaSuccess;
}

// One device: no peer to reach.
cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer) {
  if (device != 0 || peer != 0) return fail(cudaErrorInvalidDevice);
  *can_access = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int /*flags*/) {
  return fail(peer != 0 ? cudaErrorInvalidDevice : cudaErrorInvalidValue);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                std::size_t count, cudaStream_t stream) {
  if (dst_device != 0 || src_device != 0) return fail(cudaErrorInvalidDevice);
  if (count == 0) return cudaSuccess;
  if (run_deferred(stream)) {
    std::memmove(dst, src, count);
  } else {
    defer(stream, [dst, src, count] { std::memmove(dst, src, count); });
  }
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, std::size_t count, cudaStream_t stream) {
  if (count > 0)
    run_or_defer(stream, [pointer, value, count] { std::memset(pointer, value, count); });
  return cudaSuccess;
}

// ---- runtime: streams and events

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int /*flags*/) {
  *stream = new_stream(current_context(), 0);
  return cudaSuccess;
}

// An H100's range: 0 (the default, least) down to -5 (greatest).
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = kGreatestStreamPriority;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int /*flags*/,
                                         int priority) {
  if (priority < kGreatestStreamPriority || priority > 0) {
    break_rule("cudaStreamCreateWithPriority: priority " + std::to_string(priority) +
                   " is outside the device's range",
               cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  *stream = new_stream(current_context(), priority);
  return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  *priority = stream != nullptr ? stream->priority : 0;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete_stream(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  run_deferred_until_done(stream);
  return cudaSuccess;
}

// The waiting stream's later work follows the event's: the work it follows runs now, or, when
// some of it is not ready, the waiting stream queues a wait that is ready once it has run.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int /*flags*/) {
  // Allowed across contexts; the work it waits for has run already. A GPU lets a stream wait on
  // an event never recorded and orders nothing: in the backend that is a lost dependency.
  if (!event->recorded.load()) {
    break_rule("cudaStreamWaitEvent on an event never recorded (on a GPU the wait orders nothing)",
               cudaErrorInvalidResourceHandle);
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (run_before(event)) return cudaSuccess;
  CUstream_st* waited = event->stream;
  if (stream == nullptr || waited == nullptr) {  // the legacy stream waits here
    run_deferred_until_done(waited, event->upto);
  } else {
    queue(stream, [waited, upto = event->upto] { return run_deferred_from_work(waited, upto); });
  }
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  *event = new CUevent_st{current_context(), flags, false, {}};
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, 0);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  CUctx_st* stream_context = context_of(stream);
  if (event->context != stream_context) {
    break_rule("cudaEventRecord of an event made in " + event->context->name + " on a stream of " +
                   stream_context->name + " (event and stream must share a context)",
               cudaErrorInvalidResourceHandle);
    return fail(cudaErrorInvalidResourceHandle);
  }
  event->stream = stream;
  if (stream != nullptr) {
    const std::lock_guard lock(stream->mutex);
    event->upto = stream->queued;
  } else {
    event->upto = INT64_MAX;
  }
  event->recorded.store(true);
  event->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}

// Complete once asked about, unless some of the work it follows is not ready: that work runs now.
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return run_before(event) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event->recorded.load()) run_deferred_until_done(event->stream, event->upto);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start->recorded || !end->recorded || (start->flags & cudaEventDisableTiming) != 0 ||
      (end->flags & cudaEventDisableTiming) != 0) {
    return fail(cudaErrorInvalidResourceHandle);
  }
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}

// ---- driver, reached through cudaGetDriverEntryPointByVersion

namespace {

CUresult fake_cuGetErrorString(CUresult error, const char** text) {
  if (const char* rule = rule_message_for(error)) {
    *text = rule;
  } else {
    *text = error == CUDA_SUCCESS ? "no error" : "fake_device: driver error";
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetDevResource(CUdevice /*device*/, CUdevResource* resource,
                                     CUdevResourceType type) {
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_VALUE;
  *resource = CUdevResource{};
  resource->type = CU_DEV_RESOURCE_TYPE_SM;
  resource->sm.smCount = kDeviceSms;
  resource->sm.minSmPartitionSize = kPartitionStep;
  resource->sm.smCoscheduledAlignment = kPartitionStep;
  return CUDA_SUCCESS;
}

// As on Hopper: the count rounds up to a multiple of 8 (at least 8); as many groups as were
// asked for and fit; the rest in `remaining`.
CUresult fake_cuDevSmResourceSplitByCount(CUdevResource* result, unsigned int* groups,
                                          const CUdevResource* input, CUdevResource* remaining,
                                          unsigned int /*flags*/, unsigned int min_count) {
  const unsigned int count =
      std::max(kPartitionStep, (min_count + kPartitionStep - 1) / kPartitionStep * kPartitionStep);
  const unsigned int fit = input->sm.smCount / count;
  const unsigned int made = result == nullptr ? fit : std::min(*groups, fit);
  for (unsigned int i = 0; result != nullptr && i < made; ++i) {
    result[i] = *input;
    result[i].sm.smCount = count;
  }
  if (remaining != nullptr) {
    *remaining = *input;
    remaining->sm.smCount = input->sm.smCount - made * count;
  }
  *groups = made;
  return CUDA_SUCCESS;
}

CUresult fake_cuDevResourceGenerateDesc(CUdevResourceDesc* desc, CUdevResource* resources,
                                        unsigned int count) {
  unsigned int sms = 0;
  for (unsigned int i = 0; i < count; ++i)
    sms += resources[i].sm.smCount;
  auto made = std::make_unique<CUdevResourceDesc_st>(CUdevResourceDesc_st{sms});
  *desc = made.get();
  const std::lock_guard lock(state().mutex);
  state().descs.push_back(std::move(made));
  return CUDA_SUCCESS;
}

CUresult fake_cuGreenCtxCreate(CUgreenCtx* green, CUdevResourceDesc desc, CUdevice /*device*/,
                               unsigned int /*flags*/) {
  static std::atomic<int> made{0};
  *green = new CUgreenCtx_st();
  (*green)->context.green = true;
  (*green)->context.sms = desc->sms;
  (*green)->context.name =
      "green context " + std::to_string(made++) + " (" + std::to_string(desc->sms) + " SMs)";
  return CUDA_SUCCESS;
}

CUresult fake_cuGreenCtxDestroy(CUgreenCtx green) {
  delete green;
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxFromGreenCtx(CUcontext* context, CUgreenCtx green) {
  *context = &green->context;
  return CUDA_SUCCESS;
}

CUresult fake_cuGreenCtxStreamCreate(CUstream* stream, CUgreenCtx green, unsigned int /*flags*/,
                                     int priority) {
  *stream = new_stream(&green->context, priority);
  return CUDA_SUCCESS;
}

CUresult fake_cuStreamDestroy(CUstream stream) {
  delete_stream(stream);
  return CUDA_SUCCESS;
}

CUresult fake_cuStreamGetCtx(CUstream stream, CUcontext* context) {
  *context = context_of(stream);
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxPushCurrent(CUcontext context) {
  std::vector<CUctx_st*>& stack = thread_state.stack;
  CUctx_st* previous = stack.empty() ? nullptr : stack.back();
  const CUresult status = switch_top(previous, context, "cuCtxPushCurrent");
  if (status == CUDA_SUCCESS) stack.push_back(context);
  return status;
}

CUresult fake_cuCtxPopCurrent(CUcontext* context) {
  std::vector<CUctx_st*>& stack = thread_state.stack;
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  CUctx_st* top = stack.back();
  CUctx_st* below = stack.size() > 1 ? stack[stack.size() - 2] : nullptr;
  // The context below becomes current again; it was current here before, so no other thread
  // can have taken it... unless one did meanwhile, which is the rule's business too.
  const CUresult status = switch_top(top, below, "cuCtxPopCurrent");
  if (status != CUDA_SUCCESS) return status;
  stack.pop_back();
  if (context != nullptr) *context = top;
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxSetCurrent(CUcontext context) {
  std::vector<CUctx_st*>& stack = thread_state.stack;
  CUctx_st* previous = stack.empty() ? nullptr : stack.back();
  const CUresult status = switch_top(previous, context, "cuCtxSetCurrent");
  if (status != CUDA_SUCCESS) return status;
  if (stack.empty()) {
    if (context != nullptr) stack.push_back(context);
  } else if (context != nullptr) {
    stack.back() = context;
  } else {
    stack.pop_back();
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxGetCurrent(CUcontext* context) {
  const std::vector<CUctx_st*>& stack = thread_state.stack;
  *context = stack.empty() ? nullptr : stack.back();
  return CUDA_SUCCESS;
}

template <typename Fn>
void* entry(Fn function) {
  return reinterpret_cast<void*>(function);
}

const std::unordered_map<std::string, void*>& driver_entries() {
  static const std::unordered_map<std::string, void*> entries{
      {"cuGetErrorString", entry(&fake_cuGetErrorString)},
      {"cuDeviceGet", entry(&fake_cuDeviceGet)},
      {"cuDeviceGetDevResource", entry(&fake_cuDeviceGetDevResource)},
      {"cuDevSmResourceSplitByCount", entry(&fake_cuDevSmResourceSplitByCount)},
      {"cuDevResourceGenerateDesc", entry(&fake_cuDevResourceGenerateDesc)},
      {"cuGreenCtxCreate", entry(&fake_cuGreenCtxCreate)},
      {"cuGreenCtxDestroy", entry(&fake_cuGreenCtxDestroy)},
      {"cuCtxFromGreenCtx", entry(&fake_cuCtxFromGreenCtx)},
      {"cuGreenCtxStreamCreate", entry(&fake_cuGreenCtxStreamCreate)},
      {"cuStreamDestroy", entry(&fake_cuStreamDestroy)},
      {"cuStreamGetCtx", entry(&fake_cuStreamGetCtx)},
      {"cuCtxPushCurrent", entry(&fake_cuCtxPushCurrent)},
      {"cuCtxPopCurrent", entry(&fake_cuCtxPopCurrent)},
      {"cuCtxSetCurrent", entry(&fake_cuCtxSetCurrent)},
      {"cuCtxGetCurrent", entry(&fake_cuCtxGetCurrent)},
  };
  return entries;
}

}  // namespace

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function,
                                             unsigned int /*version*/, unsigned long long /*flags*/,
                                             cudaDriverEntryPointQueryResult* status) {
  const auto it = driver_entries().find(symbol);
  *function = it != driver_entries().end() ? it->second : nullptr;
  if (status != nullptr)
    *status =
        *function != nullptr ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
