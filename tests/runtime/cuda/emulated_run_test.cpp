// `pipeplan run --backend cuda --emulate P` end to end through CudaRun: the tiny model on 2 and 4
// emulated stages (1F1B with 2BP, GPipe fused, 1F1B 2BP with the planner's BPipe transfers) gives
// the loss and every gradient of the single-stage CUDA run of the same seed, within bf16 tolerance;
// device times come from CUDA events and the allocators count every stage's memory. Over NCCL
// (--transport nccl) the stages give the device-local run's results bit for bit, and so do four
// ranks sharing GPU 0 (one process per plan device, threads here), each in a green context.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/plan/bpipe.h"
#include "planner/plan/make_plan.h"
#include "profiles/analytic.h"
#include "profiles/recompute.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_run.h"
#include "runtime/cuda/device_local_transport.h"
#include "runtime/cuda/matmul.h"
#ifdef PIPEPLAN_HAVE_NCCL
#include "runtime/cuda/nccl_transport.h"
#endif
#include "runtime/cuda/step_events.h"
#include "runtime/device_worker.h"
#include "schedules/family.h"
#include "tests/error_support.h"
#include "tests/runtime/cuda/gpu_test_support.h"
#include "tests/runtime/thread_ranks.h"
#ifdef PIPEPLAN_FAKE_DEVICE
#include "tests/runtime/cuda/fake_device/fake_device.h"
#endif

