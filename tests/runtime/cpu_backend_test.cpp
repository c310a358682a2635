// The CPU backend through the Backend interface: a block's and the whole model's gradients
// against finite differences (in the f64 compute mode, see gradcheck.h for the tolerance), p2
// over concatenated micro-batches, the stash and retained byte formulas of
// docs/design/runtime-layers.md, and the errors it raises.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "tests/runtime/gradcheck.h"
#include "tests/runtime/models.h"

namespace pipeplan {
namespace {

using testing::expect_gradient;
using testing::random_values;
using testing::weighted_sum;
using Vec = std::vector<double>;
using Weights = std::map<std::string, Vec>;

// Host copies of a layer's weights, drawn larger than the 0.02 init (std 0.3, gains 1 ± 0.2) so
// that softmaxes are far from uniform and every gradient is well above the tolerance.
Weights sharpened_weights(const LayerParams& layer, std::uint64_t seed) {
  Weights weights;
  for (const Parameter& param : layer.params) {
    const auto count = static_cast<std::size_t>(param.weight.numel());
    Vec values = random_values(count, seed++, param.weight_decay ? 0.3 : 0.2);
    if (!param.weight_decay) {
      for (double& value : values)
        value += 1.0;
    }
    weights[param.name] = values;
  }
  return weights;
}

void upload_weights(Backend& backend, LayerParams& layer, const Weights& weights) {
  for (Parameter& param : layer.params) {
    param.weight = backend.upload(weights.at(param.name), param.weight.shape());
  }
}

TEST(CpuBackendGradcheck, BlockP1AndP2MatchFiniteDifferences) {
  cpu::CpuBackend backend(DType::f64);
  const ModelConfig model = testing::gradcheck_model();
  LayerParams layer = backend.init_layer(model, LayerKind::block, 1, 7);
  Weights weights = sharpened_weights(layer, 100);
  const Shape shape = {2, model.seq, model.hidden};
  Vec x = random_values(static_cast<std::size_t>(shape_numel(shape)), 1);
  const Vec r = random_values(x.size(), 2);
  const auto objective = [&] {
    upload_weights(backend, layer, weights);
    const ForwardResult result = backend.forward(layer, backend.upload(x, shape), {});
    return weighted_sum(backend.download(result.output), r);
  };
  objective();
  ForwardResult forward = backend.forward(layer, backend.upload(x, shape), {});
  BackwardP1Result p1 =
      backend.backward_p1(layer, std::move(forward.stash), backend.upload(r, shape));
  const Retained* retained[] = {&p1.retained};
  backend.backward_p2(layer, retained);
  expect_gradient("block dx", x, backend.download(p1.input_grad), objective);
  for (auto& [name, values] : weights) {
    expect_gradient("block d" + name, values, backend.download(layer.at(name).grad), objective);
  }
}

// Embedding, two blocks and the head over two micro-batches; the objective is the mean of the
// two micro-batch losses, so the head's p1 gets dloss = 1/2, and every p2 runs once over both
// micro-batches concatenated.
class WholeModel {
 public:
  WholeModel() : backend_(DType::f64), model_(testing::gradcheck_model()) {
    const std::vector<LayerKind> kinds = {LayerKind::embedding, LayerKind::block, LayerKind::block,
                                          LayerKind::head};
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      layers_.push_back(backend_.init_layer(model_, kinds[i], static_cast<int>(i), 3));
      weights_.push_back(sharpened_weights(layers_.back(), 1000 * i));
    }
    for (std::uint64_t mb = 0; mb < 2; ++mb) {
      batches_.push_back(backend_.synthetic_batch(2, model_.seq, model_.vocab, 40 + mb));
    }
  }

  double loss() {
    sync();
    double total = 0;
    for (const TokenBatch& batch : batches_) {
      Tensor x = batch.inputs;
      for (const LayerParams& layer : layers_) {
        x = backend_.forward(layer, x, batch.targets).output;
      }
      total += 0.5 * backend_.download(x)[0];
    }
    return total;
  }

  void backward() {
    sync();
    std::vector<std::vector<Retained>> retained(layers_.size());
    for (const TokenBatch& batch : batches_) {
      std::vector<Stash> stashes;
      Tensor x = batch.inputs;
      for (const LayerParams& layer : layers_) {
        ForwardResult result = backend_.forward(layer, x, batch.targets);
        x = result.output;
        stashes.push_back(std::move(result.stash));
      }
      Tensor dy = backend_.upload(Vec{0.5}, {1});
      for (std::size_t l = layers_.size(); l-- > 0;) {
        BackwardP1Result p1 = backend_.backward_p1(layers_[l], std::move(stashes[l]), dy);
        dy = p1.input_grad;
        retained[l].push_back(std::move(p1.retained));
      }
    }
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const std::vector<const Retained*> sets = {&retained[l][0], &retained[l][1]};
      backend_.backward_p2(layers_[l], sets);
    }
  }

