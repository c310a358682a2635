// Payloads still arriving when recv returns (Message::arrival; the device-local transport with
// PIPEPLAN_COPY_WAIT=stream): the executor orders every same-device reader of a recv behind its
// arrival, on the reader's own thread, before the reader's node timer starts (for an overlapped
// pair, before the pair starts, the second op's inputs too); a held BPipe stash is sent back
// carrying the arrival it came with; and the step computes what it computes without.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "planner/graph/validator.h"
#include "tests/runtime/executor_fixtures.h"
#include "tests/runtime/forwarding_backend.h"

namespace pipeplan {
namespace {

using std::chrono::milliseconds;

// One event of the step, numbered in the order it happened, and the thread it happened on.
struct Event {
  int seq = 0;
  std::thread::id thread;
};

class Recorder {
 public:
  Event now() { return {clock_++, std::this_thread::get_id()}; }

 private:
  std::atomic<int> clock_{0};
};

// The message of a recv, identified by its link and tag.
using MessageKey = std::tuple<int, int, Channel, std::string>;  // (to, from, channel, tag)

class LoggedArrival final : public Arrival {
 public:
  explicit LoggedArrival(Recorder& recorder) : recorder_(recorder) {}
  void order_reader() const override {
    const std::lock_guard lock(mutex_);
    orders_.push_back(recorder_.now());
  }
  std::vector<Event> orders() const {
    const std::lock_guard lock(mutex_);
    return orders_;
  }

 private:
  Recorder& recorder_;
  mutable std::mutex mutex_;
  mutable std::vector<Event> orders_;
};

// In-process delivery; every message received carries a LoggedArrival, and every message sent
// is checked for the arrival it carries (then sent on without it).
class ArrivingTransport final : public Transport {
 public:
  explicit ArrivingTransport(Recorder& recorder) : recorder_(recorder) {}
  std::string name() const override { return "arriving"; }
  void send(int from, int to, Channel channel, Message message) override {
    {
      const std::lock_guard lock(mutex_);
      sent_with_[{to, from, channel, message.tag}] = message.arrival.get();
    }
    message.arrival.reset();
    inner_.send(from, to, channel, std::move(message));
  }
  Message recv(int to, int from, Channel channel, std::string_view expected_tag,
               milliseconds timeout) override {
    Message message = inner_.recv(to, from, channel, expected_tag, timeout);
    auto arrival = std::make_shared<const LoggedArrival>(recorder_);
    {
      const std::lock_guard lock(mutex_);
      arrivals_[{to, from, channel, message.tag}] = arrival;
    }
    message.arrival = std::move(arrival);
    return message;
  }
  void cancel() override { inner_.cancel(); }
  void reset() override { inner_.reset(); }

  std::shared_ptr<const LoggedArrival> arrival(const MessageKey& key) {
    const std::lock_guard lock(mutex_);
    const auto it = arrivals_.find(key);
    return it != arrivals_.end() ? it->second : nullptr;
  }
  // The arrival a sent message carried (null: none), or nullopt when it was not sent.
  std::optional<const Arrival*> sent_with(const MessageKey& key) {
    const std::lock_guard lock(mutex_);
    const auto it = sent_with_.find(key);
    return it != sent_with_.end() ? std::optional(it->second) : std::nullopt;
  }

 private:
  Recorder& recorder_;
  InProcessTransport inner_;
  std::mutex mutex_;
  std::map<MessageKey, std::shared_ptr<const LoggedArrival>> arrivals_;
  std::map<MessageKey, const Arrival*> sent_with_;
};

// Logs when each node's timer started; host times stand.
class StartLog final : public NodeTimer {
 public:
  explicit StartLog(Recorder& recorder) : recorder_(recorder) {}
  void begin_step(const TaskGraph& plan) override {
    starts_.assign(static_cast<std::size_t>(plan.node_count()), Event{-1, {}});
  }
  void begin_node(const TaskGraph&, int id) override {
    starts_[static_cast<std::size_t>(id)] = recorder_.now();  // one writer per node
  }
  void end_node(const TaskGraph&, int) override {}
  void end_step(const TaskGraph&, std::vector<NodeTime>&) override {}
  void align_host_times(const TaskGraph&, std::chrono::steady_clock::time_point,
                        std::vector<NodeTime>&) const override {}
  const Event& start(int id) const { return starts_[static_cast<std::size_t>(id)]; }

