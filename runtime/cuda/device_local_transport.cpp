#include "runtime/cuda/device_local_transport.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>

#include "runtime/cuda/cuda_check.h"

namespace pipeplan::cuda {

namespace {

std::string link_name(int from, int to, Channel channel) {
  return std::string(to_string(channel)) + " link " + std::to_string(from) + "->" +
         std::to_string(to);
}

// cudaMemcpyBatchAsync in the form used here (CUDA 13 dropped the failure-index argument the
// 12.8 form had): one condition for the mode's parsing and for the call.
#if defined(CUDART_VERSION) && CUDART_VERSION >= 13000
#define PIPEPLAN_HAVE_BATCH_COPY 1
constexpr bool kHaveBatchCopy = true;
#else
constexpr bool kHaveBatchCopy = false;
#endif

// The choice $`name` names (by to_string) among `choices`; unset or empty gives `fallback`, and
// anything else is an Error naming the variable and the choices.
template <typename Choice, std::size_t N>
Choice choice_from_env(const char* name, Choice fallback, const std::array<Choice, N>& choices) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  const std::string text(value);
  std::string expected;
  for (std::size_t i = 0; i < N; ++i) {
    if (text == to_string(choices[i])) return choices[i];
    expected += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(to_string(choices[i]));
  }
  throw Error(std::string(name) + " is '" + text + "' (expected " + expected + ")");
}

}  // namespace

DeviceCopy device_copy_from_env() {
  // priority by default: on an H200 it cut the copies beside compute fourfold
  // (docs/design/runtime.md).
  const DeviceCopy copy =
      choice_from_env(kDeviceCopyEnv, DeviceCopy::priority,
                      std::array{DeviceCopy::memcpy, DeviceCopy::overlap, DeviceCopy::priority});
  if (copy == DeviceCopy::overlap && !kHaveBatchCopy) {
    throw Error(std::string(kDeviceCopyEnv) +
                "=overlap needs cudaMemcpyBatchAsync (CUDA 13); this module was built without it");
  }
  return copy;
}

const char* to_string(DeviceCopy copy) {
  switch (copy) {
    case DeviceCopy::memcpy:
      return "memcpy";
    case DeviceCopy::overlap:
      return "overlap";
    case DeviceCopy::priority:
      return "priority";
  }
  return "?";
}

CopyWait copy_wait_from_env() {
  return choice_from_env(kCopyWaitEnv, CopyWait::blocking,
                         std::array{CopyWait::blocking, CopyWait::poll, CopyWait::stream});
}

const char* to_string(CopyWait wait) {
  switch (wait) {
    case CopyWait::blocking:
      return "blocking";
    case CopyWait::poll:
      return "poll";
    case CopyWait::stream:
      return "stream";
  }
  return "?";
}

// The arrival of one copy (CopyWait::stream): an event of its own, recorded after the copy on the
// link's stream (a link's next copy must not move it), and the receiving stage's stream, which its
// readers queue on. Blocking sync: the link's reaper sleeps on it.
class DeviceLocalTransport::CopyArrival final : public Arrival {
 public:
  CopyArrival(cudaStream_t link_stream, const StageEndpoint& receiver)
      : event_(create_event_for(link_stream, cudaEventDisableTiming | cudaEventBlockingSync)),
        device_(receiver.cuda_device),
        stream_(receiver.compute),
        context_(receiver.green != nullptr ? receiver.green->context() : nullptr) {}
  ~CopyArrival() override { cudaEventDestroy(event_); }  // released once it completes
  CopyArrival(const CopyArrival&) = delete;
  CopyArrival& operator=(const CopyArrival&) = delete;

  cudaEvent_t event() const { return event_; }
  // On the reader's thread: its stage's stream waits for the copy (an event of another context of
  // the same device: allowed), under the stage's context and lock like every call on that stream.
  void order_reader() const override {
    CUDA_CHECK(cudaSetDevice(device_));
    const ScopedContext current(context_);
    CUDA_CHECK(cudaStreamWaitEvent(stream_, event_, 0));
  }

 private:
  cudaEvent_t event_;
  int device_;
  cudaStream_t stream_;
  CUcontext context_;
};

