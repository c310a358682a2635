// The CPU reference backend: single-threaded, host memory, every layer composed from the
// per-op kernels in this folder. Computes in f32 (as a GPU backend would accumulate) or, for
// gradient checks against finite differences, in f64.
#pragma once

#include "runtime/backend.h"

namespace pipeplan::cpu {

// Throws Error naming the field when the CPU backend cannot run the model (it implements the
// LLaMA-like family: RMSNorm, SwiGLU, RoPE, untied embeddings).
void check_model_supported(const ModelConfig& model);

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(DType compute_dtype = DType::f32);  // f32 or f64

  std::string name() const override;
  DType compute_dtype() const override { return dtype_; }

  Tensor upload(std::span<const double> values, const Shape& shape) override;
  Tensor upload_tokens(std::span<const std::int32_t> tokens, const Shape& shape) override;
  std::vector<double> download(const Tensor& tensor) override;
  std::vector<std::int32_t> download_tokens(const Tensor& tensor) override;

  LayerParams init_layer(const ModelConfig& model, LayerKind kind, int layer_index,
                         std::uint64_t seed) override;
  TokenBatch synthetic_batch(int batch, int seq, int vocab, std::uint64_t seed) override;

  ForwardResult forward(const LayerParams& layer, const Tensor& input,
                        const Tensor& targets) override;
  BackwardP1Result backward_p1(const LayerParams& layer, Stash stash, const Tensor& dy) override;
  void backward_p2(LayerParams& layer, std::span<const Retained* const> retained) override;
  void zero_grads(LayerParams& layer) override;
  void adamw_step(LayerParams& layer, const AdamWConfig& config, int step) override;

 private:
  DType dtype_;
};

}  // namespace pipeplan::cpu