namespace pipeplan {
namespace {

constexpr int kMicrobatches = 8;
constexpr int kSeq = 32;
constexpr std::uint64_t kSeed = 23;
// bf16 activations: stage placement changes the SM count and so cuBLAS's kernel choice (and
// its rounding); a wrong gradient is off by O(1), rounding by < 1 %.
constexpr double kGradTolerance = 2e-2;

// The tiny model with `layers` blocks (4 unless a test needs an uneven partition).
TaskGraph tiny_plan(int devices, const std::string& schedule, BackwardMode mode,
                    BpipeMode bpipe = BpipeMode::off, int layers = 4,
                    std::vector<int> layers_per_stage = {}, const Recompute& recompute = {}) {
  ModelConfig model = model_preset("tiny");
  model.layers = layers;
  AnalyticOptions analytic;
  analytic.seq = kSeq;
  analytic.max_p2_concat = kMicrobatches;
  analytic.attention = testing::gpu_test_attention();
  PlanRequest request;
  request.profile = analytic_profile(model, find_gpu("h100"), analytic);
  request.gpu = "h100";
  request.devices = devices;
  request.microbatches = kMicrobatches;
  request.schedule = schedule;
  request.chunks = find_schedule_family(schedule).traits().chunks.preferred;
  request.backward = mode;
  request.p2_concat = 0;
  request.layers_per_stage = std::move(layers_per_stage);
  request.recompute = recompute;
  if (bpipe == BpipeMode::off) return make_plan(request).graph;
  // BPipe's transfers at cap 2 on every pair, whether or not they lower a peak (the planner adds
  // them only where they do, which the tiny model's heavy last stage rarely allows): what the
  // runtime must get right is the evictions and loads themselves.
  TaskGraph graph = make_plan(request).graph;
  const std::vector<CapRange> caps(static_cast<std::size_t>(devices / 2), CapRange{2, 2});
  const std::optional<BpipePlan> transfers = plan_bpipe(graph, plan_schedule(request).costs, caps);
  if (!transfers) throw Error("tiny_plan: BPipe cannot keep 2 stashes on every evictor");
  add_bpipe_transfers(graph, *transfers);
  return graph;
}

struct Run {
  double loss = 0;
  std::map<std::string, std::vector<double>> grads;  // "<layer>/<param>"
  std::vector<std::int64_t> allocator_peaks;
  SimResult measured;
  std::string backend_name;
  std::string transport_name;
  int sm_per_stage = 0;                        // emulated: each stage's SMs
  std::vector<std::size_t> gemm_shapes_timed;  // per stage: shapes whose answers were timed
  // Parameters whose second copy (dualpipe) holds other gradients than the first.
  std::vector<std::string> copies_apart;
};

Run run_on_gpu(const TaskGraph& plan, int emulate, int gemm_candidates = 1,
               GpuTransport transport = GpuTransport::automatic) {
  GpuRunOptions run_options{emulate, ""};
  run_options.gemm_candidates = gemm_candidates;
  run_options.transport = transport;
  cuda::CudaRun cuda_run(plan, run_options);
  ExecutorOptions options;
  options.seed = kSeed;
  options.node_timer = cuda_run.node_timer();
  Executor executor(plan, cuda_run.backend_factory(), options, cuda_run.take_transport());
  cuda_run.reset_peaks();
  const StepResult step = executor.step(StepMode::gradients_only);
  Run run;
  run.loss = step.loss;
  run.measured = step.measured;
  run.allocator_peaks = cuda_run.allocator_peak_bytes();
  run.backend_name = cuda_run.backend_name();
  run.transport_name = cuda_run.transport_name();
  run.sm_per_stage = cuda_run.hardware().sm_per_stage;
  for (int d = 0; d < plan.meta.devices; ++d)
    run.gemm_shapes_timed.push_back(cuda::gemm_choices(cuda_run.backend(d).context()).size());
  const int layers = static_cast<int>(plan.meta.model.layer_list().size());
  for (int l = 0; l < layers; ++l) {
    for (const Parameter& p : executor.layer(l).params) {
      run.grads[std::to_string(l) + "/" + p.name] = cuda_run.backend(0).download(p.grad);
    }
    // Two copies sum the same two gradients, each in its own order: a + b = b + a exactly.
    const std::vector<const LayerParams*> copies = executor.layer_copies(l);
    for (std::size_t c = 1; c < copies.size(); ++c) {
      for (const Parameter& p : copies[c]->params) {
        const std::string name = std::to_string(l) + "/" + p.name;
        if (cuda_run.backend(0).download(p.grad) != run.grads.at(name))
          run.copies_apart.push_back(name);
      }
    }
  }
  return run;
}

const Run& reference(int layers = 4) {
  static std::map<int, Run> single;  // by block count
  if (!single.contains(layers)) {
    single.emplace(
        layers, run_on_gpu(tiny_plan(1, "1f1b", BackwardMode::fused, BpipeMode::off, layers), 0));
  }
  return single.at(layers);
}

void expect_matches_reference(const Run& run, int devices, int layers = 4) {
  const Run& ref = reference(layers);
  EXPECT_NEAR(run.loss, ref.loss, 1e-2 * std::abs(ref.loss));
  ASSERT_EQ(run.grads.size(), ref.grads.size());
  for (const auto& [name, grad] : ref.grads) {
    EXPECT_LT(testing::relative_error(run.grads.at(name), grad), kGradTolerance) << name;
  }
  ASSERT_EQ(run.allocator_peaks.size(), static_cast<std::size_t>(devices));
  for (const std::int64_t peak : run.allocator_peaks)
    EXPECT_GT(peak, 0);
  // Device times: every compute op has a positive duration inside the step.
  EXPECT_GT(run.measured.makespan_us, 0);
  for (const DeviceMetrics& d : run.measured.devices)
    EXPECT_GT(d.busy_us, 0);
}

int sms_or_skip(int stages) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return 0;
  return prop.multiProcessorCount / stages >= 8 ? prop.multiProcessorCount : 0;
}

TEST(EmulatedRun, TwoStages1f1b2bpMatchesTheSingleStageRun) {
  PIPEPLAN_REQUIRE_GPU();
  if (sms_or_skip(2) == 0) GTEST_SKIP() << "GPU too small for 2 green contexts of 8 SMs";
  expect_matches_reference(run_on_gpu(tiny_plan(2, "1f1b", BackwardMode::twobp), 2), 2);
}

TEST(EmulatedRun, FourStagesGpipeFusedMatchesTheSingleStageRun) {
  PIPEPLAN_REQUIRE_GPU();
  if (sms_or_skip(4) == 0) GTEST_SKIP() << "GPU too small for 4 green contexts of 8 SMs";
  expect_matches_reference(run_on_gpu(tiny_plan(4, "gpipe", BackwardMode::fused), 4), 4);
}

TEST(EmulatedRun, FourStages1f1b2bpWithBpipeCopiesMatchesTheSingleStageRun) {
  PIPEPLAN_REQUIRE_GPU();
  if (sms_or_skip(4) == 0) GTEST_SKIP() << "GPU too small for 4 green contexts of 8 SMs";
  // Eight blocks split 3,2,2,1: the first stage's stashes, the heaviest, move to the last.
  const TaskGraph plan = tiny_plan(4, "1f1b", BackwardMode::twobp, BpipeMode::on, 8, {3, 2, 2, 1});
  int transfers = 0;
  for (const Stream& stream : plan.streams())
    transfers += stream.role == StreamRole::transfer ? 1 : 0;
  ASSERT_GT(transfers, 0) << "the planner added no BPipe transfer streams";
  expect_matches_reference(run_on_gpu(plan, 4), 4, 8);
}

// Activation recomputation on the GPU: each recomputing block keeps its input and runs its
// forward again inside its P1 (or B). The same kernels on the same SMs recompute the same stash,
// so the gradients are the plan without recomputation's bit for bit; with the fused backward the
// first stage's account of its stashes holds less.
TEST(EmulatedRun, RecomputingBlocksGiveTheGradientsOfThePlanKeepingItsActivations) {
  PIPEPLAN_REQUIRE_GPU();
  if (sms_or_skip(2) == 0) GTEST_SKIP() << "GPU too small for 2 green contexts of 8 SMs";
  for (const BackwardMode mode : {BackwardMode::fused, BackwardMode::twobp}) {
    SCOPED_TRACE(std::string(to_string(mode)));
    const auto kept = run_on_gpu(tiny_plan(2, "1f1b", mode, BpipeMode::off, 8), 2);
    const auto rebuilt = run_on_gpu(
        tiny_plan(2, "1f1b", mode, BpipeMode::off, 8, {}, Recompute{Recompute::Method::full, 0}),
        2);
    EXPECT_EQ(rebuilt.loss, kept.loss);
    ASSERT_EQ(rebuilt.grads.size(), kept.grads.size());
    for (const auto& [name, grad] : kept.grads)
      EXPECT_EQ(rebuilt.grads.at(name), grad) << name;
    if (mode == BackwardMode::fused) {
      EXPECT_LT(rebuilt.measured.peak_memory_bytes().at(0),
                kept.measured.peak_memory_bytes().at(0));
    }
  }
}

// DualPipeV's overlapped pairs: each pair's second op runs on its stage's side stream beside the
// first (CudaBackend::begin_second), with the stage's allocator; the same gradients, with the
// copies waited for on the host and on the GPU (PIPEPLAN_COPY_WAIT=stream).
TEST(EmulatedRun, DualPipeVRunsItsPairsOnTwoStreamsWithTheSingleStageGradients) {
  PIPEPLAN_REQUIRE_GPU();
  if (sms_or_skip(2) == 0) GTEST_SKIP() << "GPU too small for 2 green contexts of 8 SMs";
  const TaskGraph plan = tiny_plan(2, "dualpipe-v", BackwardMode::twobp);
  ASSERT_FALSE(overlap_pairs(plan).empty()) << "the plan has no overlapped pair";
  expect_matches_reference(run_on_gpu(plan, 2), 2);
  const testing::ScopedEnv wait(cuda::kCopyWaitEnv, "stream");
  expect_matches_reference(run_on_gpu(plan, 2), 2);
}

// Bidirectional DualPipe: two copies of the model, each stage's copies on two emulated stages
// that exchange their weight gradients (grads messages through the device-local transport) and
// add them in (the CUDA add kernel); both copies end with the single-stage run's gradients.
TEST(EmulatedRun, DualPipesTwoCopiesEndWithTheSingleStageGradients) {
  PIPEPLAN_REQUIRE_GPU();
  if (sms_or_skip(4) == 0) GTEST_SKIP() << "GPU too small for 4 green contexts of 8 SMs";
  const TaskGraph plan = tiny_plan(4, "dualpipe", BackwardMode::twobp);
  ASSERT_FALSE(overlap_pairs(plan).empty()) << "the plan has no overlapped pair";
  const auto run = run_on_gpu(plan, 4);
  expect_matches_reference(run, 4);
  EXPECT_TRUE(run.copies_apart.empty())
      << run.copies_apart.front() << " and " << run.copies_apart.size() - 1 << " more";
}

// PIPEPLAN_COPY_WAIT=stream: the readers of every received activation, gradient and BPipe stash
// wait for its copy on the GPU, not their threads for its end, and a held stash goes back behind
// its own arrival; the same gradients as the single-stage run.
TEST(EmulatedRun, StreamOrderedCopiesGiveTheSingleStageGradients) {
  PIPEPLAN_REQUIRE_GPU();
  if (sms_or_skip(4) == 0) GTEST_SKIP() << "GPU too small for 4 green contexts of 8 SMs";
  const testing::ScopedEnv wait(cuda::kCopyWaitEnv, "stream");
  const TaskGraph plan = tiny_plan(4, "1f1b", BackwardMode::twobp, BpipeMode::on, 8, {3, 2, 2, 1});
  const auto run = run_on_gpu(plan, 4);
  EXPECT_NE(run.transport_name.find("wait: stream"), std::string::npos) << run.transport_name;
  expect_matches_reference(run, 4, 8);
}

// `run --gemm-candidates 3`: every stage times cuBLASLt's answers for each of its GEMM shapes on
// its own SMs (during the step, beside the other stage) and still computes the same gradients.
TEST(EmulatedRun, TimedGemmAnswersGiveTheSingleStageGradients) {
  PIPEPLAN_REQUIRE_GPU();
  if (sms_or_skip(2) == 0) GTEST_SKIP() << "GPU too small for 2 green contexts of 8 SMs";
  const auto run = run_on_gpu(tiny_plan(2, "1f1b", BackwardMode::twobp), 2, 3);
  expect_matches_reference(run, 2);
  EXPECT_NE(run.backend_name.find("; GEMMs: the fastest of 3 cuBLASLt answers per shape"),
            std::string::npos)
      << run.backend_name;
  ASSERT_EQ(run.gemm_shapes_timed.size(), 2u);
  for (const std::size_t shapes : run.gemm_shapes_timed)
    EXPECT_GT(shapes, 0u);
  EXPECT_EQ(reference().gemm_shapes_timed, std::vector<std::size_t>{0})
      << "the default times nothing";
}

// CUDA_DEVICE_MAX_CONNECTIONS: 32 unless the user set it (kept, capped at the driver's 32; a
// value that is not a count reads as the driver's default 8). Needs no GPU: only the variable.
TEST(WorkQueues, AskForTheMostUnlessTheUserChose) {
  const testing::ScopedEnv restore("CUDA_DEVICE_MAX_CONNECTIONS", nullptr);
  EXPECT_EQ(cuda::work_queues(), 8);
  EXPECT_EQ(cuda::prefer_many_work_queues(), 32);
  EXPECT_STREQ(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "32");
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "4", 1);
  EXPECT_EQ(cuda::prefer_many_work_queues(), 4);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "64", 1);
  EXPECT_EQ(cuda::work_queues(), 32);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "many", 1);
  EXPECT_EQ(cuda::work_queues(), 8);
}