std::vector<TransportLink> transport_links(const TaskGraph& plan) {
  std::set<TransportLink> links;
  for (int id = 0; id < plan.node_count(); ++id) {
    const Node& node = plan.node(id);
    if (node.kind != NodeKind::send) continue;
    const Stream& stream = plan.streams()[static_cast<std::size_t>(node.stream)];
    links.insert({node.device, node.peer,
                  stream.role == StreamRole::transfer ? Channel::transfer : Channel::pipeline});
  }
  return {links.begin(), links.end()};
}

void DeviceLocalTransport::open_links(const std::vector<TransportLink>& links) {
  for (const TransportLink& l : links)
    (void)link(l.from, l.to, l.channel);
}

DeviceLocalTransport::DeviceLocalTransport(std::vector<StageEndpoint> endpoints, StepEvents* events,
                                           DeviceCopy copy, CopyWait wait)
    : endpoints_(std::move(endpoints)), events_(events), copy_(copy), wait_(wait) {
  for (std::size_t d = 0; d < endpoints_.size(); ++d) {
    if (endpoints_[d].compute == nullptr || endpoints_[d].allocator == nullptr) {
      throw Error("device-local transport: device " + std::to_string(d) +
                  " has no stream or allocator");
    }
  }
}

DeviceLocalTransport::~DeviceLocalTransport() {
  stop_reapers();
  // No throwing from a destructor: a failure here is reported by the next checked call.
  for (auto& [key, link] : links_) {
    if (link.stream != nullptr) cudaStreamSynchronize(link.stream);
    if (link.owns_stream) cudaStreamDestroy(link.stream);
    for (cudaEvent_t event : {link.receiver_tail, link.copied}) {
      if (event != nullptr) cudaEventDestroy(event);
    }
  }
}

const StageEndpoint& DeviceLocalTransport::endpoint(int device, const char* role) const {
  if (device < 0 || device >= static_cast<int>(endpoints_.size())) {
    throw Error(std::string("device-local transport: ") + role + " device " +
                std::to_string(device) + " is not one of its " + std::to_string(endpoints_.size()));
  }
  return endpoints_[static_cast<std::size_t>(device)];
}

DeviceLocalTransport::Link& DeviceLocalTransport::link(int from, int to, Channel channel) {
  const std::lock_guard lock(links_mutex_);
  auto [it, inserted] = links_.try_emplace(LinkKey{from, to, channel});
  Link& link = it->second;
  if (!inserted) return link;
  const StageEndpoint& sender = endpoint(from, "sending");
  CUDA_CHECK(cudaSetDevice(sender.cuda_device));
  int priority = 0;  // the default: the compute streams'
  if (copy_ == DeviceCopy::priority) {
    int least = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &priority));  // greatest: lowest number
  }
  if (sender.green != nullptr) {
    link.stream = sender.green->create_stream(priority);  // copies stay inside the stage's SMs
  } else {
    CUDA_CHECK(cudaStreamCreateWithPriority(&link.stream, cudaStreamNonBlocking, priority));
    link.owns_stream = true;
  }
  // Each event in the context of the stream it is recorded on. The receiving thread waits on
  // `copied` for as long as the producing op runs (milliseconds): with blocking sync, or polling
  // (CopyWait::poll), it sleeps instead of spinning. Spinning, the 2P - 2 receiving threads and
  // the P compute threads of an emulated pipeline outnumber a 16-core host's cores from P = 7;
  // the suspected cause of the compute stalls measured at 8 stages (docs/design/runtime.md, "What
  // measurement on a GPU put into the runtime").
  link.copied =
      create_event_for(link.stream, cudaEventDisableTiming |
                                        (wait_ == CopyWait::blocking ? cudaEventBlockingSync : 0U));
  link.receiver_tail = create_event_for(endpoint(to, "receiving").compute, cudaEventDisableTiming);
  if (wait_ == CopyWait::stream) {
    link.reaper = std::make_unique<Reaper>();
    link.reaper->thread =
        std::thread([this, reaper = link.reaper.get(), key = it->first] { reap(*reaper, key); });
  }
  return link;
}

