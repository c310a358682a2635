#include "runtime/transport.h"

#include "planner/base/error.h"
#include "runtime/host_tensor.h"

namespace pipeplan {

std::string_view to_string(Channel channel) {
  switch (channel) {
    case Channel::pipeline:
      return "pipeline";
    case Channel::transfer:
      return "transfer";
  }
  return "?";
}

std::int64_t Message::payload_bytes() const {
  std::int64_t total = 0;
  for (const auto& entry : tensors)
    total += entry.second.bytes();
  return total;
}

void check_message(const Message& message, std::string_view expected_tag,
                   std::int64_t expected_bytes) {
  if (message.tag != expected_tag) {
    throw Error("received tag '" + message.tag + "' where the plan expects '" +
                std::string(expected_tag) + "' (a message was dropped or reordered)");
  }
  const std::int64_t payload = message.payload_bytes();
  if (message.bytes != payload) {
    throw Error("message '" + message.tag + "' declares " + std::to_string(message.bytes) +
                " bytes but carries " + std::to_string(payload) + " (corrupted)");
  }
  if (expected_bytes >= 0 && payload != expected_bytes) {
    throw Error("message '" + message.tag + "' carries " + std::to_string(payload) +
                " bytes, expected " + std::to_string(expected_bytes));
  }
}

void InProcessTransport::send(int from, int to, Channel channel, Message message) {
  for (auto& entry : message.tensors)
    entry.second = host_copy(entry.second);
  {
    const std::lock_guard lock(mutex_);
    queues_[Link{from, to, channel}].push_back(std::move(message));
  }
  arrived_.notify_all();
}

Message InProcessTransport::recv(int to, int from, Channel channel, std::string_view expected_tag,
                                 std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  auto& queue = queues_[Link{from, to, channel}];
  const bool ready = arrived_.wait_for(lock, timeout, [&] { return cancelled_ || !queue.empty(); });
  const std::string link =
      std::string(to_string(channel)) + " link " + std::to_string(from) + "->" + std::to_string(to);
  if (cancelled_)
    throw Cancelled("cancelled while waiting for '" + std::string(expected_tag) + "'");
  if (!ready) {
    throw Error("timed out after " + std::to_string(timeout.count()) + " ms waiting for '" +
                std::string(expected_tag) + "' on the " + link);
  }
  Message message = std::move(queue.front());
  queue.pop_front();
  return message;
}

void InProcessTransport::cancel() {
  {
    const std::lock_guard lock(mutex_);
    cancelled_ = true;
  }
  arrived_.notify_all();
}

void InProcessTransport::reset() {
  const std::lock_guard lock(mutex_);
  cancelled_ = false;
  queues_.clear();
}

}  // namespace pipeplan
