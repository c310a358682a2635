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
};

class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(std::shared_ptr<Counts> counts) : counts_(std::move(counts)) {}
  std::string name() const override { return inner_.name(); }
  DType compute_dtype() const override { return inner_.compute_dtype(); }
  Tensor upload(std::span<const double> values, const Shape& shape) override {
    return inner_.upload(values, shape);
  }
  Tensor upload_loss_gradient(double value) override {
    note_transfer();
    ++counts_->loss_gradients;
    return inner_.upload_loss_gradient(value);
  }
  Tensor upload_tokens(std::span<const std::int32_t> tokens, const Shape& shape) override {
    return inner_.upload_tokens(tokens, shape);
  }
  std::vector<double> download(const Tensor& tensor) override {
    note_transfer();
    ++counts_->downloads;
    return inner_.download(tensor);
  }
  std::vector<std::int32_t> download_tokens(const Tensor& tensor) override {
    return inner_.download_tokens(tensor);
  }
  LayerParams init_layer(const ModelConfig& model, LayerKind kind, int layer_index,
                         std::uint64_t seed) override {
    return inner_.init_layer(model, kind, layer_index, seed);
  }
  TokenBatch synthetic_batch(int batch, int seq, int vocab, std::uint64_t seed) override {
    note_transfer();
    ++counts_->batches;
    return inner_.synthetic_batch(batch, seq, vocab, seed);
  }
  ForwardResult forward(const LayerParams& layer, const Tensor& input,
                        const Tensor& targets) override {
    counts_->in_step = true;
    return inner_.forward(layer, input, targets);
  }
  BackwardP1Result backward_p1(const LayerParams& layer, Stash stash, const Tensor& dy) override {
    return inner_.backward_p1(layer, std::move(stash), dy);
  }
  void backward_p2(LayerParams& layer, std::span<const Retained* const> retained) override {
    inner_.backward_p2(layer, retained);
  }
  void zero_grads(LayerParams& layer) override { inner_.zero_grads(layer); }
  void adamw_step(LayerParams& layer, const AdamWConfig& config, int step) override {
    inner_.adamw_step(layer, config, step);
  }
  void synchronize() override { counts_->in_step = false; }  // the step's work is done

 private:
  void note_transfer() {
    if (counts_->in_step) ++counts_->transfers_in_step;
  }
  cpu::CpuBackend inner_;
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

}  // namespace
}  // namespace pipeplan
