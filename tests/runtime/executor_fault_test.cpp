// Fault injection and plan rejection: random delays in the transport and in ops change nothing;
// a dropped or corrupted message is an Error within the timeout, not a hang; an invalid plan is
// refused with the validator's message before any worker starts.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>

#include "planner/graph/validator.h"
#include "runtime/faulty_transport.h"
#include "tests/runtime/executor_fixtures.h"

namespace pipeplan {
namespace {

using std::chrono::milliseconds;

TaskGraph bpipe_1f1b() {
  TaskGraph plan = testing::with_bpipe_transfers(
      *testing::tiny_plan(find_schedule_family("1f1b"), BackwardMode::twobp), 0,
      testing::kDevices - 1);
  return plan;
}

ExecutorOptions options_for(milliseconds timeout) {
  ExecutorOptions options;
  options.timeout = timeout;
  return options;
}

struct Outcome {
  std::vector<double> losses;
  std::vector<std::vector<double>> grads;  // every parameter of every layer, last step
};

Outcome run(const TaskGraph& plan, ExecutorOptions options, const FaultPlan* faults) {
  std::unique_ptr<Transport> transport = std::make_unique<InProcessTransport>();
  if (faults != nullptr) {
    transport = std::make_unique<FaultyTransport>(std::move(transport), *faults);
  }
  Executor executor(plan, testing::cpu_backends(), std::move(options), std::move(transport));
  Outcome out;
  out.losses.push_back(executor.step().loss);
  out.losses.push_back(executor.step(StepMode::gradients_only).loss);
  cpu::CpuBackend host;
  for (int l = 0; l < static_cast<int>(plan.meta.model.layer_list().size()); ++l) {
    for (const Parameter& p : executor.layer(l).params)
      out.grads.push_back(host.download(p.grad));
  }
  return out;
}

TEST(ExecutorFaults, RandomDelaysChangeNothing) {
  const TaskGraph plan = bpipe_1f1b();
  const Outcome clean = run(plan, options_for(milliseconds(20000)), nullptr);
  FaultPlan delays;
  delays.seed = 11;
  delays.max_delay = std::chrono::microseconds(1500);
  ExecutorOptions options = options_for(milliseconds(20000));
  options.before_node = [](int node) {
    thread_local std::mt19937 rng(static_cast<unsigned>(node) * 7919U + 1U);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 1000));
  };
  const Outcome delayed = run(plan, options, &delays);
  // Bitwise: each device runs its ops in planned order whatever the timing.
  EXPECT_EQ(delayed.losses, clean.losses);
  EXPECT_EQ(delayed.grads, clean.grads);
}

// The failing op is named once, in front of what went wrong ("step 1: node 12 (...): ...").
void expect_op_named_once(const std::string& message) {
  const std::size_t name = message.find("node ");
  const std::size_t name_end = message.find("): ", name);
  ASSERT_NE(name_end, std::string::npos) << message;
  const std::string op = message.substr(name, name_end + 1 - name);
  EXPECT_EQ(message.find(op, name + 1), std::string::npos) << message;
}

void expect_fault_detected(const FaultPlan& faults, const std::string& needle) {
  const TaskGraph plan = bpipe_1f1b();
  const milliseconds timeout(400);
  std::string message;
  const auto start = std::chrono::steady_clock::now();
  try {
    run(plan, options_for(timeout), &faults);
  } catch (const Error& e) {
    message = e.what();
  }
  // Detected within the timeout (plus the work of the steps), never a hang.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10 * timeout + std::chrono::seconds(5));
  ASSERT_FALSE(message.empty()) << "a tampered message went unnoticed";
  EXPECT_NE(message.find(needle), std::string::npos) << message;
  expect_op_named_once(message);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(ExecutorFaults, CorruptedSizeIsDetected) {
  FaultPlan faults;
  faults.corrupt_size = 7;
  expect_fault_detected(faults, "declares");
}

TEST(ExecutorFaults, CorruptedTagIsDetected) {
  FaultPlan faults;
  faults.corrupt_tag = 3;
  expect_fault_detected(faults, "received tag");
}

// A dropped message shows up as the next message's tag on that link, or as a timeout when it
// was the link's last one.
TEST(ExecutorFaults, DroppedMessageIsDetected) {
  for (const int index : {0, 5, 20}) {
    FaultPlan faults;
    faults.drop = index;
    const TaskGraph plan = bpipe_1f1b();
    try {
      run(plan, options_for(milliseconds(400)), &faults);
      FAIL() << "dropped message " << index << " went unnoticed";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_TRUE(message.find("received tag") != std::string::npos ||
                  message.find("timed out") != std::string::npos)
          << message;
      expect_op_named_once(message);
    }
  }
}

TEST(ExecutorFaults, OpFailureCancelsTheStep) {
  TaskGraph plan = *testing::tiny_plan(find_schedule_family("gpipe"), BackwardMode::fused);
  ExecutorOptions options;
  options.timeout = milliseconds(20000);
  options.before_node = [](int node) {
    if (node == 5) throw Error("injected failure");
  };
  Executor executor(std::move(plan), testing::cpu_backends(), options);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(
      {
        try {
          executor.step();
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos);
          throw;
        }
      },
      Error);
  // The other workers were woken at once, not after the 20 s timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NO_THROW(executor.transport().reset());
}

