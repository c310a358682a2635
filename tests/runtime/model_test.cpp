// A whole model of the `tiny` preset's dimensions on the CPU backend: loss at init, a few
// training steps, and deterministic init and synthetic batches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "tests/runtime/models.h"

namespace pipeplan {
namespace {

std::vector<LayerParams> init_model(Backend& backend, const ModelConfig& model,
                                    std::uint64_t seed) {
  std::vector<LayerParams> layers = {backend.init_layer(model, LayerKind::embedding, 0, seed)};
  for (int l = 1; l <= model.layers; ++l) {
    layers.push_back(backend.init_layer(model, LayerKind::block, l, seed));
  }
  layers.push_back(backend.init_layer(model, LayerKind::head, model.layers + 1, seed));
  return layers;
}

// One training step on one micro-batch (forward, p1 all the way down, p2 per layer, AdamW);
// returns the loss before the update.
double train_step(Backend& backend, std::vector<LayerParams>& layers, const TokenBatch& batch,
                  int step) {
  std::vector<Stash> stashes;
  Tensor x = batch.inputs;
  for (const LayerParams& layer : layers) {
    ForwardResult result = backend.forward(layer, x, batch.targets);
    x = result.output;
    stashes.push_back(std::move(result.stash));
  }
  const double loss = backend.download(x)[0];
  Tensor dy = backend.upload(std::vector<double>{1.0}, {1});
  for (std::size_t l = layers.size(); l-- > 0;) {
    BackwardP1Result p1 = backend.backward_p1(layers[l], std::move(stashes[l]), dy);
    dy = p1.input_grad;
    const Retained* sets[] = {&p1.retained};
    backend.backward_p2(layers[l], sets);
  }
  for (LayerParams& layer : layers) {
    backend.adamw_step(layer, AdamWConfig{1e-2, 0.9, 0.95, 1e-8, 0.0}, step);
    backend.zero_grads(layer);
  }
  return loss;
}

// Logits at init are xn·W^T with unit-RMS xn and W ~ N(0, 0.02²): std σ = 0.02·√64 = 0.16, so
// the expected loss is ln V + σ²/2 ≈ ln V + 0.013, and the mean over 256 tokens scatters by
// about σ/√256 = 0.01. 0.05 leaves room for both.
TEST(CpuModel, LossAtInitIsLogVocab) {
  cpu::CpuBackend backend;
  const ModelConfig model = testing::tiny_model();
  const std::vector<LayerParams> layers = init_model(backend, model, 1234);
  const TokenBatch batch = backend.synthetic_batch(8, model.seq, model.vocab, 99);
  Tensor x = batch.inputs;
  for (const LayerParams& layer : layers)
    x = backend.forward(layer, x, batch.targets).output;
  EXPECT_NEAR(backend.download(x)[0], std::log(256.0), 0.05);
}

// 64 random tokens are memorisable: a working forward/backward/optimizer drives the loss well
// below the ln V = 5.55 of guessing.
TEST(CpuModel, TrainingOnOneBatchLowersTheLoss) {
  cpu::CpuBackend backend;
  const ModelConfig model = testing::tiny_model();
  std::vector<LayerParams> layers = init_model(backend, model, 5);
  const TokenBatch batch = backend.synthetic_batch(2, model.seq, model.vocab, 6);
  const double first = train_step(backend, layers, batch, 1);
  double last = first;
  for (int step = 2; step <= 30; ++step)
    last = train_step(backend, layers, batch, step);
  EXPECT_NEAR(first, std::log(256.0), 0.05);
  EXPECT_LT(last, 0.6 * first);  // 2.24 after 30 steps with these seeds
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.bytes() == b.bytes() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.bytes())) == 0;
}

TEST(CpuModel, InitIsDeterministicInSeedAndLayer) {
  cpu::CpuBackend backend;
  const ModelConfig model = testing::tiny_model();
  for (const LayerKind kind : {LayerKind::embedding, LayerKind::block, LayerKind::head}) {
    const LayerParams a = backend.init_layer(model, kind, 1, 42);
    const LayerParams same = backend.init_layer(model, kind, 1, 42);
    const LayerParams other_seed = backend.init_layer(model, kind, 1, 43);
    const LayerParams other_layer = backend.init_layer(model, kind, 2, 42);
    for (std::size_t p = 0; p < a.params.size(); ++p) {
      EXPECT_TRUE(same_bytes(a.params[p].weight, same.params[p].weight)) << a.params[p].name;
      if (!a.params[p].weight_decay) continue;  // gains are all 1 whatever the seed
      EXPECT_FALSE(same_bytes(a.params[p].weight, other_seed.params[p].weight));
      EXPECT_FALSE(same_bytes(a.params[p].weight, other_layer.params[p].weight));
    }
  }
}

TEST(CpuModel, InitHasTheStatedScale) {
  cpu::CpuBackend backend;
  const LayerParams block = backend.init_layer(testing::tiny_model(), LayerKind::block, 1, 8);
  const std::vector<double> w = backend.download(block.at("mlp.w_gate").weight);
  double sum = 0, sum_squares = 0;
  for (const double value : w) {
    sum += value;
    sum_squares += value * value;
  }
  const double n = double(w.size());  // 11008 samples: the std estimate is within ~1 %
  EXPECT_NEAR(sum / n, 0.0, 0.001);
  EXPECT_NEAR(std::sqrt(sum_squares / n), 0.02, 0.0005);
}

TEST(CpuModel, SyntheticBatchIsDeterministicAndShifted) {
  cpu::CpuBackend backend;
  const TokenBatch a = backend.synthetic_batch(3, 16, 50, 7);
  const TokenBatch same = backend.synthetic_batch(3, 16, 50, 7);
  const TokenBatch other = backend.synthetic_batch(3, 16, 50, 8);
  EXPECT_EQ(a.inputs.shape(), (Shape{3, 16}));
  EXPECT_TRUE(same_bytes(a.inputs, same.inputs));
  EXPECT_TRUE(same_bytes(a.targets, same.targets));
  EXPECT_FALSE(same_bytes(a.inputs, other.inputs));
  const std::vector<std::int32_t> inputs = backend.download_tokens(a.inputs);
  const std::vector<std::int32_t> targets = backend.download_tokens(a.targets);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_GE(inputs[i], 0);
    EXPECT_LT(inputs[i], 50);
    if (i % 16 != 15) {
      EXPECT_EQ(targets[i], inputs[i + 1]);
    }
  }
}

}  // namespace
}  // namespace pipeplan
