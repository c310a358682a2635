// Stages that share one GPU (an emulated pipeline, or several stages placed on one device)
// exchange tensors by device-to-device copies. send() never waits: it queues the message (its
// tensors, which stay the sender's until copied) with what the copy must follow on the sender's
// side, the end event of the compute node that produced it (StepEvents::payload_ready, else the
// sender stream's tail then). recv(), on the receiving stream's thread once the plan's
// dependencies of the recv node are met, pops the link's FIFO (with the Transport contract's
// timeout and cancel), takes the receive buffers from the *receiver's* allocator (so the bytes
// count where they live), copies on a stream of the link (from, to, channel) and returns once
// the copy is complete; the sources then go back to the sender's allocator (CopyWait::stream:
// returns once the copy is queued, with its Arrival; the sources go back as it ends). So a
// message's memory moves when both halves of the transfer are ready, as in the simulator's
// rendezvous: a BPipe load lands after the backward that frees its slot, not when the acceptor
// sends it.
//
// Ordering with events only, never a wait on a stream that could be waiting for us: the link
// stream waits for (a) the producer's event and (b) the last reader of the receive buffers,
// because they come from the receiver's caching allocator and a block it freed may still be read
// by kernels queued there: the receiver's first fence after the block was freed
// (StepEvents::fence_after), else the receiver stream's tail; nothing for a block fresh from
// cudaMalloc. Every wait is on work already queued, so the copy always completes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "planner/graph/taskgraph.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/green_context.h"
#include "runtime/cuda/step_events.h"
#include "runtime/transport.h"

namespace pipeplan::cuda {

// How the device-to-device copies are issued. `memcpy`: cudaMemcpyAsync, which on one GPU runs
// as a copy kernel on the link stream's SMs (the sender's green context when emulated), so it
// shares them with the sender's compute. `overlap`: cudaMemcpyBatchAsync with the driver hint
// cudaMemcpyFlagPreferOverlapWithCompute (CUDA 12.8 and later), which asks for a copy that
// overlaps compute work on the SMs. `priority`: cudaMemcpyAsync on link streams of the device's
// greatest stream priority (the compute streams keep the default, the least), so that as the
// sender's running kernel drains, the block scheduler dispatches the copy's blocks before the
// next compute kernel's. Chosen by $PIPEPLAN_DEVICE_COPY (docs/design/runtime.md). Measured on an
// H200 at 8 emulated stages (BPipe, mbs 2): the hint changed nothing (a copy took 1.3 ms beside
// idle SMs, 8.7 ms median beside a forward, either way); priority streams cut the copies beside the
// sender's compute from 15.9 ms median to 3.7 ms (the same run, 2026-11-27), so they are the
// default.
enum class DeviceCopy { memcpy, overlap, priority };
inline constexpr const char* kDeviceCopyEnv = "PIPEPLAN_DEVICE_COPY";
// $PIPEPLAN_DEVICE_COPY: unset or empty gives `priority`; "overlap" needs the batch API (CUDA 13);
// anything but "memcpy", "overlap" or "priority" is an Error naming the variable.
DeviceCopy device_copy_from_env();
const char* to_string(DeviceCopy copy);

// How the receiving side waits for a copy to end. `blocking`: the receiving thread waits on a
// blocking-sync event (cudaEventSynchronize), asleep until the driver wakes it, and the recv
// returns once the copy is complete. `poll`: the same, by cudaEventQuery every kCopyPollInterval,
// asleep between queries. Measured on an H200 with `blocking`, a hop took 0.20 to 0.64 ms (median
// per run) from the copy's end to the recv's end on the host (docs/design/runtime.md, "What
// measurement on a GPU put into the runtime"), and only then could the consumer's thread queue the
// op that reads it. `stream`: no thread waits; recv returns once the copy is queued, with an
// Arrival (the copy's own event) that the executor has the consumer's stream wait for on the GPU
// before the consumer's kernels, so the consumer is queued ahead and starts as the copy ends; the
// sources go back to the sender's cache from a thread per link that waits for each copy in turn
// (flush() waits for that). Chosen by $PIPEPLAN_COPY_WAIT: unset or empty gives `blocking`;
// anything but "blocking", "poll" or "stream" is an Error naming the variable.
enum class CopyWait { blocking, poll, stream };
inline constexpr const char* kCopyWaitEnv = "PIPEPLAN_COPY_WAIT";
inline constexpr std::chrono::microseconds kCopyPollInterval{20};
CopyWait copy_wait_from_env();
const char* to_string(CopyWait wait);

// One directed link of a plan: its send nodes' (device, peer, stream role).
struct TransportLink {
  int from = 0;
  int to = 0;
  Channel channel = Channel::pipeline;
  auto operator<=>(const TransportLink&) const = default;
};

// Every directed link a plan's send nodes use, sorted: the order all ranks create them in.
std::vector<TransportLink> transport_links(const TaskGraph& plan);

// What the transport needs of one plan device (one pipeline stage's backend).
struct StageEndpoint {
  int cuda_device = 0;
  cudaStream_t compute = nullptr;        // the stream the stage's backend queues on
  DeviceAllocator* allocator = nullptr;  // the stage's memory: receive buffers come from it
  GreenContext* green = nullptr;         // emulated: link streams are made in the sender's
};

class DeviceLocalTransport final : public Transport {
 public:
  // `events` (may be null) gives the producing node's end event and records transfer times.
  explicit DeviceLocalTransport(std::vector<StageEndpoint> endpoints, StepEvents* events = nullptr,
                                DeviceCopy copy = device_copy_from_env(),
                                CopyWait wait = copy_wait_from_env());
  ~DeviceLocalTransport() override;
  DeviceLocalTransport(const DeviceLocalTransport&) = delete;
  DeviceLocalTransport& operator=(const DeviceLocalTransport&) = delete;