// Each stage's memory account starts from the plan's static bytes: weights, gradients, the AdamW
// moments and the fp32 master weights the CUDA backend keeps (it once left the masters out).
TEST(EmulatedRun, TheMemoryAccountStartsAtThePlansStaticBytes) {
  PIPEPLAN_REQUIRE_GPU();
  if (sms_or_skip(2) == 0) GTEST_SKIP() << "GPU too small for 2 green contexts of 8 SMs";
  const TaskGraph plan = tiny_plan(2, "1f1b", BackwardMode::twobp);
  const auto run = run_on_gpu(plan, 2);
  ASSERT_EQ(run.measured.devices.size(), 2U);
  for (std::size_t d = 0; d < 2; ++d) {
    ASSERT_FALSE(run.measured.devices[d].memory_timeline.empty());
    EXPECT_EQ(run.measured.devices[d].memory_timeline.front().second, plan.meta.static_bytes[d])
        << "device " << d;
  }
}

// Host times are on each device's clock: no op starts on the device before its host thread
// began queuing it (within a launch latency), and some op waits for its thread (the first).
TEST(EmulatedRun, HostTimesAreOnTheDevicesClock) {
  PIPEPLAN_REQUIRE_GPU();
  if (sms_or_skip(2) == 0) GTEST_SKIP() << "GPU too small for 2 green contexts of 8 SMs";
  const TaskGraph plan = tiny_plan(2, "1f1b", BackwardMode::twobp);
  const auto run = run_on_gpu(plan, 2);
  ASSERT_EQ(run.measured.host_times.size(), run.measured.times.size());
  constexpr double kLaunchUs = 50;
  std::vector<double> earliest(2, 1e18);  // per device: min (device start - host start)
  for (int id = 0; id < plan.node_count(); ++id) {
    const Node& node = plan.node(id);
    if (node.kind != NodeKind::compute) continue;
    const double lead = run.measured.times[static_cast<std::size_t>(id)].start_us -
                        run.measured.host_times[static_cast<std::size_t>(id)].start_us;
    EXPECT_GT(lead, -kLaunchUs) << plan.node_name(id) << " started before it was queued";
    auto& e = earliest[static_cast<std::size_t>(node.device)];
    e = std::min(e, lead);
  }
  for (const double e : earliest)
    EXPECT_LT(e, 1000.0);  // the first op runs about when it is queued
}