 private:
  Recorder& recorder_;
  std::vector<Event> starts_;
};

Channel channel_of(const TaskGraph& plan, const Node& node) {
  return plan.streams()[static_cast<std::size_t>(node.stream)].role == StreamRole::transfer
             ? Channel::transfer
             : Channel::pipeline;
}

MessageKey key_of(const TaskGraph& plan, const Node& recv) {
  return {recv.device, recv.peer, channel_of(plan, recv), node_label(recv)};
}

TEST(ExecutorArrivals, ReadersWaitBehindTheArrivalBeforeTheirTimerStarts) {
  const TaskGraph plan = testing::with_bpipe_transfers(
      *testing::tiny_plan(find_schedule_family("1f1b"), BackwardMode::twobp), 0,
      testing::kDevices - 1);
  ASSERT_FALSE(find_violation(plan).has_value());
  Recorder recorder;
  auto transport = std::make_unique<ArrivingTransport>(recorder);
  ArrivingTransport& arriving = *transport;
  const auto starts = std::make_shared<StartLog>(recorder);
  ExecutorOptions options;
  options.timeout = milliseconds(20000);
  options.node_timer = starts;
  Executor executor(plan, testing::cpu_backends(), options, std::move(transport));
  const double loss = executor.step(StepMode::gradients_only).loss;

  const auto& g = plan.graph();
  int readers = 0, held = 0;
  for (auto [it, end] = boost::edges(g); it != end; ++it) {
    if (g[*it] != EdgeKind::data) continue;
    const int from = static_cast<int>(boost::source(*it, g));
    const int to = static_cast<int>(boost::target(*it, g));
    const Node& recv = plan.node(from);
    const Node& reader = plan.node(to);
    if (recv.kind != NodeKind::recv || reader.device != recv.device) continue;
    const auto arrival = arriving.arrival(key_of(plan, recv));
    ASSERT_NE(arrival, nullptr) << plan.node_name(from) << " received nothing";
    if (reader.kind == NodeKind::send) {
      // A held stash going back: its message carries the arrival it came with.
      const std::optional<const Arrival*> carried = arriving.sent_with(
          {reader.peer, reader.device, channel_of(plan, reader), node_label(reader)});
      ASSERT_TRUE(carried.has_value()) << plan.node_name(to) << " sent nothing";
      EXPECT_EQ(*carried, arrival.get()) << plan.node_name(to) << " lost the stash's arrival";
      ++held;
      continue;
    }
    ASSERT_EQ(reader.kind, NodeKind::compute);
    const Event& start = starts->start(to);
    bool ordered = false;
    for (const Event& order : arrival->orders())
      ordered |= order.thread == start.thread && order.seq < start.seq;
    EXPECT_TRUE(ordered) << plan.node_name(to) << " started its timer without ordering behind "
                         << plan.node_name(from);
    ++readers;
  }
  EXPECT_GT(readers, 0);
  EXPECT_GT(held, 0) << "the plan has no BPipe stash going back";

  // What the step computes does not depend on the arrivals.
  ExecutorOptions plain;
  plain.timeout = milliseconds(20000);
  Executor without(plan, testing::cpu_backends(), plain);
  EXPECT_EQ(without.step(StepMode::gradients_only).loss, loss);
}

// The CPU backend, noting when each overlapped pair starts (begin_pair) and on which thread.
class PairStartLog final : public testing::ForwardingBackend {
 public:
  PairStartLog(Recorder& recorder, std::shared_ptr<std::vector<Event>> starts,
               std::shared_ptr<std::mutex> mutex)
      : recorder_(recorder), starts_(std::move(starts)), mutex_(std::move(mutex)) {}
  void begin_pair() override {
    const std::lock_guard lock(*mutex_);
    starts_->push_back(recorder_.now());
  }

 private:
  Recorder& recorder_;
  std::shared_ptr<std::vector<Event>> starts_;
  std::shared_ptr<std::mutex> mutex_;
};

// A pair's second op runs on the backend's side stream, which waits for the pair's start: so the
// arrivals of both ops' inputs are ordered, on the pair's thread, before the pair starts.
TEST(ExecutorArrivals, BothOpsOfAnOverlappedPairWaitBehindTheirArrivalsBeforeThePairStarts) {
  const TaskGraph plan =
      *testing::tiny_plan(find_schedule_family("dualpipe-v"), BackwardMode::twobp);
  Recorder recorder;
  auto transport = std::make_unique<ArrivingTransport>(recorder);
  ArrivingTransport& arriving = *transport;
  std::vector<std::shared_ptr<std::vector<Event>>> pair_starts;
  for (int d = 0; d < plan.meta.devices; ++d)
    pair_starts.push_back(std::make_shared<std::vector<Event>>());
  const auto mutex = std::make_shared<std::mutex>();
  ExecutorOptions options;
  options.timeout = milliseconds(20000);
  Executor executor(
      plan,
      [&](int device) {
        return std::make_unique<PairStartLog>(recorder,
                                              pair_starts[static_cast<std::size_t>(device)], mutex);
      },
      options, std::move(transport));
  executor.step(StepMode::gradients_only);

  const auto inputs = predecessors(plan);
  int ordered_inputs = 0;
  for (int d = 0; d < plan.meta.devices; ++d) {
    // The device's pairs start in its compute stream's order.
    std::vector<OverlapPair> pairs;
    for (const OverlapPair& pair : overlap_pairs(plan)) {
      if (plan.node(pair.first).device == d) pairs.push_back(pair);
    }
    const std::vector<Event>& starts = *pair_starts[static_cast<std::size_t>(d)];
    ASSERT_EQ(starts.size(), pairs.size()) << "device " << d;
    ASSERT_FALSE(pairs.empty()) << "device " << d;
    for (std::size_t p = 0; p < pairs.size(); ++p) {
      for (const int op : {pairs[p].first, pairs[p].second}) {
        for (const auto& [from, kind] : inputs[static_cast<std::size_t>(op)]) {
          if (kind != EdgeKind::data || plan.node(from).kind != NodeKind::recv) continue;
          const auto arrival = arriving.arrival(key_of(plan, plan.node(from)));
          ASSERT_NE(arrival, nullptr) << plan.node_name(from) << " received nothing";
          bool ordered = false;
          for (const Event& order : arrival->orders())
            ordered |= order.thread == starts[p].thread && order.seq < starts[p].seq;
          EXPECT_TRUE(ordered) << "the pair of " << plan.node_name(pairs[p].first) << " and "
                               << plan.node_name(pairs[p].second) << " started before "
                               << plan.node_name(op) << " was ordered behind "
                               << plan.node_name(from);
          ++ordered_inputs;
        }
      }
    }
  }
  EXPECT_GT(ordered_inputs, 0) << "no pair reads a received payload";
}

}  // namespace
}  // namespace pipeplan
