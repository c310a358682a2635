#include "runtime/faulty_transport.h"

#include <string>
#include <thread>

#include "planner/base/error.h"

namespace pipeplan {

void FaultyTransport::delay() {
  if (plan_.max_delay.count() <= 0) return;
  std::chrono::microseconds pause{0};
  {
    const std::lock_guard lock(rng_mutex_);
    std::uniform_int_distribution<std::int64_t> uniform(0, plan_.max_delay.count());
    pause = std::chrono::microseconds(uniform(rng_));
  }
  std::this_thread::sleep_for(pause);
}

void FaultyTransport::send(int from, int to, Channel channel, Message message) {
  delay();
  const int index = sent_.fetch_add(1);
  if (index == plan_.drop) return;
  if (index == plan_.corrupt_size) message.bytes += 4;
  if (index == plan_.corrupt_tag) message.tag += "#corrupted";
  inner_->send(from, to, channel, std::move(message));
}

Message FaultyTransport::recv(int to, int from, Channel channel, std::string_view expected_tag,
                              std::chrono::milliseconds timeout) {
  delay();
  return inner_->recv(to, from, channel, expected_tag, timeout);
}

void FaultyTransport::flush(int from, int to, Channel channel, std::chrono::milliseconds timeout) {
  if (plan_.fail_flush) {
    throw Error("flush of device " + std::to_string(from) + "'s sends to device " +
                std::to_string(to) + " failed (injected)");
  }
  inner_->flush(from, to, channel, timeout);
}

void FaultyTransport::reset() {
  inner_->reset();
  sent_ = 0;
}

}  // namespace pipeplan
