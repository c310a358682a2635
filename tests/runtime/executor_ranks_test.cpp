// The executor's multi-process mode (ExecutorOptions::group) with ranks as threads: rank r runs
// only plan device r, and rank 0 gets the same step as one process running every device —
// losses and gradients bitwise, every node timed (and its host times, with a node timer), every
// device's memory and BPipe bytes. A failure on one rank ends the step on every rank with one
// error naming the cause; a hung rank is named, not waited for.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/graph/validator.h"
#include "runtime/faulty_transport.h"
#include "runtime/step_exchange.h"
#include "tests/runtime/executor_fixtures.h"
#include "tests/runtime/thread_ranks.h"

namespace pipeplan {
namespace {

using std::chrono::milliseconds;
using testing::kDevices;

struct Outcome {
  std::vector<StepResult> steps;
  // Every parameter's gradient of every layer the process holds, after the second step.
  std::map<int, std::vector<std::vector<double>>> grads_by_layer;
};

ExecutorOptions options_for(const TaskGraph& plan, milliseconds timeout) {
  ExecutorOptions options;
  options.seed = 5;
  options.timeout = timeout;
  options.validate = !find_violation(plan).has_value();  // hand-built BPipe plans
  return options;
}

void record_grads(const Executor& executor, const TaskGraph& plan, int device, Outcome& run) {
  cpu::CpuBackend host;
  for (int l = 0; l < static_cast<int>(plan.meta.model.layer_list().size()); ++l) {
    bool mine = device < 0;
    for (int s = 0; s < plan.schedule.stage_count() && !mine; ++s) {
      const StageLayers& range = plan.meta.stage_layers[static_cast<std::size_t>(s)];
      mine = plan.schedule.stage_device[static_cast<std::size_t>(s)] == device &&
             l >= range.first_layer && l < range.first_layer + range.layer_count;
    }
    if (!mine) continue;
    for (const Parameter& p : executor.layer(l).params)
      run.grads_by_layer[l].push_back(host.download(p.grad));
  }
}

// Two steps (train, then gradients only) in one process.
Outcome single_process(const TaskGraph& plan) {
  Executor executor(plan, testing::cpu_backends(), options_for(plan, milliseconds(20000)));
  Outcome run;
  run.steps.push_back(executor.step());
  run.steps.push_back(executor.step(StepMode::gradients_only));
  record_grads(executor, plan, -1, run);
  return run;
}

// The same on kDevices thread ranks; `faulty_rank` sends through a FaultyTransport.
std::vector<Outcome> ranked(const TaskGraph& plan, milliseconds timeout,
                            std::array<std::optional<std::string>, kDevices>& errors,
                            const FaultPlan* faults = nullptr, int faulty_rank = -1,
                            const std::function<void(int rank, int node)>& before_node = {},
                            const std::function<std::shared_ptr<NodeTimer>()>& make_timer = {}) {
  auto boxes = std::make_shared<testing::Mailboxes>();
  auto shared = std::make_shared<InProcessTransport>();
  std::vector<Outcome> runs(kDevices);
  testing::run_ranks(kDevices, [&](int rank) {
    ExecutorOptions options = options_for(plan, timeout);
    options.group = std::make_shared<testing::ThreadGroup>(boxes, rank, kDevices);
    if (before_node)
      options.before_node = [&before_node, rank](int node) { before_node(rank, node); };
    if (make_timer) options.node_timer = make_timer();
    std::unique_ptr<Transport> transport = std::make_unique<testing::SharedTransport>(shared);
    if (faults != nullptr && rank == faulty_rank)
      transport = std::make_unique<FaultyTransport>(std::move(transport), *faults);
    try {
      Executor executor(plan, testing::cpu_backends(), options, std::move(transport));
      EXPECT_EQ(executor.local_device(), rank);
      runs[static_cast<std::size_t>(rank)].steps.push_back(executor.step());
      runs[static_cast<std::size_t>(rank)].steps.push_back(executor.step(StepMode::gradients_only));
      record_grads(executor, plan, rank, runs[static_cast<std::size_t>(rank)]);
    } catch (const GroupTimeout& e) {
      errors[static_cast<std::size_t>(rank)] = std::string("timeout: ") + e.what();
    } catch (const AgreedError& e) {
      errors[static_cast<std::size_t>(rank)] = std::string("agreed: ") + e.what();
    }
  });
  return runs;
}

struct Case {
  std::string family;
  BackwardMode mode;
  bool bpipe;
};

class ExecutorRanks : public ::testing::TestWithParam<Case> {};

TEST_P(ExecutorRanks, RankZeroGetsTheSingleProcessStep) {
  const Case& c = GetParam();
  std::optional<TaskGraph> plan = testing::tiny_plan(find_schedule_family(c.family), c.mode);
  ASSERT_TRUE(plan.has_value());
  if (c.bpipe) plan = testing::with_bpipe_transfers(std::move(*plan), 0, kDevices - 1);
  const Outcome one = single_process(*plan);
  std::array<std::optional<std::string>, kDevices> errors;
  const std::vector<Outcome> ranks = ranked(*plan, milliseconds(20000), errors);
  for (int r = 0; r < kDevices; ++r) {
    ASSERT_FALSE(errors[static_cast<std::size_t>(r)].has_value())
        << *errors[static_cast<std::size_t>(r)];
    ASSERT_EQ(ranks[static_cast<std::size_t>(r)].steps.size(), 2U);
    for (std::size_t s = 0; s < 2; ++s) {
      const StepResult& got = ranks[static_cast<std::size_t>(r)].steps[s];
      EXPECT_EQ(got.loss, one.steps[s].loss) << "rank " << r << " step " << s + 1;  // bitwise
      EXPECT_EQ(got.microbatch_losses, one.steps[s].microbatch_losses);
      EXPECT_GT(got.step_time_us, 0.0);
    }
    // Every layer's gradients on the rank that holds it, bitwise.
    for (const auto& [layer, grads] : ranks[static_cast<std::size_t>(r)].grads_by_layer)
      EXPECT_EQ(grads, one.grads_by_layer.at(layer)) << "rank " << r << " layer " << layer;
  }
  std::size_t layers = 0;
  for (const Outcome& run : ranks)
    layers += run.grads_by_layer.size();
  EXPECT_EQ(layers, one.grads_by_layer.size());

  // Rank 0's measured step covers every node and every device.
  const StepResult& whole = ranks[0].steps.back();
  ASSERT_EQ(whole.measured.times.size(), static_cast<std::size_t>(plan->node_count()));
  for (int id = 0; id < plan->node_count(); ++id) {
    const NodeTime& t = whole.measured.times[static_cast<std::size_t>(id)];
    EXPECT_GT(t.end_us, 0.0) << plan->node_name(id);
    EXPECT_LE(t.start_us, t.end_us) << plan->node_name(id);
  }
  ASSERT_EQ(whole.measured.devices.size(), static_cast<std::size_t>(kDevices));
  for (int d = 0; d < kDevices; ++d) {
    EXPECT_GT(whole.measured.devices[static_cast<std::size_t>(d)].peak_memory_bytes, 0)
        << "device " << d;
    EXPECT_GT(whole.measured.devices[static_cast<std::size_t>(d)].busy_us, 0.0);
    const BpipeBytes& got = whole.bpipe.at(static_cast<std::size_t>(d));
    const BpipeBytes& want = one.steps.back().bpipe.at(static_cast<std::size_t>(d));
    EXPECT_EQ(got.evicted, want.evicted);
    EXPECT_EQ(got.accepted, want.accepted);
    EXPECT_EQ(got.loaded, want.loaded);
  }
  EXPECT_GT(whole.measured.makespan_us, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Schedules, ExecutorRanks,
                         ::testing::Values(Case{"1f1b", BackwardMode::twobp, false},
                                           Case{"gpipe", BackwardMode::fused, false},
                                           Case{"interleaved", BackwardMode::twobp, false},
                                           Case{"1f1b", BackwardMode::fused, true}),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return param.param.family + "_" +
                                  std::string(to_string(param.param.mode)) +
                                  (param.param.bpipe ? "_bpipe" : "");
                         });

// Host times as a GPU's node timer gives them: the node times stand, and each device's clock
// starts 1 + device µs after the host's step start, which align_host_times takes off.
class HostClockTimer final : public NodeTimer {
 public:
  static double lag_us(int device) { return 1.0 + device; }
  void begin_step(const TaskGraph&) override {}
  void begin_node(const TaskGraph&, int) override {}
  void end_node(const TaskGraph&, int) override {}
  void end_step(const TaskGraph&, std::vector<NodeTime>&) override {}
  void align_host_times(const TaskGraph& plan, std::chrono::steady_clock::time_point,
                        std::vector<NodeTime>& host_times) const override {
    for (int id = 0; id < plan.node_count(); ++id) {
      NodeTime& t = host_times[static_cast<std::size_t>(id)];
      t.start_us -= lag_us(plan.node(id).device);
      t.end_us -= lag_us(plan.node(id).device);
    }
  }
};

// With a node timer, rank 0's step has every node's host times, as one process's has (a trace
// writes them on every GPU slice); each other rank has its own device's.
TEST(ExecutorRanksHostTimes, RankZeroGetsEveryRanksHostTimes) {
  const TaskGraph plan = *testing::tiny_plan(find_schedule_family("1f1b"), BackwardMode::twobp);
  std::array<std::optional<std::string>, kDevices> errors;
  const std::vector<Outcome> ranks = ranked(plan, milliseconds(20000), errors, nullptr, -1, {},
                                            [] { return std::make_shared<HostClockTimer>(); });
  for (int r = 0; r < kDevices; ++r) {
    ASSERT_FALSE(errors[static_cast<std::size_t>(r)].has_value())
        << *errors[static_cast<std::size_t>(r)];
    ASSERT_EQ(ranks[static_cast<std::size_t>(r)].steps.size(), 2U);
  }
  const auto node_count = static_cast<std::size_t>(plan.node_count());
  for (int r = 0; r < kDevices; ++r) {
    for (const StepResult& step : ranks[static_cast<std::size_t>(r)].steps) {
      const SimResult& measured = step.measured;
      ASSERT_EQ(measured.host_times.size(), node_count) << "rank " << r << " step " << step.step;
      ASSERT_EQ(measured.times.size(), node_count);
      for (int id = 0; id < plan.node_count(); ++id) {
        const int device = plan.node(id).device;
        if (r != 0 && device != r) continue;  // another rank's node
        // The end of a node's measured time is its host time (a recv's start is moved to its
        // send's, its end is not), on its device's clock.
        const NodeTime& host = measured.host_times[static_cast<std::size_t>(id)];
        const NodeTime& t = measured.times[static_cast<std::size_t>(id)];
        EXPECT_GT(t.end_us, 0.0) << plan.node_name(id);
        EXPECT_EQ(host.end_us, t.end_us - HostClockTimer::lag_us(device))
            << "rank " << r << " step " << step.step << " " << plan.node_name(id);
        EXPECT_LE(host.start_us, host.end_us) << plan.node_name(id);
      }
    }
  }
}

// A rank's share survives the wire unchanged: every double exactly, host times included.
TEST(StepExchange, ARankStepRoundTrips) {
  RankStep step;
  step.losses = {{0, 5.5}, {3, 0.1}};
  step.times = {{4, {0.1, 2.25}}, {7, {3.0, 1e-300}}};
  step.host_times = {{4, {-1.5, 0.3}}, {7, {2.0, 1.0 / 3.0}}};
  step.peak_bytes = 123456789012;
  step.memory_timeline = {{0.5, 10}, {1.5, 20}};
  step.bpipe = {1, 2, 3, 4};
  step.step_time_us = 99.125;
  const RankStep back = decode_rank_step(encode_rank_step(step));
  EXPECT_TRUE(back.ok);
  EXPECT_EQ(back.losses, step.losses);
  ASSERT_EQ(back.times.size(), step.times.size());
  ASSERT_EQ(back.host_times.size(), step.host_times.size());
  for (std::size_t i = 0; i < step.times.size(); ++i) {
    EXPECT_EQ(back.times[i].first, step.times[i].first);
    EXPECT_EQ(back.times[i].second.start_us, step.times[i].second.start_us);
    EXPECT_EQ(back.times[i].second.end_us, step.times[i].second.end_us);
    EXPECT_EQ(back.host_times[i].first, step.host_times[i].first);
    EXPECT_EQ(back.host_times[i].second.start_us, step.host_times[i].second.start_us);
    EXPECT_EQ(back.host_times[i].second.end_us, step.host_times[i].second.end_us);
  }
  EXPECT_EQ(back.peak_bytes, step.peak_bytes);
  EXPECT_EQ(back.memory_timeline, step.memory_timeline);
  EXPECT_EQ(back.bpipe.loaded, 4);
  EXPECT_EQ(back.step_time_us, step.step_time_us);
  // Without a node timer: none.
  EXPECT_TRUE(decode_rank_step(encode_rank_step(RankStep{})).host_times.empty());
}

// A share whose times are not (node, start, end) entries is refused, naming the field.
TEST(StepExchange, MalformedTimesAreRefused) {
  const std::string good = encode_rank_step(RankStep{});
  const auto with = [&](const std::string& field, const nlohmann::json& value) {
    const std::vector<std::uint8_t> cbor(good.begin(), good.end());
    nlohmann::json j = nlohmann::json::from_cbor(cbor);
    j[field] = value;
    const std::vector<std::uint8_t> bad = nlohmann::json::to_cbor(j);
    try {
      decode_rank_step(std::string(bad.begin(), bad.end()));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  for (const std::string& field : {std::string("times"), std::string("host_times")}) {
    for (const nlohmann::json& bad :
         {nlohmann::json(3), nlohmann::json::array({{1, 2.0}}),
          nlohmann::json::array({{1, 2.0, 3.0, 4.0}}), nlohmann::json::array({{1, "x", 3.0}})}) {
      const std::string e = with(field, bad);
      EXPECT_EQ(e.rfind("step results: a malformed message from another rank (", 0), 0U)
          << field << " " << bad.dump() << ": " << e;
    }
    EXPECT_NE(with(field, nlohmann::json::array({{1, 2.0}})).find("'" + field + "'"),
              std::string::npos)
        << field;
  }
  nlohmann::json j = nlohmann::json::from_cbor(std::vector<std::uint8_t>(good.begin(), good.end()));
  j.erase("host_times");
  const std::vector<std::uint8_t> missing = nlohmann::json::to_cbor(j);
  EXPECT_THROW(decode_rank_step(std::string(missing.begin(), missing.end())), Error);
}

TEST(ExecutorRanksFaults, ACorruptedMessageEndsEveryRankWithOneError) {
  const TaskGraph plan = *testing::tiny_plan(find_schedule_family("1f1b"), BackwardMode::twobp);
  FaultPlan faults;
  faults.corrupt_size = 0;  // the first message rank 2 sends: activation 2F0 to rank 3
  std::array<std::optional<std::string>, kDevices> errors;
  const auto start = std::chrono::steady_clock::now();
  ranked(plan, milliseconds(2000), errors, &faults, 2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  for (int r = 0; r < kDevices; ++r) {
    ASSERT_TRUE(errors[static_cast<std::size_t>(r)].has_value()) << "rank " << r;
    EXPECT_EQ(*errors[static_cast<std::size_t>(r)], *errors[0]) << "rank " << r;
  }
  const std::string& e = *errors[0];
  EXPECT_EQ(e.rfind("agreed: step 1: rank 3: ", 0), 0U) << e;
  EXPECT_NE(e.find("'2F0' declares"), std::string::npos) << e;
  EXPECT_NE(e.find("(corrupted)"), std::string::npos) << e;
  EXPECT_EQ(e.find("cancelled"), std::string::npos) << e;  // consequences are left out
}

TEST(ExecutorRanksFaults, AHungRankIsNamedWithinTheTimeout) {
  const TaskGraph plan = *testing::tiny_plan(find_schedule_family("1f1b"), BackwardMode::twobp);
  std::array<std::optional<std::string>, kDevices> errors;
  const auto start = std::chrono::steady_clock::now();
  std::atomic<bool> slept{false};
  ranked(plan, milliseconds(300), errors, nullptr, -1, [&](int rank, int) {
    if (rank == 1 && !slept.exchange(true)) std::this_thread::sleep_for(milliseconds(1500));
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  for (int r = 0; r < kDevices; ++r)
    ASSERT_TRUE(errors[static_cast<std::size_t>(r)].has_value()) << "rank " << r;
  const std::string& e = *errors[0];
  EXPECT_EQ(e.rfind("agreed: step 1: rank 1 did not finish the step within 300 ms", 0), 0U) << e;
  EXPECT_EQ(*errors[2], e);
  EXPECT_EQ(*errors[3], e);
  // Rank 1 came late: rank 0 had given up on it, and it says so itself.
  EXPECT_EQ(errors[1]->rfind("timeout: rank 0 did not answer at the end of step 1 within 1600 ms "
                             "(2 x --timeout-ms 300 + 1 s; ",
                             0),
            0U)
      << *errors[1];
}

// A failure after the graph (two copies' gradients flushed before the optimizer steps, on a plan
// without optimizer nodes) is the failing rank's, agreed by every rank at once: none waits out
// its timeout for a rank that left the step.
TEST(ExecutorRanksFaults, AFailureAfterTheGraphEndsEveryRankWithOneError) {
  const std::optional<TaskGraph> plan = testing::tiny_plan(
      find_schedule_family("dualpipe"), BackwardMode::twobp, nullptr, /*optimizer_nodes=*/false);
  ASSERT_TRUE(plan.has_value());
  for (const Node& n : plan->nodes())
    ASSERT_NE(n.op, OpType::O) << "the plan has an optimizer node";
  FaultPlan faults;
  faults.fail_flush = true;
  std::array<std::optional<std::string>, kDevices> errors;
  const auto start = std::chrono::steady_clock::now();
  ranked(*plan, milliseconds(5000), errors, &faults, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  for (int r = 0; r < kDevices; ++r) {
    ASSERT_TRUE(errors[static_cast<std::size_t>(r)].has_value()) << "rank " << r;
    EXPECT_EQ(*errors[static_cast<std::size_t>(r)], *errors[0]) << "rank " << r;
  }
  EXPECT_EQ(errors[0]->rfind("agreed: step 1: rank 1: flush of device 1's sends to device ", 0), 0U)
      << *errors[0];
}

TEST(ExecutorRanksSetUp, NeedsATransportAndOneRankPerDevice) {
  const TaskGraph plan = *testing::tiny_plan(find_schedule_family("1f1b"), BackwardMode::twobp);
  auto boxes = std::make_shared<testing::Mailboxes>();
  ExecutorOptions options;
  options.group = std::make_shared<testing::ThreadGroup>(boxes, 0, kDevices);
  try {
    Executor executor(plan, testing::cpu_backends(), options);
    FAIL() << "ran ranks without a transport between them";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a transport"), std::string::npos) << e.what();
  }
  options.group = std::make_shared<testing::ThreadGroup>(boxes, 0, 3);
  try {
    Executor executor(plan, testing::cpu_backends(), options,
                      std::make_unique<InProcessTransport>());
    FAIL() << "ran 4 devices on 3 ranks";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "plan: 4 devices, but 3 ranks were started (one rank per plan device)");
  }
}

}  // namespace
}  // namespace pipeplan