void DeviceLocalTransport::reap(Reaper& reaper, LinkKey key) {
  // The link's GPU current on this thread too, not the first device's primary context.
  const cudaError_t device = cudaSetDevice(endpoint(std::get<0>(key), "sending").cuda_device);
  for (;;) {
    Reaper::InFlight item;
    {
      std::unique_lock lock(reaper.mutex);
      reaper.changed.wait(lock, [&] { return reaper.stopping || !reaper.queue.empty(); });
      if (reaper.queue.empty()) return;  // stopping, and every copy released
      item = std::move(reaper.queue.front());
      reaper.queue.pop_front();
    }
    // Asleep until the copy ends (blocking sync), off every stage's critical path: only the
    // sender's reuse of the blocks waits for this.
    const cudaError_t status =
        device != cudaSuccess ? device : cudaEventSynchronize(item.arrival->event());
    item.source.tensors.clear();  // back to the sender's cache
    if (status != cudaSuccess) {
      const std::lock_guard lock(mutex_);
      if (reaper_error_.empty()) {
        reaper_error_ = "device-local transport: waiting for a copy on the " +
                        link_name(std::get<0>(key), std::get<1>(key), std::get<2>(key)) + ": " +
                        cudaGetErrorString(status);
      }
    }
    released(key);
  }
}

void DeviceLocalTransport::stop_reapers() {
  for (auto& [key, link] : links_) {
    if (!link.reaper) continue;
    {
      const std::lock_guard lock(link.reaper->mutex);
      link.reaper->stopping = true;
    }
    link.reaper->changed.notify_all();
    if (link.reaper->thread.joinable()) link.reaper->thread.join();
  }
}

void DeviceLocalTransport::released(const LinkKey& key) {
  {
    const std::lock_guard lock(mutex_);
    ++released_[key];
    if (wait_ == CopyWait::stream) --in_flight_;
  }
  released_changed_.notify_all();
}

void DeviceLocalTransport::EventDeleter::operator()(cudaEvent_t event) const {
  if (event != nullptr) cudaEventDestroy(event);  // released once it completes
}

void DeviceLocalTransport::send(int from, int to, Channel channel, Message message) {
  const StageEndpoint& sender = endpoint(from, "sending");
  const StageEndpoint& receiver = endpoint(to, "receiving");
  if (sender.cuda_device != receiver.cuda_device) {
    throw Error("device-local transport: " + link_name(from, to, channel) + " joins GPU " +
                std::to_string(sender.cuda_device) + " and GPU " +
                std::to_string(receiver.cuda_device) + " (use the NCCL transport)");
  }
  for (const auto& [name, tensor] : message.tensors) {
    if (!tensor.defined() || tensor.device() != Device::cuda || tensor.bytes() <= 0) {
      throw Error("device-local transport: tensor '" + name + "' of message '" + message.tag +
                  "' is not a non-empty CUDA tensor");
    }
  }
  (void)link(from, to, channel);  // its streams and events, made on this thread if not opened
  CUDA_CHECK(cudaSetDevice(sender.cuda_device));
  Pending pending;
  // What the copy waits for on the sender's side, known only while the send node runs: the
  // payload's producer, else (a held BPipe stash, or no StepEvents) the sender stream's tail now.
  pending.ready = events_ != nullptr ? events_->payload_ready(from, from, to, channel) : nullptr;
  // A message sent on before it landed here (a held BPipe stash, stream-ordered): its copy out
  // follows its copy in, on the GPU.
  if (message.arrival != nullptr) {
    const auto* arrived = dynamic_cast<const CopyArrival*>(message.arrival.get());
    if (arrived == nullptr) {
      throw Error("device-local transport: message '" + message.tag +
                  "' is still arriving through another transport");
    }
    pending.arrived = arrived->event();
  }
  if (pending.ready == nullptr && pending.arrived == nullptr) {
    pending.tail.reset(create_event_for(sender.compute, cudaEventDisableTiming));
    const ScopedContext current(sender.green != nullptr ? sender.green->context() : nullptr);
    CUDA_CHECK(cudaEventRecord(pending.tail.get(), sender.compute));
    pending.ready = pending.tail.get();
  }
  if (events_ != nullptr) pending.marks = events_->transfer_marks(from, from, to, channel);
  pending.source = std::move(message);
  {
    const std::lock_guard lock(mutex_);
    queues_[LinkKey{from, to, channel}].push_back(std::move(pending));
    ++sent_[LinkKey{from, to, channel}];
  }
  arrived_.notify_all();
}

