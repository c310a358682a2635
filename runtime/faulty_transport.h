// A Transport decorator for fault injection: random delays before every send and recv (which
// must change nothing in the results), and one dropped or corrupted message (which the
// receiver's tag/size check or its timeout must turn into an Error), or a flush that fails.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>

#include "runtime/transport.h"

namespace pipeplan {

struct FaultPlan {
  std::uint64_t seed = 1;
  std::chrono::microseconds max_delay{0};  // uniform in [0, max_delay] before each send/recv
  // Index (0-based, in send order across all links) of one message to tamper with; -1: none.
  int drop = -1;            // never delivered
  int corrupt_size = -1;    // declared size 4 bytes off
  int corrupt_tag = -1;     // tag replaced
  bool fail_flush = false;  // every flush throws, as a link that never completes
};

class FaultyTransport final : public Transport {
 public:
  FaultyTransport(std::unique_ptr<Transport> inner, FaultPlan plan)
      : inner_(std::move(inner)), plan_(plan), rng_(plan.seed) {}
  std::string name() const override { return "faulty(" + inner_->name() + ")"; }
  void send(int from, int to, Channel channel, Message message) override;
  Message recv(int to, int from, Channel channel, std::string_view expected_tag,
               std::chrono::milliseconds timeout) override;
  void flush(int from, int to, Channel channel, std::chrono::milliseconds timeout) override;
  void cancel() override { inner_->cancel(); }
  void reset() override;
  void close(std::chrono::milliseconds timeout) override { inner_->close(timeout); }

 private:
  void delay();
  std::unique_ptr<Transport> inner_;
  FaultPlan plan_;
  std::mutex rng_mutex_;
  std::mt19937_64 rng_;
  std::atomic<int> sent_{0};
};

}  // namespace pipeplan
