// The executor's multi-process mode (ExecutorOptions::group) with ranks as threads: rank r runs
// only plan device r, and rank 0 gets the same step as one process running every device —
// losses and gradients bitwise, every node timed, every device's memory and BPipe bytes. A
// failure on one rank ends the step on every rank with one error naming the cause; a hung rank
// is named, not waited for.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "planner/graph/validator.h"
#include "runtime/faulty_transport.h"
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
                            const std::function<void(int rank, int node)>& before_node = {}) {
  auto boxes = std::make_shared<testing::Mailboxes>();
  auto shared = std::make_shared<InProcessTransport>();
  std::vector<Outcome> runs(kDevices);
  testing::run_ranks(kDevices, [&](int rank) {
    ExecutorOptions options = options_for(plan, timeout);
    options.group = std::make_shared<testing::ThreadGroup>(boxes, rank, kDevices);
    if (before_node)
      options.before_node = [&before_node, rank](int node) { before_node(rank, node); };
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
  EXPECT_EQ(errors[1]->rfind("timeout: rank 0 did not send the outcome of step 1", 0), 0U)
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