Message DeviceLocalTransport::deliver(int from, int to, Channel channel, Pending pending) {
  const StageEndpoint& sender = endpoint(from, "sending");
  const StageEndpoint& receiver = endpoint(to, "receiving");
  Link& l = link(from, to, channel);
  CUDA_CHECK(cudaSetDevice(receiver.cuda_device));
  // Each stage's green context is used under its lock (ScopedContext): the sender's for the link
  // stream, the receiver's for recording its tail; never both at once.
  const CUcontext sender_context = sender.green != nullptr ? sender.green->context() : nullptr;
  const CUcontext receiver_context =
      receiver.green != nullptr ? receiver.green->context() : nullptr;
  const Message& source = pending.source;
  std::shared_ptr<const CopyArrival> arrival;  // CopyWait::stream
  Message copy;
  copy.tag = source.tag;
  copy.bytes = source.bytes;
  std::int64_t freed_at = DeviceAllocator::kNeverUsed;  // the latest free among the blocks taken
  for (const auto& [name, tensor] : source.tensors) {
    DeviceAllocator::FencedBlock block = receiver.allocator->allocate_fenced(tensor.bytes());
    freed_at = std::max(freed_at, block.freed_at);
    copy.tensors.emplace_back(
        name, Tensor(std::move(block.data), tensor.shape(), tensor.dtype(), Device::cuda));
  }
  // The receiver's cache may have handed out blocks that kernels queued on its stream still read
  // (freed by one of its threads after queueing them): the copy waits for the first event the
  // receiver recorded after the latest of those frees (its fence), not for everything queued
  // there since, which can be many ops ahead of the GPU (docs/design/runtime.md, "What measurement
  // on a GPU put into the runtime"). Without a recorded fence, it waits for what is queued there
  // once the blocks are taken, so that record comes after the allocations. Fresh blocks need no
  // wait.
  cudaEvent_t last_use = nullptr;
  if (freed_at != DeviceAllocator::kNeverUsed) {
    last_use = events_ != nullptr ? events_->fence_after(to, freed_at) : nullptr;
    if (last_use == nullptr) {
      const ScopedContext current(receiver_context);
      CUDA_CHECK(cudaEventRecord(l.receiver_tail, receiver.compute));
      last_use = l.receiver_tail;
    }
  }
  {
    const ScopedContext current(sender_context);
    for (cudaEvent_t after : {pending.ready, pending.arrived, last_use}) {
      if (after != nullptr) CUDA_CHECK(cudaStreamWaitEvent(l.stream, after, 0));
    }
    const auto [begin, end] = pending.marks;
    if (begin != nullptr) CUDA_CHECK(cudaEventRecord(begin, l.stream));
    copy_tensors(source, copy, l.stream);
    if (end != nullptr) CUDA_CHECK(cudaEventRecord(end, l.stream));
    if (wait_ == CopyWait::stream) {
      arrival = std::make_shared<const CopyArrival>(l.stream, receiver);
      CUDA_CHECK(cudaEventRecord(arrival->event(), l.stream));
    } else {
      CUDA_CHECK(cudaEventRecord(l.copied, l.stream));
    }
  }
  if (wait_ == CopyWait::stream) {
    // The receiver's readers wait for the copy on the GPU (Arrival); the link's reaper gives the
    // sources back once it ends.
    copy.arrival = arrival;
    {
      const std::lock_guard lock(mutex_);
      ++in_flight_;
    }
    {
      const std::lock_guard lock(l.reaper->mutex);
      l.reaper->queue.push_back({std::move(pending.source), std::move(arrival)});
    }
    l.reaper->changed.notify_one();
    return copy;
  }
  // The sources go back to the sender's allocator (its stream may then reuse the blocks) only
  // after the copy, and the receiver may use the copy at once: wait here, on the receiving
  // stream's thread, holding no stage's lock. Waiting on a recorded event reads its completion
  // and changes no context state. Not cancellable: the sources must outlive the copy, which
  // always completes (it waits only on events already recorded).
  if (wait_ == CopyWait::poll) {
    for (;;) {
      const cudaError_t status = cudaEventQuery(l.copied);
      if (status == cudaSuccess) break;
      if (status != cudaErrorNotReady) CUDA_CHECK(status);
      std::this_thread::sleep_for(kCopyPollInterval);
    }
  } else {
    CUDA_CHECK(cudaEventSynchronize(l.copied));
  }
  pending.source.tensors.clear();  // back to the sender's cache: flush() may return
  released(LinkKey{from, to, channel});
  return copy;
}

void DeviceLocalTransport::copy_tensors(const Message& source, const Message& target,
                                        cudaStream_t stream) const {
  const std::size_t count = target.tensors.size();
  if (copy_ == DeviceCopy::overlap) {
#ifdef PIPEPLAN_HAVE_BATCH_COPY
    std::vector<void*> dsts(count);
    std::vector<const void*> srcs(count);
    std::vector<std::size_t> sizes(count);
    for (std::size_t i = 0; i < count; ++i) {
      dsts[i] = target.tensors[i].second.data();
      srcs[i] = source.tensors[i].second.data();
      sizes[i] = static_cast<std::size_t>(source.tensors[i].second.bytes());
    }
    // One attribute for the whole batch: sources read in stream order (after the waits above).
    cudaMemcpyAttributes attributes{};
    attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attributes.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    std::size_t first = 0;
    CUDA_CHECK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), count, &attributes,
                                    &first, 1, stream));
    return;
#endif
  }
  for (std::size_t i = 0; i < count; ++i) {
    const Tensor& from = source.tensors[i].second;
    CUDA_CHECK(cudaMemcpyAsync(target.tensors[i].second.data(), from.data(),
                               static_cast<std::size_t>(from.bytes()), cudaMemcpyDeviceToDevice,
                               stream));
  }
}

Message DeviceLocalTransport::recv(int to, int from, Channel channel, std::string_view expected_tag,
                                   std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  auto& queue = queues_[LinkKey{from, to, channel}];
  const bool ready = arrived_.wait_for(lock, timeout, [&] { return cancelled_ || !queue.empty(); });
  if (cancelled_) {
    throw Cancelled("cancelled while waiting for '" + std::string(expected_tag) + "'");
  }
  if (!ready) {
    throw Error("timed out after " + std::to_string(timeout.count()) + " ms waiting for '" +
                std::string(expected_tag) + "' on the " + link_name(from, to, channel));
  }
  Pending pending = std::move(queue.front());
  queue.pop_front();
  lock.unlock();
  return deliver(from, to, channel, std::move(pending));
}

void DeviceLocalTransport::flush(int from, int to, Channel channel,
                                 std::chrono::milliseconds timeout) {
  const LinkKey key{from, to, channel};
  std::unique_lock lock(mutex_);
  const std::int64_t sent = sent_[key];
  const bool done = released_changed_.wait_for(
      lock, timeout, [&] { return cancelled_ || released_[key] >= sent; });
  if (cancelled_)
    throw Cancelled("cancelled while waiting for the " + link_name(from, to, channel));
  if (!reaper_error_.empty()) throw Error(reaper_error_);
  if (!done) {
    throw Error("timed out after " + std::to_string(timeout.count()) + " ms waiting for the " +
                link_name(from, to, channel) + " to copy " + std::to_string(sent - released_[key]) +
                " sent message(s) out of the sender");
  }
}

void DeviceLocalTransport::cancel() {
  {
    const std::lock_guard lock(mutex_);
    cancelled_ = true;
  }
  arrived_.notify_all();
  released_changed_.notify_all();
}

void DeviceLocalTransport::reset() {
  std::unique_lock lock(mutex_);
  // Stream-ordered copies of the last step still being released: the new step starts with the
  // senders' memory back (they end, as they wait only for work queued before them).
  released_changed_.wait(lock, [&] { return in_flight_ == 0; });
  if (!reaper_error_.empty()) {
    const std::string error = std::exchange(reaper_error_, std::string());
    throw Error(error);
  }
  cancelled_ = false;
  queues_.clear();
  sent_.clear();
  released_.clear();
}

}  // namespace pipeplan::cuda