  // Makes the links' streams and events now, on this thread, rather than on a send thread's first
  // send: that needs the sender's and receiver's green contexts pushed (events belong to their
  // stream's context), and the driver wants a green context current on one thread at a time,
  // which holds before the executor's threads start. A link not opened here is made on first use.
  void open_links(const std::vector<TransportLink>& links);
  // The stream a link's copies run on (made now if it was not): for tests and diagnostics.
  cudaStream_t link_stream(int from, int to, Channel channel) {
    return link(from, to, channel).stream;
  }

  std::string name() const override {
    return std::string("device-local (copies: ") + to_string(copy_) +
           ", wait: " + to_string(wait_) + ")";
  }
  void send(int from, int to, Channel channel, Message message) override;
  Message recv(int to, int from, Channel channel, std::string_view expected_tag,
               std::chrono::milliseconds timeout) override;
  // Waits until the receiver has copied every message sent so far on the link and the sources
  // went back to the sender's cache.
  void flush(int from, int to, Channel channel, std::chrono::milliseconds timeout) override;
  void cancel() override;
  void reset() override;

 private:
  using LinkKey = std::tuple<int, int, Channel>;
  class CopyArrival;
  // CopyWait::stream: the copies a link queued whose sources have not gone back to the sender,
  // oldest first, and the thread that gives them back as each copy ends.
  struct Reaper {
    struct InFlight {
      Message source;
      std::shared_ptr<const CopyArrival> arrival;
    };
    std::mutex mutex;
    std::condition_variable changed;
    std::deque<InFlight> queue;
    bool stopping = false;
    std::thread thread;
  };
  struct Link {
    cudaStream_t stream = nullptr;
    bool owns_stream = false;  // false: made in a green context, which destroys it
    cudaEvent_t receiver_tail = nullptr;
    cudaEvent_t copied = nullptr;    // blocking and poll: the copy the receiving thread waits for
    std::unique_ptr<Reaper> reaper;  // stream
  };
  struct EventDeleter {
    void operator()(cudaEvent_t event) const;
  };
  // A sent message whose copy its receiver has not made yet.
  struct Pending {
    Message source;                                  // the sender's tensors
    cudaEvent_t ready = nullptr;                     // the copy follows it on the sender's side
    std::unique_ptr<CUevent_st, EventDeleter> tail;  // owns `ready` when it is the stream's tail
    cudaEvent_t arrived = nullptr;  // a message sent on before it landed: its copy in (stream)
    std::pair<cudaEvent_t, cudaEvent_t> marks{};  // StepEvents::transfer_marks of the send
  };
  const StageEndpoint& endpoint(int device, const char* role) const;
  Link& link(int from, int to, Channel channel);  // made on first use
  // The copy of one popped message into the receiver's memory, on the receiving thread.
  Message deliver(int from, int to, Channel channel, Pending pending);
  // Queues the copy of every tensor of `source` into `target`'s (same sizes) on `stream`.
  void copy_tensors(const Message& source, const Message& target, cudaStream_t stream) const;
  // The sources of a copy go back to the sender's allocator: counted for flush().
  void released(const LinkKey& key);
  // A link's reaper thread (CopyWait::stream): waits for each queued copy, then releases it.
  void reap(Reaper& reaper, LinkKey key);
  // Stops the reapers once their copies are released (the destructor).
  void stop_reapers();

  std::vector<StageEndpoint> endpoints_;
  StepEvents* events_;
  DeviceCopy copy_;
  CopyWait wait_;
  std::mutex links_mutex_;
  std::map<LinkKey, Link> links_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<LinkKey, std::deque<Pending>> queues_;
  // Per link since the last reset: messages sent, and those whose sources were given back.
  std::map<LinkKey, std::int64_t> sent_;
  std::map<LinkKey, std::int64_t> released_;
  std::int64_t in_flight_ = 0;  // stream: copies queued whose sources were not given back yet
  std::string reaper_error_;    // stream: the first failure a reaper met, reported by flush/reset
  std::condition_variable released_changed_;
  bool cancelled_ = false;
};

}  // namespace pipeplan::cuda