  void sync() {
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      upload_weights(backend_, layers_[l], weights_[l]);
    }
  }

  cpu::CpuBackend backend_;
  ModelConfig model_;
  std::vector<LayerParams> layers_;
  std::vector<Weights> weights_;
  std::vector<TokenBatch> batches_;
};

TEST(CpuBackendGradcheck, WholeModelGradientsMatchFiniteDifferences) {
  WholeModel model;
  model.backward();
  for (std::size_t l = 0; l < model.layers_.size(); ++l) {
    std::vector<std::pair<std::string, Vec>> grads;
    for (const Parameter& param : model.layers_[l].params) {
      grads.emplace_back(param.name, model.backend_.download(param.grad));
    }
    for (auto& [name, grad] : grads) {
      expect_gradient(
          "layer " + std::to_string(l) + " d" + name, model.weights_[l].at(name), grad,
          [&] { return model.loss(); }, 5);
    }
  }
}

// Runs F and p1 of `layer` on k = 3 micro-batches and returns the retained sets.
std::vector<Retained> retained_micro_batches(Backend& backend, const LayerParams& layer,
                                             const ModelConfig& model) {
  std::vector<Retained> sets;
  for (std::uint64_t mb = 0; mb < 3; ++mb) {
    const TokenBatch batch = backend.synthetic_batch(2, model.seq, model.vocab, 50 + mb);
    const Shape shape = {2, model.seq, model.hidden};
    const auto count = static_cast<std::size_t>(shape_numel(shape));
    Tensor input = backend.upload(random_values(count, 60 + mb), shape);
    Tensor dy = backend.upload(random_values(count, 70 + mb), shape);
    if (layer.kind == LayerKind::embedding) input = batch.inputs;
    if (layer.kind == LayerKind::head) dy = backend.upload(Vec{1.0 / 3}, {1});
    ForwardResult forward = backend.forward(layer, input, batch.targets);
    sets.push_back(backend.backward_p1(layer, std::move(forward.stash), dy).retained);
  }
  return sets;
}

// One p2 over 3 concatenated micro-batches equals 3 single p2 calls. Same terms, so only the
// order of fp32 additions may differ: at most K·u·Σ|terms| for K = 3·2·32 rows, i.e. ≈ 1e-5 of
// the terms' magnitude, and the gradients here are sums of same-scale terms, so the tolerance is
// 1e-5 of the largest gradient entry. (The CPU kernels keep the order: the results are in fact
// bitwise equal.)
TEST(CpuBackend, BackwardP2OverConcatenatedMicroBatchesEqualsSumOfSingleCalls) {
  cpu::CpuBackend backend;
  const ModelConfig model = testing::tiny_model();
  const std::vector<LayerKind> kinds = {LayerKind::embedding, LayerKind::block, LayerKind::head};
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    LayerParams layer = backend.init_layer(model, kinds[i], static_cast<int>(i), 9);
    const std::vector<Retained> sets = retained_micro_batches(backend, layer, model);
    const std::vector<const Retained*> all = {&sets[0], &sets[1], &sets[2]};
    backend.backward_p2(layer, all);
    std::vector<Vec> concatenated;
    for (const Parameter& param : layer.params)
      concatenated.push_back(backend.download(param.grad));
    backend.zero_grads(layer);
    for (const Retained* set : all)
      backend.backward_p2(layer, {&set, 1});
    for (std::size_t p = 0; p < layer.params.size(); ++p) {
      const Vec separate = backend.download(layer.params[p].grad);
      double largest = 0;
      for (const double value : separate)
        largest = std::max(largest, std::abs(value));
      ASSERT_GT(largest, 0.0) << layer.params[p].name;
      for (std::size_t e = 0; e < separate.size(); ++e) {
        ASSERT_NEAR(concatenated[p][e], separate[e], 1e-5 * largest) << layer.params[p].name;
      }
    }
  }
}

// Closed forms of docs/design/runtime-layers.md, fp32 (4 bytes), N = B·T tokens.
TEST(CpuBackend, StashAndRetainedBytesFollowTheDocumentedFormulas) {
  cpu::CpuBackend backend;
  const ModelConfig m = testing::tiny_model();
  const std::int64_t b = 2, n = b * m.seq, c = m.hidden, f = m.ffn_hidden, v = m.vocab;
  const std::int64_t width = (m.heads + 2 * m.kv_heads) * (m.hidden / m.heads);
  const TokenBatch batch = backend.synthetic_batch(2, m.seq, m.vocab, 1);
  const auto run = [&](LayerKind kind, const Tensor& input, const Tensor& dy) {
    const LayerParams layer = backend.init_layer(m, kind, 0, 1);
    ForwardResult forward = backend.forward(layer, input, batch.targets);
    const std::int64_t stash = forward.stash.bytes();
    const std::int64_t retained =
        backend.backward_p1(layer, std::move(forward.stash), dy).retained.bytes();
    return std::pair{stash, retained};
  };
  const Tensor x = backend.upload(random_values(n * c, 1), {b, m.seq, c});
  EXPECT_EQ(run(LayerKind::embedding, batch.inputs, x), std::pair(4 * n, 4 * n * (1 + c)));
  EXPECT_EQ(run(LayerKind::block, x, x),
            std::pair(4 * n * (5 * c + width + m.heads * m.seq + 3 * f + 2),
                      4 * n * (9 * c + width + 3 * f)));
  EXPECT_EQ(run(LayerKind::head, x, backend.upload(Vec{1.0}, {1})),
            std::pair(4 * n * (2 * c + 1 + v + 1), 4 * n * (3 * c + v)));
}

// The head's dy is 1/m; it is uploaded in f32 (f64 for an f64 backend), never rounded further.
TEST(CpuBackend, LossGradientKeepsAtLeastF32) {
  cpu::CpuBackend f32_backend;
  const Tensor third = f32_backend.upload_loss_gradient(1.0 / 3);
  EXPECT_EQ(third.dtype(), DType::f32);
  EXPECT_EQ(third.shape(), Shape{1});
  EXPECT_EQ(f32_backend.download(third), Vec{static_cast<float>(1.0 / 3)});
  cpu::CpuBackend f64_backend(DType::f64);
  const Tensor exact = f64_backend.upload_loss_gradient(1.0 / 3);
  EXPECT_EQ(exact.dtype(), DType::f64);
  EXPECT_EQ(f64_backend.download(exact), Vec{1.0 / 3});
}

TEST(CpuBackend, ParameterAndOptimizerBytes) {
  cpu::CpuBackend backend;
  const ModelConfig m = testing::tiny_model();
  const LayerParams block = backend.init_layer(m, LayerKind::block, 1, 1);
  const std::int64_t c = m.hidden, f = m.ffn_hidden;
  const std::int64_t count = 2 * c + 3 * c * c + c * c + 3 * c * f;  // gains, Wqkv, Wo, MLP
  EXPECT_EQ(block.param_bytes(), 4 * count);
  EXPECT_EQ(block.grad_bytes(), 4 * count);
  EXPECT_EQ(block.optimizer_bytes(), 8 * count);
}

TEST(CpuBackend, RejectsWhatItCannotRun) {
  cpu::CpuBackend backend;
  ModelConfig gelu = testing::tiny_model();
  gelu.mlp = MlpKind::gelu;
  EXPECT_THROW(backend.init_layer(gelu, LayerKind::block, 1, 1), Error);
  ModelConfig tied = testing::tiny_model();
  tied.tied_embeddings = true;
  EXPECT_THROW(backend.init_layer(tied, LayerKind::head, 5, 1), Error);
  EXPECT_THROW(cpu::CpuBackend{DType::bf16}, Error);
}

TEST(CpuBackend, RejectsMismatchedInputsAndContexts) {
  cpu::CpuBackend backend;
  const ModelConfig m = testing::tiny_model();
  const LayerParams embedding = backend.init_layer(m, LayerKind::embedding, 0, 1);
  LayerParams block = backend.init_layer(m, LayerKind::block, 1, 1);
  const std::vector<std::int32_t> bad = {0, 1, 256, 2};
  EXPECT_THROW(backend.forward(embedding, backend.upload_tokens(bad, {1, 4}), {}), Error);

  const Tensor x = backend.upload(random_values(4 * m.hidden, 1), {1, 4, m.hidden});
  EXPECT_THROW(backend.forward(block, backend.upload(Vec(4 * 8), {1, 4, 8}), {}), Error);
  ForwardResult forward = backend.forward(block, x, {});
  const Tensor wrong_dy = backend.upload(Vec(3 * m.hidden), {1, 3, m.hidden});
  EXPECT_THROW(backend.backward_p1(block, forward.stash, wrong_dy), Error);
  BackwardP1Result p1 = backend.backward_p1(block, std::move(forward.stash), x);
  p1.retained.layer_index = 2;  // as if it came from another layer
  const Retained* sets[] = {&p1.retained};
  EXPECT_THROW(backend.backward_p2(block, sets), Error);
}

}  // namespace
}  // namespace pipeplan