// A device-local copy into a block the receiving stage freed waits for that stage's first fence
// after the free (the end event of the compute node queued next), not for its whole queue; a
// block freed in an earlier step waits for the step's start event.
TEST(StepEvents, TheFenceAfterAFreeIsTheNextComputeNodesEnd) {
  PIPEPLAN_REQUIRE_GPU();
  const TaskGraph plan = tiny_plan(1, "1f1b", BackwardMode::twobp);
  std::vector<int> compute;  // two compute nodes of the one device
  for (int id = 0; id < plan.node_count() && compute.size() < 2; ++id)
    if (plan.node(id).kind == NodeKind::compute) compute.push_back(id);
  ASSERT_EQ(compute.size(), 2U);
  const int a = compute[0];
  const int b = compute[1];
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    auto clock = std::make_shared<cuda::FenceClock>();
    cuda::StepEvents events({0}, {stream}, {clock});
    std::vector<NodeTime> times(static_cast<std::size_t>(plan.node_count()));
    events.begin_step(plan);
    EXPECT_EQ(events.fence_after(0, 0), nullptr) << "no fence recorded yet: the caller's tail";
    events.begin_node(plan, a);
    events.end_node(plan, a);
    EXPECT_EQ(clock->now(), 1);
    const cudaEvent_t a_end = events.fence_after(0, 0);
    ASSERT_NE(a_end, nullptr);
    EXPECT_EQ(events.fence_after(0, 1), nullptr);
    events.begin_node(plan, b);
    events.end_node(plan, b);
    const cudaEvent_t b_end = events.fence_after(0, 1);
    ASSERT_NE(b_end, nullptr);
    EXPECT_NE(b_end, a_end);
    EXPECT_EQ(events.fence_after(0, 0), a_end);
    events.end_step(plan, times);

    events.begin_step(plan);
    const cudaEvent_t start = events.fence_after(0, 1);  // freed last step: this step's start
    ASSERT_NE(start, nullptr);
    EXPECT_NE(start, a_end);
    EXPECT_NE(start, b_end);
    EXPECT_EQ(events.fence_after(0, 2), nullptr);
    events.begin_node(plan, b);
    events.end_node(plan, b);
    EXPECT_EQ(events.fence_after(0, 2), b_end) << "fences count on across steps";
    EXPECT_EQ(events.fence_after(1, 0), nullptr) << "a device beyond the plan's has no fences";
    events.end_step(plan, times);
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// An overlapped pair's second op is timed on the side stream and is no fence: a block freed while
// it was queued waits for the next compute node's end on the stage's stream, after the join.
TEST(StepEvents, APairsSecondOpIsTimedOnTheSideStreamAndIsNoFence) {
  PIPEPLAN_REQUIRE_GPU();
  const TaskGraph plan = tiny_plan(2, "dualpipe-v", BackwardMode::twobp);
  int compute = 0;
  while (plan.streams()[static_cast<std::size_t>(compute)].device != 0 ||
         plan.streams()[static_cast<std::size_t>(compute)].role != StreamRole::compute)
    ++compute;
  const std::vector<int>& order = plan.stream_order(compute);
  std::size_t at = 0;
  while (at + 2 < order.size() && !plan.node(order[at]).overlaps_next)
    ++at;
  ASSERT_LT(at + 2, order.size()) << "no overlapped pair followed by another compute node";
  const int first = order[at], second = order[at + 1], next = order[at + 2];
  cudaStream_t stream = nullptr, side = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  {
    // Device 0's nodes only; device 1 (same GPU and streams) records nothing here.
    auto clock = std::make_shared<cuda::FenceClock>();
    cuda::StepEvents events({0, 0}, {stream, stream}, {clock, std::make_shared<cuda::FenceClock>()},
                            {side, side});
    events.begin_step(plan);
    for (std::size_t i = 0; i < at; ++i) {
      events.begin_node(plan, order[i]);
      events.end_node(plan, order[i]);
    }
    const std::int64_t before = clock->now();
    events.begin_node(plan, first);
    events.end_node(plan, first);
    EXPECT_EQ(clock->now(), before + 1);
    events.begin_node(plan, second);
    events.end_node(plan, second);
    EXPECT_EQ(clock->now(), before + 1) << "the second op's end is no fence";
    EXPECT_EQ(events.fence_after(0, before + 1), nullptr) << "not until the next node's end";
    events.begin_node(plan, next);
    events.end_node(plan, next);
    EXPECT_NE(events.fence_after(0, before + 1), nullptr);
  }
  CUDA_CHECK(cudaStreamDestroy(side));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(EmulatedRun, ReportsTheWorkQueuesItRanWith) {
  PIPEPLAN_REQUIRE_GPU();
  if (sms_or_skip(2) == 0) GTEST_SKIP() << "GPU too small for 2 green contexts of 8 SMs";
  const cuda::CudaRun run(tiny_plan(2, "1f1b", BackwardMode::twobp), {2, ""});
  EXPECT_EQ(run.hardware().work_queues, cuda::work_queues());
}

// --transport nccl: the emulated stages of one GPU exchange tensors through NCCL (several ranks on
// one GPU) instead of device-local copies; every schedule gives the loss and the gradients of the
// same plan run over device-local copies, bit for bit (the same kernels on the same SM shares).
// Where NCCL refuses (too old), the test is skipped, or fails under PIPEPLAN_REQUIRE_NCCL=1.
TEST(EmulatedRun, OverNcclStagesOfOneGpuGiveTheDeviceLocalRunsGradients) {
  PIPEPLAN_REQUIRE_GPU();
#ifndef PIPEPLAN_HAVE_NCCL
  PIPEPLAN_NCCL_UNAVAILABLE(
      "built without NCCL (runtime/cuda/CMakeLists.txt found no nccl.h / libnccl)");
#else
  if (sms_or_skip(4) == 0) GTEST_SKIP() << "GPU too small for 4 green contexts of 8 SMs";
  const testing::ScopedEnv multi_rank("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  if (const std::string refusal = cuda::multi_rank_gpu_refusal(); !refusal.empty())
    PIPEPLAN_NCCL_UNAVAILABLE(refusal);
  struct Case {
    std::string name;
    TaskGraph plan;
  };
  const std::vector<Case> cases = {
      {"1f1b 2bp", tiny_plan(4, "1f1b", BackwardMode::twobp)},
      {"gpipe fused", tiny_plan(4, "gpipe", BackwardMode::fused)},
      {"interleaved 2bp", tiny_plan(2, "interleaved", BackwardMode::twobp)},
      {"zb-v", tiny_plan(2, "zb-v", BackwardMode::twobp)},
      {"1f1b 2bp with BPipe",
       tiny_plan(4, "1f1b", BackwardMode::twobp, BpipeMode::on, 8, {3, 2, 2, 1})},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const int devices = c.plan.meta.devices;
    const auto local = run_on_gpu(c.plan, devices, 1, GpuTransport::device_local);
    const auto nccl = run_on_gpu(c.plan, devices, 1, GpuTransport::nccl);
    EXPECT_NE(nccl.transport_name.find("nccl"), std::string::npos) << nccl.transport_name;
    EXPECT_EQ(nccl.loss, local.loss);
    ASSERT_EQ(nccl.grads.size(), local.grads.size());
    for (const auto& [name, grad] : local.grads)
      EXPECT_EQ(nccl.grads.at(name), grad) << name;
  }
#endif
}

// The run's timeout (--timeout-ms, GpuRunOptions::timeout) bounds the NCCL transport's waits: a
// send nobody receives ends the next reset() after that long, in one line naming it.
TEST(EmulatedRun, OverNcclTheRunsTimeoutBoundsTheTransportsWaits) {
  PIPEPLAN_REQUIRE_GPU();
#ifndef PIPEPLAN_HAVE_NCCL
  PIPEPLAN_NCCL_UNAVAILABLE(
      "built without NCCL (runtime/cuda/CMakeLists.txt found no nccl.h / libnccl)");
#else
  if (sms_or_skip(2) == 0) GTEST_SKIP() << "GPU too small for 2 green contexts of 8 SMs";
  const testing::ScopedEnv multi_rank("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  if (const std::string refusal = cuda::multi_rank_gpu_refusal(); !refusal.empty())
    PIPEPLAN_NCCL_UNAVAILABLE(refusal);
  GpuRunOptions options{2, ""};
  options.transport = GpuTransport::nccl;
  options.timeout = std::chrono::milliseconds(350);
  cuda::CudaRun run(tiny_plan(2, "1f1b", BackwardMode::twobp), options);
  std::unique_ptr<Transport> transport = run.take_transport();
  auto* nccl = dynamic_cast<cuda::NcclTransport*>(transport.get());
  ASSERT_NE(nccl, nullptr) << run.transport_name();
  EXPECT_EQ(nccl->send_timeout(), options.timeout);
  Message m;
  {
    cuda::CudaBackend& stage = run.backend(0);
    const cuda::ScopedContext current(cuda::context_of(stage.context().stream()));
    m = testing::unreceived(stage, "0F0");
  }
  transport->send(0, 1, Channel::pipeline, std::move(m));
  const auto start = std::chrono::steady_clock::now();
  const std::string what = testing::error_of([&] { transport->reset(); });
  EXPECT_EQ(what,
            "NCCL transport: send '0F0' on the pipeline link 0->1 (device 0): timed out after "
            "350 ms");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
#endif
}

// Four ranks (threads standing in for processes) share GPU 0: CudaRun with a process group and a
// node of four ranks puts each in a green context of a quarter of the SMs, and they exchange
// activations and gradients over NCCL (a world communicator split per link). Every rank's loss
// and every gradient, wherever it was computed, are those of the same plan run with --emulate 4
// over device-local copies, bit for bit (the same kernels on the same SM shares).
TEST(SharedGpuRanks, FourRanksOnOneGpuGiveTheEmulatedRunsGradients) {
  PIPEPLAN_REQUIRE_GPU();
#ifndef PIPEPLAN_HAVE_NCCL
  PIPEPLAN_NCCL_UNAVAILABLE(
      "built without NCCL (runtime/cuda/CMakeLists.txt found no nccl.h / libnccl)");
#else
  if (sms_or_skip(4) == 0) GTEST_SKIP() << "GPU too small for 4 green contexts of 8 SMs";
  // Set before the ranks start and restored after they end: NCCL reads it from the process.
  const testing::ScopedEnv multi_rank("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  if (const std::string refusal = cuda::multi_rank_gpu_refusal(); !refusal.empty())
    PIPEPLAN_NCCL_UNAVAILABLE(refusal);
  constexpr int kRanks = 4;
  const TaskGraph plan = tiny_plan(kRanks, "1f1b", BackwardMode::twobp);
  const auto emulated = run_on_gpu(plan, kRanks, 1, GpuTransport::device_local);

  struct RankRun {
    double loss = 0;
    std::map<std::string, std::vector<double>> grads;  // of the layers this rank holds
    std::string transport_name;
    int sm_count = 0;
    std::string error;
    SimResult measured;  // rank 0: every rank's nodes
  };
  std::vector<RankRun> ranks(kRanks);
  auto boxes = std::make_shared<testing::Mailboxes>();
  testing::run_ranks(kRanks, [&](int rank) {
    RankRun& out = ranks[static_cast<std::size_t>(rank)];
    try {
      auto group = std::make_shared<testing::ThreadGroup>(boxes, rank, kRanks);
      GpuRunOptions run_options{0, ""};
      run_options.group = group.get();
      run_options.timeout = std::chrono::milliseconds(60000);
      // The node's rank count passed in, as the launcher's LOCAL_WORLD_SIZE=4 would give it.
      cuda::CudaRun run(plan, run_options, kRanks);
      out.transport_name = run.transport_name();
      out.sm_count = run.hardware().sm_per_stage;
      ExecutorOptions options;
      options.seed = kSeed;
      options.node_timer = run.node_timer();
      options.group = group;
      options.timeout = run_options.timeout;
      Executor executor(plan, run.backend_factory(), options, run.take_transport());
      StepResult step = executor.step(StepMode::gradients_only);
      out.loss = step.loss;
      out.measured = std::move(step.measured);
      cuda::CudaBackend& backend = run.backend(rank);
      const cuda::ScopedContext current(cuda::context_of(backend.context().stream()));
      for (int s = 0; s < plan.schedule.stage_count(); ++s) {
        if (plan.schedule.stage_device[static_cast<std::size_t>(s)] != rank) continue;
        const StageLayers& range = plan.meta.stage_layers[static_cast<std::size_t>(s)];
        for (int l = range.first_layer; l < range.first_layer + range.layer_count; ++l) {
          for (const Parameter& p : executor.layer(l).params)
            out.grads[std::to_string(l) + "/" + p.name] = backend.download(p.grad);
        }
      }
    } catch (const Error& e) {
      out.error = e.what();
    }
  });
  std::map<std::string, std::vector<double>> grads;
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const RankRun& run = ranks[static_cast<std::size_t>(r)];
    ASSERT_EQ(run.error, "");
    EXPECT_NE(run.transport_name.find("4 processes on GPU 0, each in a green context of"),
              std::string::npos)
        << run.transport_name;
    EXPECT_EQ(run.sm_count, emulated.sm_per_stage);
    EXPECT_EQ(run.loss, emulated.loss);
    for (const auto& [name, grad] : run.grads)
      EXPECT_TRUE(grads.emplace(name, grad).second) << name << " on two ranks";
  }
  ASSERT_EQ(grads.size(), emulated.grads.size());
  for (const auto& [name, grad] : emulated.grads) {
    ASSERT_TRUE(grads.contains(name)) << name << " on no rank";
    EXPECT_EQ(grads.at(name), grad) << name;
  }
  // Rank 0 has every rank's host times, each on its device's clock (as in
  // HostTimesAreOnTheDevicesClock): a trace writes them on every slice.
  const SimResult& whole = ranks[0].measured;
  ASSERT_EQ(whole.host_times.size(), static_cast<std::size_t>(plan.node_count()));
  ASSERT_EQ(whole.times.size(), whole.host_times.size());
  constexpr double kLaunchUs = 50;
  for (int id = 0; id < plan.node_count(); ++id) {
    if (plan.node(id).kind != NodeKind::compute) continue;
    const NodeTime& host = whole.host_times[static_cast<std::size_t>(id)];
    EXPECT_GT(host.end_us, 0.0) << plan.node_name(id);
    EXPECT_GT(whole.times[static_cast<std::size_t>(id)].start_us - host.start_us, -kLaunchUs)
        << plan.node_name(id) << " started before it was queued";
  }
#endif
}

// Stages of one GPU over NCCL need NCCL_MULTI_RANK_GPU_ENABLE=1 (and NCCL 2.30+): without it the
// run is refused in one line naming the variable, before any communicator is made.
TEST(EmulatedRun, OverNcclStagesOfOneGpuNeedMultiRankNccl) {
  PIPEPLAN_REQUIRE_GPU();
#ifndef PIPEPLAN_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL (runtime/cuda/CMakeLists.txt found no nccl.h / libnccl)";
#else
  if (sms_or_skip(2) == 0) GTEST_SKIP() << "GPU too small for 2 green contexts of 8 SMs";
  const testing::ScopedEnv multi_rank("NCCL_MULTI_RANK_GPU_ENABLE", nullptr);
  GpuRunOptions options{2, ""};
  options.transport = GpuTransport::nccl;
  try {
    cuda::CudaRun run(tiny_plan(2, "1f1b", BackwardMode::twobp), options);
    FAIL() << "two stages of one GPU ran over NCCL without NCCL_MULTI_RANK_GPU_ENABLE";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("both on GPU 0"), std::string::npos) << message;
    EXPECT_TRUE(message.find("NCCL_MULTI_RANK_GPU_ENABLE=1") != std::string::npos ||
                message.find("NCCL 2.30 or later") != std::string::npos)
        << message;
  }
#endif
}

// On the CPU stand-in the one device is reported as two (each ordinal the same device).
TEST(EmulatedRun, RefusesDeviceLocalCopiesBetweenGpus) {
  PIPEPLAN_REQUIRE_GPU();
#ifdef PIPEPLAN_FAKE_DEVICE
  fake_cuda::set_device_count(2);
  struct OneDeviceAgain {
    OneDeviceAgain() = default;
    OneDeviceAgain(const OneDeviceAgain&) = delete;
    OneDeviceAgain& operator=(const OneDeviceAgain&) = delete;
    ~OneDeviceAgain() { fake_cuda::set_device_count(1); }
  } restore;
#endif
  const int gpus = cuda::cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs, found " << gpus;
  GpuRunOptions options{0, ""};
  options.transport = GpuTransport::device_local;
  try {
    cuda::CudaRun run(tiny_plan(2, "1f1b", BackwardMode::fused), options);
    FAIL() << "device-local copies between 2 GPUs were not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field_name("transport") +
                                         ": device-local copies join stages on one GPU; this run "
                                         "has 2 GPUs"),
              std::string::npos)
        << e.what();
  }
}

TEST(EmulatedRun, RefusesAPlanWithMoreDevicesThanGpusWithoutEmulate) {
  PIPEPLAN_REQUIRE_GPU();
  const int gpus = cuda::cuda_device_count();
  const TaskGraph plan = tiny_plan(gpus + 1, "1f1b", BackwardMode::fused);
  try {
    cuda::CudaRun run(plan, {0, ""});
    FAIL() << "a " << gpus + 1 << "-device plan ran on " << gpus << " GPU(s)";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field_name("emulate") + " " + std::to_string(gpus + 1)),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipeplan
