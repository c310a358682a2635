// What a device worker asks of its backend during a step: an asynchronous backend (CUDA)
// synchronises its stream on every upload and download, so the step's synthetic batches and the
// head's dy = 1/m are uploaded before the step's clock starts (once, reused by later steps) and
// the head's losses are read back after the step's work, never from inside a pass.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "tests/runtime/executor_fixtures.h"
#include "tests/runtime/forwarding_backend.h"

namespace pipeplan {
namespace {

// The CPU reference, counting the host transfers and flagging those made while a step's compute
// is running (between the first forward and the step's end).
struct Counts {
  std::atomic<int> batches{0};
  std::atomic<int> loss_gradients{0};
  std::atomic<int> downloads{0};
  std::atomic<int> transfers_in_step{0};
  std::atomic<bool> in_step{false};
  std::atomic<int> zero_grads{0};
  std::atomic<int> zero_grads_before_timer{0};  // queued before the node timer's begin_step
  std::atomic<bool> timer_running{false};
};

class CountingBackend final : public testing::ForwardingBackend {
 public:
  explicit CountingBackend(std::shared_ptr<Counts> counts) : counts_(std::move(counts)) {}
  Tensor upload_loss_gradient(double value) override {
    note_transfer();
    ++counts_->loss_gradients;
    return ForwardingBackend::upload_loss_gradient(value);
  }
  std::vector<double> download(const Tensor& tensor) override {
    note_transfer();
    ++counts_->downloads;
    return ForwardingBackend::download(tensor);
  }
  TokenBatch synthetic_batch(int batch, int seq, int vocab, std::uint64_t seed) override {
    note_transfer();
    ++counts_->batches;
    return ForwardingBackend::synthetic_batch(batch, seq, vocab, seed);
  }
  ForwardResult forward(const LayerParams& layer, const Tensor& input,
                        const Tensor& targets) override {
    counts_->in_step = true;
    return ForwardingBackend::forward(layer, input, targets);
  }
  void zero_grads(LayerParams& layer) override {
    ++counts_->zero_grads;
    if (!counts_->timer_running) ++counts_->zero_grads_before_timer;
    ForwardingBackend::zero_grads(layer);
  }
  void synchronize() override { counts_->in_step = false; }  // the step's work is done