// Counts flush() calls per link; everything else goes to an in-process transport.
class FlushCounter final : public Transport {
 public:
  std::string name() const override { return "flush-counter"; }
  void send(int from, int to, Channel channel, Message message) override {
    inner_.send(from, to, channel, std::move(message));
  }
  Message recv(int to, int from, Channel channel, std::string_view expected_tag,
               milliseconds timeout) override {
    return inner_.recv(to, from, channel, expected_tag, timeout);
  }
  void flush(int from, int to, Channel channel, milliseconds) override {
    const std::lock_guard lock(mutex_);
    ++flushes_[{from, to, channel}];
  }
  void cancel() override { inner_.cancel(); }
  void reset() override { inner_.reset(); }
  int flushes(int from, int to, Channel channel) {
    const std::lock_guard lock(mutex_);
    return flushes_[{from, to, channel}];
  }

 private:
  InProcessTransport inner_;
  std::mutex mutex_;
  std::map<std::tuple<int, int, Channel>, int> flushes_;
};

// A send that a node of its own device waits for (the planner's BPipe eviction and the op after
// next, which reuses its memory) is done only once the transport gave its tensors back: that
// node starts after the flush; other sends are not flushed.
TEST(ExecutorPlans, ANodeWaitingForASendStartsAfterTheTransportFlushedIt) {
  TaskGraph plan = bpipe_1f1b();
  const int evictor = 0, acceptor = testing::kDevices - 1;
  const auto& compute = plan.stream_order(plan.stream(evictor, StreamRole::compute));
  std::map<int, int> reuser_flushes;  // reuser node -> flushes the link must have had by then
  int evictions = 0;
  for (std::size_t pos = 0; pos + 2 < compute.size(); ++pos) {
    for (const auto& e : std::vector<TaskGraph::EdgeRecord>(plan.edge_records().begin(),
                                                            plan.edge_records().end())) {
      const Node& send = plan.node(e.to);
      if (e.from != compute[pos] || send.kind != NodeKind::send ||
          send.transfer != Transfer::evict) {
        continue;
      }
      plan.add_data_edge(e.to, compute[pos + 2]);
      reuser_flushes[compute[pos + 2]] = ++evictions;
    }
  }
  ASSERT_GT(evictions, 0);
  ASSERT_FALSE(find_violation(plan).has_value());
  auto transport = std::make_unique<FlushCounter>();
  FlushCounter& counter = *transport;
  std::atomic<int> early{0};
  ExecutorOptions options = options_for(milliseconds(20000));
  options.before_node = [&](int node) {
    const auto it = reuser_flushes.find(node);
    if (it != reuser_flushes.end() &&
        counter.flushes(evictor, acceptor, Channel::transfer) < it->second) {
      ++early;
    }
  };
  Executor executor(plan, testing::cpu_backends(), options, std::move(transport));
  executor.step();
  EXPECT_EQ(early.load(), 0) << "an op reusing an evicted stash started before its flush";
  EXPECT_EQ(counter.flushes(evictor, acceptor, Channel::transfer), evictions);
  EXPECT_EQ(counter.flushes(acceptor, evictor, Channel::transfer), 0);  // loads: nobody waits
  EXPECT_EQ(counter.flushes(evictor, 1, Channel::pipeline), 0);
}

TEST(ExecutorPlans, InvalidPlanIsRejectedWithTheValidatorsMessage) {
  TaskGraph plan = *testing::tiny_plan(find_schedule_family("1f1b"), BackwardMode::fused);
  // Reverse one receive stream: its k-th receive no longer meets the k-th send.
  const auto& streams = plan.streams();
  const auto recv = std::find_if(streams.begin(), streams.end(),
                                 [](const Stream& s) { return s.role == StreamRole::recv; });
  ASSERT_NE(recv, streams.end());
  const auto index = static_cast<int>(recv - streams.begin());
  std::vector<int> order = plan.stream_order(index);
  std::reverse(order.begin(), order.end());
  plan.set_stream_order(index, order);
  const auto violation = find_violation(plan);
  ASSERT_TRUE(violation);
  bool built = false;
  bool threw = false;
  try {
    const Executor executor(plan, [&](int) -> std::unique_ptr<Backend> {
      built = true;  // no worker may start on an invalid plan
      return std::make_unique<cpu::CpuBackend>();
    });
  } catch (const Error& e) {
    threw = true;
    EXPECT_EQ(std::string(e.what()), "invalid plan: " + violation->message);
  }
  EXPECT_TRUE(threw);
  EXPECT_FALSE(built);
}

// What a send/recv moves is its transfer kind: with every label renamed to a tag that says
// nothing (the same on both halves), a BPipe step moves the same payloads, to the bit.
TEST(ExecutorPlans, PayloadsFollowTheTransferKindNotTheLabel) {
  const TaskGraph plan = bpipe_1f1b();
  TaskGraph renamed = plan;
  for (int id = 0; id < renamed.node_count(); ++id) {
    Node& n = renamed.node(id);
    if (n.kind != NodeKind::compute) set_label(n, "m" + std::to_string(std::min(id, n.match)));
  }
  ASSERT_FALSE(find_violation(renamed).has_value());
  const Outcome original = run(plan, options_for(milliseconds(20000)), nullptr);
  const Outcome relabelled = run(renamed, options_for(milliseconds(20000)), nullptr);
  EXPECT_EQ(relabelled.losses, original.losses);
  EXPECT_EQ(relabelled.grads, original.grads);
}

TEST(ExecutorPlans, StageLayersMustCoverTheModel) {
  TaskGraph plan = *testing::tiny_plan(find_schedule_family("1f1b"), BackwardMode::fused);
  plan.meta.stage_layers.back().layer_count -= 1;
  EXPECT_THROW(
      {
        try {
          const Executor executor(plan, testing::cpu_backends());
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("meta.stage_layers"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

}  // namespace
}  // namespace pipeplan
