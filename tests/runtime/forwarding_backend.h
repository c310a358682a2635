// Test backends that watch what the executor asks of a backend: ForwardingBackend passes every
// call to the CPU reference backend; a test derives from it and overrides the calls it watches,
// calling ForwardingBackend's to do the work.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu/cpu_backend.h"

namespace pipeplan::testing {

class ForwardingBackend : public Backend {
 public:
  std::string name() const override { return inner_.name(); }
  DType compute_dtype() const override { return inner_.compute_dtype(); }
  Tensor upload(std::span<const double> values, const Shape& shape) override {
    return inner_.upload(values, shape);
  }
  Tensor upload_tokens(std::span<const std::int32_t> tokens, const Shape& shape) override {
    return inner_.upload_tokens(tokens, shape);
  }
  Tensor upload_loss_gradient(double value) override { return inner_.upload_loss_gradient(value); }
  std::vector<double> download(const Tensor& tensor) override { return inner_.download(tensor); }
  std::vector<std::int32_t> download_tokens(const Tensor& tensor) override {
    return inner_.download_tokens(tensor);
  }
  LayerParams init_layer(const ModelConfig& model, LayerKind kind, int layer_index,
                         std::uint64_t seed) override {
    return inner_.init_layer(model, kind, layer_index, seed);
  }
  TokenBatch synthetic_batch(int batch, int seq, int vocab, std::uint64_t seed) override {
    return inner_.synthetic_batch(batch, seq, vocab, seed);
  }
  ForwardResult forward(const LayerParams& layer, const Tensor& input,
                        const Tensor& targets) override {
    return inner_.forward(layer, input, targets);
  }
  BackwardP1Result backward_p1(const LayerParams& layer, Stash stash, const Tensor& dy) override {
    return inner_.backward_p1(layer, std::move(stash), dy);
  }
  void backward_p2(LayerParams& layer, std::span<const Retained* const> retained) override {
    inner_.backward_p2(layer, retained);
  }
  void zero_grads(LayerParams& layer) override { inner_.zero_grads(layer); }
  void add_grads(LayerParams& layer, std::span<const Tensor> grads) override {
    inner_.add_grads(layer, grads);
  }
  void adamw_step(LayerParams& layer, const AdamWConfig& config, int step) override {
    inner_.adamw_step(layer, config, step);
  }

 private:
  cpu::CpuBackend inner_;
};

}  // namespace pipeplan::testing