 private:
  void note_transfer() {
    if (counts_->in_step) ++counts_->transfers_in_step;
  }
  std::shared_ptr<Counts> counts_;
};

TEST(DeviceWorker, BatchesUploadedOnceBeforeTheStepAndLossesReadAfterIt) {
  const ScheduleFamily& family = find_schedule_family("1f1b");
  TaskGraph plan = *testing::tiny_plan(family, BackwardMode::twobp);
  auto counts = std::make_shared<Counts>();
  Executor executor(std::move(plan),
                    [counts](int) { return std::make_unique<CountingBackend>(counts); });
  const StepResult first = executor.step();
  const StepResult second = executor.step();
  // The embedding's device and the head's each make the m batches once, for every step.
  EXPECT_EQ(counts->batches, 2 * testing::kMicrobatches);
  EXPECT_EQ(counts->loss_gradients, 1);  // the head's dy = 1/m, also made once
  // One loss per micro-batch per step, all read after the step's compute.
  EXPECT_EQ(counts->downloads, 2 * testing::kMicrobatches);
  EXPECT_EQ(counts->transfers_in_step, 0);
  ASSERT_EQ(first.microbatch_losses.size(), static_cast<std::size_t>(testing::kMicrobatches));
  for (const double loss : first.microbatch_losses)
    EXPECT_GT(loss, 0.0);
  EXPECT_LT(second.loss, first.loss);  // the same batches again, after one AdamW step
}

// The host memory a CPU run is checked against (--max-host-gib) is close to what the run holds,
// both copies of the model included, for plans whose profile counts the probabilities the CPU
// backend keeps (materialized attention). An estimate: tiny's 1f1b holds 9 % more (messages in
// flight, received buffers); dualpipe held twice the estimate while it counted one copy.
TEST(DeviceWorker, TheHostMemoryEstimateCoversWhatARunHolds) {
  for (const char* name : {"1f1b", "dualpipe"}) {
    SCOPED_TRACE(name);
    const std::optional<TaskGraph> plan = testing::tiny_plan(
        find_schedule_family(name), BackwardMode::twobp, nullptr, true, Attention::materialized);
    ASSERT_TRUE(plan.has_value());
    const std::int64_t estimate = estimate_cpu_host_bytes(*plan);
    Executor executor(*plan, testing::cpu_backends());
    const StepResult step = executor.step();
    std::int64_t held = 0;
    for (const std::int64_t peak : step.measured.peak_memory_bytes())
      held += peak;
    EXPECT_GE(static_cast<double>(estimate), 0.8 * static_cast<double>(held));
    EXPECT_LE(estimate, 2 * held);
    // One process per device (mpirun) holds its device's share; the shares add up to the whole.
    std::int64_t shares = 0;
    for (int d = 0; d < plan->meta.devices; ++d) {
      const std::int64_t share = estimate_cpu_host_bytes(*plan, d);
      EXPECT_GT(share, 0) << "device " << d;
      EXPECT_LT(share, estimate) << "device " << d;
      shares += share;
    }
    EXPECT_EQ(shares, estimate);
  }
}

// A node timer that only notes when the step's timing runs (from begin_step to end_step).
class NotingTimer final : public NodeTimer {
 public:
  explicit NotingTimer(std::shared_ptr<Counts> counts) : counts_(std::move(counts)) {}
  void begin_step(const TaskGraph& /*plan*/) override { counts_->timer_running = true; }
  void begin_node(const TaskGraph& /*plan*/, int /*id*/) override {}
  void end_node(const TaskGraph& /*plan*/, int /*id*/) override {}
  void end_step(const TaskGraph& /*plan*/, std::vector<NodeTime>& /*times*/) override {
    counts_->timer_running = false;
  }
  void align_host_times(const TaskGraph& /*plan*/, std::chrono::steady_clock::time_point /*start*/,
                        std::vector<NodeTime>& /*host_times*/) const override {}

 private:
  std::shared_ptr<Counts> counts_;
};

// Gradients are zeroed once per training step, by the optimizer after its update; the next
// step's start zeroes them again only where a pass wrote them since (the first step, after a
// gradients-only step). Zeroing there comes after the node timer's start, so no work the step
// queues lies before the device clock's zero. Each device zeroes each of its layers.
TEST(DeviceWorker, GradientsAreZeroedOncePerStepAndOnlyAfterTheTimerStarts) {
  for (const BackwardMode mode : {BackwardMode::fused, BackwardMode::twobp}) {
    const ScheduleFamily& family = find_schedule_family("1f1b");
    TaskGraph plan = *testing::tiny_plan(family, mode);
    const int layers = static_cast<int>(plan.meta.model.layer_list().size());
    auto counts = std::make_shared<Counts>();
    ExecutorOptions options;
    options.node_timer = std::make_shared<NotingTimer>(counts);
    Executor executor(
        std::move(plan), [counts](int) { return std::make_unique<CountingBackend>(counts); },
        options);
    const auto gradients = [&] {
      std::vector<double> all;
      for (int l = 0; l < layers; ++l) {
        const LayerParams& layer = executor.layer(l);
        for (const Parameter& param : layer.params) {
          const std::vector<double> g = cpu::CpuBackend().download(param.grad);
          all.insert(all.end(), g.begin(), g.end());
        }
      }
      return all;
    };
    executor.step();  // zeroed before the step (the first) and by the optimizer
    EXPECT_EQ(counts->zero_grads, 2 * layers);
    executor.step();  // by the optimizer only
    EXPECT_EQ(counts->zero_grads, 3 * layers);
    executor.step(StepMode::gradients_only);  // none: the optimizer zeroed them
    EXPECT_EQ(counts->zero_grads, 3 * layers);
    const std::vector<double> first = gradients();
    executor.step(StepMode::gradients_only);  // the last step's gradients, zeroed first
    EXPECT_EQ(counts->zero_grads, 4 * layers);
    EXPECT_EQ(gradients(), first);  // not added to the last step's
    EXPECT_EQ(counts->zero_grads_before_timer, 0);
  }
}

}  // namespace
}  // namespace pipeplan
