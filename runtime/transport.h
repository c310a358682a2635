// Point-to-point communication between the executor's device workers. A message carries its tag
// (the payload's task-graph label, e.g. "0F3" or "evict 0F3") and its declared size in bytes;
// messages on one link (from, to, channel) arrive in the order they were sent, which is the
// planned order of the sending stream (the receiving stream mirrors it, as NCCL point-to-point
// requires). The receiver checks both tag and size (check_message), so a dropped, reordered or
// corrupted message is an Error naming the node, never a hang: every recv has a timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "runtime/backend.h"

namespace pipeplan {

// Links between one device pair: activations and gradients (send/recv streams) and BPipe
// stashes (transfer streams) are ordered independently, as they are in the plan.
enum class Channel : std::uint8_t { pipeline, transfer };
std::string_view to_string(Channel channel);

// Thrown by a wait that another failure ended (a cancel(), or in a multi-process run a peer's
// notice that it failed): a consequence, not a cause, so reports lead with the cause.
class Cancelled : public Error {
 public:
  using Error::Error;
};

// A payload that a transport's recv returned before it landed (the device-local transport with
// PIPEPLAN_COPY_WAIT=stream: the copy is queued on the GPU, the host goes on). Whatever reads the
// payload must be ordered after its arrival: the executor calls order_reader() on the thread of
// each same-device node that reads the recv (the plan's data edges), before that node queues any
// work; a message sent on (a held BPipe stash) keeps its arrival for the transport that sends it.
class Arrival {
 public:
  virtual ~Arrival() = default;
  // Queues the calling stage's next work behind the arrival (a wait on the GPU) and returns at
  // once; does not wait on the host.
  virtual void order_reader() const = 0;
};

struct Message {
  std::string tag;
  std::int64_t bytes = 0;  // declared payload size
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::shared_ptr<const Arrival> arrival;  // null: the payload is there when recv returns
  std::int64_t payload_bytes() const;      // what the tensors actually hold
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  // Never blocks for the receiver (buffered, like a small NCCL send).
  virtual void send(int from, int to, Channel channel, Message message) = 0;
  // The next message on the link from `from` to `to`. Throws Error after `timeout` naming the
  // link and `expected_tag`, or Cancelled at once after cancel().
  virtual Message recv(int to, int from, Channel channel, std::string_view expected_tag,
                       std::chrono::milliseconds timeout) = 0;
  // Returns once no message sent so far on the link from `from` to `to` holds the sender's
  // memory any more (its tensors copied out and given back): the executor calls it after a send
  // that a node of the sender waits for (a BPipe eviction whose memory the op after next reuses).
  // Throws Error after `timeout` naming the link, or Cancelled after cancel(). A transport whose
  // send copies at once (in-process) has nothing to wait for.
  virtual void flush(int from, int to, Channel channel, std::chrono::milliseconds timeout) {
    (void)from, (void)to, (void)channel, (void)timeout;
  }
  // Wakes every waiting recv with Cancelled (a worker failed; the step is over). A transport
  // between processes also tells the peers, whose waits then end with Cancelled too.
  virtual void cancel() = 0;
  // Forgets undelivered messages and a cancel; called before every step.
  virtual void reset() = 0;
  // Ends a transport after its last step: waits for what it still has in flight and releases
  // what it shares with its peers, each wait within `timeout`; throws Error naming what did not
  // end (and then releases without waiting, as a transport destroyed after a failure does). A
  // second call does nothing. A transport whose sends and receives end with their calls has
  // nothing to wait for.
  virtual void close(std::chrono::milliseconds timeout) { (void)timeout; }
};

// A transport owned elsewhere and shared: every call goes to `inner`, so an executor can own a
// handle while the owner keeps (and drains) the transport itself.
class SharedTransportRef : public Transport {
 public:
  explicit SharedTransportRef(std::shared_ptr<Transport> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  void send(int from, int to, Channel channel, Message message) override {
    inner_->send(from, to, channel, std::move(message));
  }
  Message recv(int to, int from, Channel channel, std::string_view expected_tag,
               std::chrono::milliseconds timeout) override {
    return inner_->recv(to, from, channel, expected_tag, timeout);
  }
  void flush(int from, int to, Channel channel, std::chrono::milliseconds timeout) override {
    inner_->flush(from, to, channel, timeout);
  }
  void cancel() override { inner_->cancel(); }
  void reset() override { inner_->reset(); }
  // close() is the owner's: the transport outlives this handle.

 private:
  std::shared_ptr<Transport> inner_;
};

// Throws Error when the tag differs, the declared size differs from the payload, or
// (expected_bytes >= 0) the payload is not the size the receiver expects. The caller names the
// receiving op.
void check_message(const Message& message, std::string_view expected_tag,
                   std::int64_t expected_bytes);

// In-process channels between worker threads. send copies every tensor into fresh host memory
// (the "wire"), so the devices share no storage; CPU tensors only.
class InProcessTransport final : public Transport {
 public:
  std::string name() const override { return "in-process"; }
  void send(int from, int to, Channel channel, Message message) override;
  Message recv(int to, int from, Channel channel, std::string_view expected_tag,
               std::chrono::milliseconds timeout) override;
  void cancel() override;
  void reset() override;

 private:
  using Link = std::tuple<int, int, Channel>;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<Link, std::deque<Message>> queues_;
  bool cancelled_ = false;
};

}  // namespace pipeplan
