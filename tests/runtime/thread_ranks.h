// Ranks as threads of one test process: a ProcessGroup over mailboxes and a transport that all
// ranks share, so the executor's multi-process mode (ExecutorOptions::group) is tested without
// MPI. The MPI implementation (runtime/mpi/) is tested under mpirun (tests/runtime/mpi/).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/process_group.h"
#include "runtime/transport.h"

namespace pipeplan::testing {

struct Mailboxes {
  std::mutex mutex;
  std::condition_variable arrived;
  std::map<std::pair<int, int>, std::deque<std::string>> queues;  // (from, to)
};

class ThreadGroup final : public ProcessGroup {
 public:
  ThreadGroup(std::shared_ptr<Mailboxes> boxes, int rank, int size)
      : boxes_(std::move(boxes)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return rank_; }
  std::string name() const override { return "threads"; }
  void post(int to, std::string bytes) override {
    {
      const std::lock_guard lock(boxes_->mutex);
      boxes_->queues[{rank_, to}].push_back(std::move(bytes));
    }
    boxes_->arrived.notify_all();
  }
  std::optional<std::string> poll(int from, Clock::time_point deadline, const Idle&) override {
    std::unique_lock lock(boxes_->mutex);
    auto& queue = boxes_->queues[{from, rank_}];
    if (!boxes_->arrived.wait_until(lock, deadline, [&] { return !queue.empty(); })) {
      return std::nullopt;
    }
    std::string bytes = std::move(queue.front());
    queue.pop_front();
    return bytes;
  }

 private:
  std::shared_ptr<Mailboxes> boxes_;
  int rank_;
  int size_;
};

// Every rank's executor owns one of these; they share one transport. A cancel reaches every
// rank's waits, as a peer's failure notice does between processes. reset() is left to the
// shared transport's owner: one rank must not drop another's early messages.
class SharedTransport final : public SharedTransportRef {
 public:
  using SharedTransportRef::SharedTransportRef;
  void reset() override {}
};

// Runs body(rank) on `size` threads at once and waits for all.
inline void run_ranks(int size, const std::function<void(int)>& body) {
  std::vector<std::jthread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&body, r] { body(r); });
}

}  // namespace pipeplan::testing
