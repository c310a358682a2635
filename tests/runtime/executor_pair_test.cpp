// The executor's overlapped pairs (Node::overlaps_next): each pair runs between the backend's
// begin_pair and end_pair with begin_second between its two ops, once the inputs of both are
// ready, on the compute thread; a failing op ends the pair and is named in the step's error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/executor.h"
#include "schedules/family.h"
#include "tests/runtime/executor_fixtures.h"
#include "tests/runtime/forwarding_backend.h"

namespace pipeplan {
namespace {

// The CPU backend, with every pair hook and layer pass written to a shared log as
// "<device>:<what>".
class LoggingBackend final : public testing::ForwardingBackend {
 public:
  LoggingBackend(int device, std::shared_ptr<std::vector<std::string>> log,
                 std::shared_ptr<std::mutex> mutex, int fail_second_backward)
      : device_(device),
        log_(std::move(log)),
        mutex_(std::move(mutex)),
        fail_second_backward_(fail_second_backward) {}

  ForwardResult forward(const LayerParams& layer, const Tensor& input,
                        const Tensor& targets) override {
    note("F");
    return ForwardingBackend::forward(layer, input, targets);
  }
  BackwardP1Result backward_p1(const LayerParams& layer, Stash stash, const Tensor& dy) override {
    note("B");
    if (second_ && ++second_backwards_ == fail_second_backward_)
      throw Error("injected failure in a pair's second op");
    return ForwardingBackend::backward_p1(layer, std::move(stash), dy);
  }
  void backward_p2(LayerParams& layer, std::span<const Retained* const> retained) override {
    note("W");
    ForwardingBackend::backward_p2(layer, retained);
  }
  void begin_pair() override { note("pair"); }
  void begin_second() override {
    note("second");
    second_ = true;
  }
  void end_pair() override {
    note("end");
    second_ = false;
  }

 private:
  void note(const std::string& what) {
    const std::lock_guard lock(*mutex_);
    log_->push_back(std::to_string(device_) + ":" + what);
  }

  int device_;
  std::shared_ptr<std::vector<std::string>> log_;
  std::shared_ptr<std::mutex> mutex_;
  int fail_second_backward_;  // the n-th backward_p1 inside a pair throws; 0: none
  bool second_ = false;
  int second_backwards_ = 0;
};

struct Logged {
  std::shared_ptr<std::vector<std::string>> log = std::make_shared<std::vector<std::string>>();
  std::shared_ptr<std::mutex> mutex = std::make_shared<std::mutex>();
  BackendFactory factory(int fail_second_backward = 0) {
    return [this, fail_second_backward](int device) {
      return std::make_unique<LoggingBackend>(device, log, mutex, fail_second_backward);
    };
  }
  // One device's entries, without the device prefix.
  std::vector<std::string> of(int device) const {
    std::vector<std::string> entries;
    const std::string prefix = std::to_string(device) + ":";
    for (const std::string& entry : *log) {
      if (entry.starts_with(prefix)) entries.push_back(entry.substr(prefix.size()));
    }
    return entries;
  }
};

TaskGraph dualpipe_v_plan() {
  std::optional<TaskGraph> plan =
      testing::tiny_plan(find_schedule_family("dualpipe-v"), BackwardMode::twobp);
  if (!plan) throw Error("dualpipe-v makes no 2bp plan of the tiny model");
  return std::move(*plan);
}

std::ptrdiff_t pairs_on(const TaskGraph& plan, int device) {
  const std::vector<OverlapPair> pairs = overlap_pairs(plan);
  return std::count_if(pairs.begin(), pairs.end(), [&](const OverlapPair& pair) {
    return plan.node(pair.first).device == device;
  });
}

TEST(ExecutorPairs, EachPairRunsItsTwoOpsBetweenTheBackendsHooks) {
  const TaskGraph plan = dualpipe_v_plan();
  Logged logged;
  Executor executor(plan, logged.factory());
  executor.step(StepMode::gradients_only);
  for (int d = 0; d < plan.meta.devices; ++d) {
    const std::vector<std::string> entries = logged.of(d);
    // Each pair: its forward's layer passes, then begin_second, then the other micro-batch's
    // backward passes, then end_pair; nothing else in between.
    std::ptrdiff_t pairs = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (entries[i] != "pair") continue;
      ++pairs;
      std::size_t j = i + 1;
      const auto run_of = [&](const std::string& what, const std::string& or_what) {
        const std::size_t from = j;
        while (j < entries.size() && (entries[j] == what || entries[j] == or_what))
          ++j;
        return j - from;
      };
      EXPECT_GT(run_of("F", "F"), 0u) << "device " << d << " entry " << i;
      ASSERT_LT(j, entries.size());
      EXPECT_EQ(entries[j++], "second") << "device " << d << " entry " << i;
      // A P1, or a whole B (its layers' input and weight gradients).
      EXPECT_GT(run_of("B", "W"), 0u) << "device " << d << " entry " << i;
      ASSERT_LT(j, entries.size());
      EXPECT_EQ(entries[j], "end") << "device " << d << " entry " << i;
    }
    EXPECT_GT(pairs, 0) << "device " << d;
    EXPECT_EQ(pairs, pairs_on(plan, d)) << "device " << d;
  }
}

// The pair's second op fails: the backend still hears end_pair, and the step's error names the
// second op's node, not the first's.
TEST(ExecutorPairs, AFailingSecondOpEndsThePairAndIsTheOneNamed) {
  const TaskGraph plan = dualpipe_v_plan();
  Logged logged;
  ExecutorOptions options;
  options.timeout = std::chrono::milliseconds(5000);
  Executor executor(plan, logged.factory(1), options);
  try {
    executor.step(StepMode::gradients_only);
    FAIL() << "expected the injected failure";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("injected failure in a pair's second op"), std::string::npos) << message;
    // "node N (...)": N is the second op of a pair.
    const std::size_t at = message.find("node ");
    ASSERT_NE(at, std::string::npos) << message;
    const int id = std::stoi(message.substr(at + 5));
    ASSERT_GT(id, 0);
    EXPECT_TRUE(plan.node(id).op == OpType::P1 || plan.node(id).op == OpType::B) << message;
    bool second = false;
    for (int s = 0; s < static_cast<int>(plan.streams().size()); ++s) {
      const std::vector<int>& order = plan.stream_order(s);
      for (std::size_t i = 1; i < order.size(); ++i)
        second = second || (order[i] == id && plan.node(order[i - 1]).overlaps_next);
    }
    EXPECT_TRUE(second) << "names the pair's second op: " << message;
  }
  for (int d = 0; d < plan.meta.devices; ++d) {
    int open = 0;
    for (const std::string& entry : logged.of(d)) {
      if (entry == "pair") ++open;
      if (entry == "end") --open;
    }
    EXPECT_EQ(open, 0) << "device " << d << " left a pair open";
  }
}

}  // namespace
}  // namespace pipeplan
