// One step of every schedule family × backward mode × BPipe off/on on the tiny model with 4
// stages equals the single-device, unpipelined reference: the loss and every parameter
// gradient within 1e-5 relative.
//
// Why not bitwise: the reference runs p2 per micro-batch (dW += dY_i^T X_i, one GEMM each, in
// micro-batch order); a deferred p2 (2bp, 2bp-fill) runs one GEMM over the concatenated
// micro-batches, and some schedules run backwards out of micro-batch order, so the fp32 sums are
// rounded in a different order (about 1e-7 relative per addition). Forward and p1 do not depend
// on the schedule, so the loss agrees to double rounding of the mean.
#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "planner/graph/validator.h"
#include "profiles/recompute.h"
#include "tests/runtime/executor_fixtures.h"
#include "tests/runtime/forwarding_backend.h"

namespace pipeplan {
namespace {

using testing::kDevices;
using testing::kMicrobatches;

constexpr double kTolerance = 1e-5;
constexpr std::uint64_t kSeed = 17;

struct Case {
  std::string family;
  BackwardMode mode = BackwardMode::fused;
  bool bpipe = false;
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const ScheduleFamily* family : schedule_families()) {
    for (const BackwardMode mode : family->backward_modes()) {
      for (const bool bpipe : {false, true})
        cases.push_back({family->name(), mode, bpipe});
    }
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.family + "_" + std::string(to_string(info.param.mode)) +
                     (info.param.bpipe ? "_bpipe" : "");
  for (char& c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0) c = '_';
  }
  return name;
}

const testing::Reference& reference_for(const ModelConfig& model) {
  static std::map<int, testing::Reference> cache;  // by block count
  auto it = cache.find(model.layers);
  if (it == cache.end()) {
    it = cache
             .emplace(model.layers,
                      testing::reference_step(model, kMicrobatches, 1, testing::kSeq, kSeed))
             .first;
  }
  return it->second;
}

class ExecutorGradients : public ::testing::TestWithParam<Case> {};

TEST_P(ExecutorGradients, MatchTheUnpipelinedReference) {
  const Case& c = GetParam();
  const ScheduleFamily& family = find_schedule_family(c.family);
  std::string why;
  std::optional<TaskGraph> plan = testing::tiny_plan(family, c.mode, &why);
  ASSERT_TRUE(plan.has_value()) << "the planner refused " << c.family << " " << to_string(c.mode)
                                << (c.bpipe ? " with bpipe" : "") << ": " << why;
  ExecutorOptions options;
  options.seed = kSeed;
  options.timeout = std::chrono::milliseconds(20000);
  if (c.bpipe) {
    plan = testing::with_bpipe_transfers(std::move(*plan), 0, kDevices - 1);
    const auto v = find_violation(*plan);  // the executor validates too; this names the rule
    ASSERT_FALSE(v.has_value()) << v->message;
  }
  ASSERT_EQ(plan->meta.seq, testing::kSeq);
  const ModelConfig model = plan->meta.model;
  // Copies of the model the plan holds: dualpipe's two, or auto's when it chose them.
  const auto copies = static_cast<std::size_t>(plan->schedule.replicas);
  Executor executor(std::move(*plan), testing::cpu_backends(), options);
  const StepResult result = executor.step(StepMode::gradients_only);
  const testing::Reference& ref = reference_for(model);

  EXPECT_NEAR(result.loss, ref.loss, kTolerance * ref.loss);
  cpu::CpuBackend host;
  int checked = 0;
  // Every copy of a layer (two with dualpipe, which sums them between its devices) holds the
  // reference's gradients.
  for (const auto& [index, ref_layer] : ref.layers) {
    const std::vector<const LayerParams*> layers = executor.layer_copies(index);
    ASSERT_EQ(layers.size(), copies) << "layer " << index;
    for (const LayerParams* layer : layers) {
      for (const Parameter& ref_param : ref_layer.params) {
        const Parameter& param = layer->at(ref_param.name);
        const double error =
            testing::relative_error(host.download(param.grad), host.download(ref_param.grad));
        EXPECT_LE(error, kTolerance) << "layer " << index << " " << ref_param.name;
        ++checked;
      }
    }
  }
  // Embedding, 7 per block, head; per copy.
  EXPECT_EQ(checked, static_cast<int>(copies) * (1 + 7 * model.layers + 2));
  if (c.bpipe) {
    // The stashes left the evictor, lived on the acceptor and came back, all of them.
    const BpipeBytes& evictor = result.bpipe.at(0);
    const BpipeBytes& acceptor = result.bpipe.at(kDevices - 1);
    EXPECT_GT(evictor.evicted, 0);
    EXPECT_EQ(acceptor.accepted, evictor.evicted);
    EXPECT_EQ(acceptor.returned, evictor.evicted);
    EXPECT_EQ(evictor.loaded, evictor.evicted);
  }
}

// A profile without optimizer times gives a plan without optimizer nodes: the two copies of each
// dualpipe stage then sum their weight gradients after the step's graph, once the sends are out.
TEST(ExecutorGradients, TwoCopiesSumTheirGradientsWithoutAnOptimizerNode) {
  const ScheduleFamily& family = find_schedule_family("dualpipe");
  AnalyticOptions analytic;
  analytic.seq = testing::kSeq;
  analytic.max_p2_concat = kMicrobatches;
  PlanRequest request;
  request.profile = analytic_profile(testing::tiny_for(family), find_gpu("h100"), analytic);
  for (auto& [kind, by_mbs] : request.profile.layers) {
    for (auto& [mbs, cost] : by_mbs)
      cost.optimizer_us = 0;
  }
  request.gpu = "h100";
  request.devices = kDevices;
  request.chunks = 2;
  request.microbatches = kMicrobatches;
  request.schedule = family.name();
  request.backward = BackwardMode::twobp;
  TaskGraph plan = make_plan(request).graph;
  for (const Node& n : plan.nodes())
    ASSERT_NE(n.op == OpType::O && n.kind == NodeKind::compute, true);
  ExecutorOptions options;
  options.seed = kSeed;
  const ModelConfig model = plan.meta.model;
  Executor executor(std::move(plan), testing::cpu_backends(), options);
  executor.step(StepMode::gradients_only);
  const testing::Reference& ref = reference_for(model);
  cpu::CpuBackend host;
  int checked = 0;
  for (const auto& [index, ref_layer] : ref.layers) {
    for (const LayerParams* layer : executor.layer_copies(index)) {
      for (const Parameter& ref_param : ref_layer.params) {
        EXPECT_LE(testing::relative_error(host.download(layer->at(ref_param.name).grad),
                                          host.download(ref_param.grad)),
                  kTolerance)
            << "layer " << index << " " << ref_param.name;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 2 * (1 + 7 * model.layers + 2));
}

// Activation recomputation (profiles/recompute.h) changes when a block's forward runs, never what
// it computes: a plan recomputing the first block of each stage, or every block, gives the loss
// and every gradient of the same plan keeping its activations bit for bit (the CPU backend is
// deterministic), with a BPipe eviction of the checkpoints too, and holds less on the first
// device with a fused backward (8 blocks: 2 per stage, so 1 and full differ).
TEST(ExecutorGradients, RecomputingBlocksGiveTheSameGradientsBitForBit) {
  struct Plain {
    std::string family;
    BackwardMode mode;
    bool bpipe;
  };
  for (const Plain& c :
       {Plain{"1f1b", BackwardMode::fused, false}, Plain{"1f1b", BackwardMode::twobp, false},
        Plain{"1f1b", BackwardMode::fused, true}, Plain{"zb-v", BackwardMode::twobp, false}}) {
    const ScheduleFamily& family = find_schedule_family(c.family);
    const auto run = [&](const Recompute& recompute) {
      PlanRequest request = testing::tiny_request(family, c.mode, true, Attention::flash, 8);
      if (family.traits().chunks.preferred == 1) request.layers_per_stage = {2, 2, 2, 2};
      request.recompute = recompute;
      TaskGraph plan = make_plan(request).graph;
      // (zb-v's virtual stages hold one block each: 1 block is recorded as full there.)
      EXPECT_EQ(plan.meta.recompute.any(), recompute.any());
      if (c.bpipe) plan = testing::with_bpipe_transfers(std::move(plan), 0, kDevices - 1);
      ExecutorOptions options;
      options.seed = kSeed;
      options.timeout = std::chrono::milliseconds(20000);
      auto executor = std::make_unique<Executor>(std::move(plan), testing::cpu_backends(), options);
      const StepResult result = executor->step(StepMode::gradients_only);
      return std::make_pair(std::move(executor), result);
    };
    const auto [kept_executor, kept] = run(Recompute{});
    for (const Recompute recompute :
         {Recompute{Recompute::Method::block, 1}, Recompute{Recompute::Method::full, 0}}) {
      SCOPED_TRACE(c.family + " " + std::string(to_string(c.mode)) + (c.bpipe ? " bpipe" : "") +
                   " recompute " + to_string(recompute));
      const auto [executor, result] = run(recompute);
      EXPECT_EQ(result.microbatch_losses, kept.microbatch_losses);
      cpu::CpuBackend host;
      int checked = 0;
      for (int index = 0; index < 10; ++index) {  // embedding, 8 blocks, head
        const LayerParams& a = *kept_executor->layer_copies(index).at(0);
        const LayerParams& b = *executor->layer_copies(index).at(0);
        for (const Parameter& param : a.params) {
          EXPECT_EQ(host.download(b.at(param.name).grad), host.download(param.grad))
              << "layer " << index << " " << param.name;
          ++checked;
        }
      }
      EXPECT_EQ(checked, 1 + 7 * 8 + 2);
      // 2bp keeps the retained X and dY of deferred p2s, the larger part, so its peak need not
      // fall (docs/guide/planning.md).
      if (c.mode == BackwardMode::fused) {
        EXPECT_LT(result.measured.peak_memory_bytes().at(0),
                  kept.measured.peak_memory_bytes().at(0));
      } else {
        EXPECT_LE(result.measured.peak_memory_bytes().at(0),
                  kept.measured.peak_memory_bytes().at(0));
      }
      if (c.bpipe) {
        EXPECT_GT(result.bpipe.at(0).evicted, 0);
      }
    }
  }
}

// The CPU backend, noting each forward and p1 by layer (one per device).
class PassLog final : public testing::ForwardingBackend {
 public:
  using Entries = std::vector<std::pair<char, int>>;  // ('F' or 'B', layer index)
  explicit PassLog(std::shared_ptr<Entries> entries) : entries_(std::move(entries)) {}
  ForwardResult forward(const LayerParams& layer, const Tensor& input,
                        const Tensor& targets) override {
    entries_->emplace_back('F', layer.layer_index);
    return ForwardingBackend::forward(layer, input, targets);
  }
  BackwardP1Result backward_p1(const LayerParams& layer, Stash stash, const Tensor& dy) override {
    entries_->emplace_back('B', layer.layer_index);
    return ForwardingBackend::backward_p1(layer, std::move(stash), dy);
  }

 private:
  std::shared_ptr<Entries> entries_;
};

// A recomputing block runs its forward twice per micro-batch, the second time right before its
// p1; every other layer once. 1F1B on 4 devices, 8 blocks (2 per stage), the first of each
// stage recomputing: layers 1, 3, 5, 7 (the embedding is layer 0).
TEST(ExecutorGradients, ARecomputingBlockRunsItsForwardAgainRightBeforeItsP1) {
  const ScheduleFamily& family = find_schedule_family("1f1b");
  for (const BackwardMode mode : {BackwardMode::fused, BackwardMode::twobp}) {
    SCOPED_TRACE(std::string(to_string(mode)));
    PlanRequest request = testing::tiny_request(family, mode, true, Attention::flash, 8);
    request.layers_per_stage = {2, 2, 2, 2};
    request.recompute = Recompute{Recompute::Method::block, 1};
    TaskGraph plan = make_plan(request).graph;
    std::vector<std::shared_ptr<PassLog::Entries>> logs;
    logs.reserve(kDevices);
    for (int d = 0; d < kDevices; ++d)
      logs.push_back(std::make_shared<PassLog::Entries>());
    Executor executor(std::move(plan),
                      [&](int device) { return std::make_unique<PassLog>(logs.at(device)); });
    executor.step(StepMode::gradients_only);
    std::map<int, int> forwards;  // by layer
    std::map<int, int> p1s;
    for (const auto& log : logs) {
      for (std::size_t i = 0; i < log->size(); ++i) {
        const auto [pass, layer] = (*log)[i];
        (pass == 'F' ? forwards : p1s)[layer] += 1;
        const bool recomputes = layer % 2 == 1 && layer <= 7;
        if (pass == 'B' && recomputes) {
          ASSERT_GT(i, 0u);
          EXPECT_EQ((*log)[i - 1], std::make_pair('F', layer)) << "before p1 " << i;
        }
      }
    }
    for (int layer = 0; layer <= 9; ++layer) {
      const bool recomputes = layer % 2 == 1 && layer <= 7;
      EXPECT_EQ(forwards[layer], (recomputes ? 2 : 1) * kMicrobatches) << "layer " << layer;
      EXPECT_EQ(p1s[layer], kMicrobatches) << "layer " << layer;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, ExecutorGradients, ::testing::ValuesIn(all_cases()),
                         case_name);

}  // namespace
}  // namespace pipeplan
