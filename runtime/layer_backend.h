// The device-independent half of a Backend, shared by the CPU reference and the CUDA backend:
// layers initialised from the layer spec (runtime/layer_spec.h), synthetic batches, the host
// conversions behind upload and download, and the layer-index checks and per-kind dispatch
// around the three passes. A backend adds its memory (from_host, to_host, make_parameter), one
// LayerPasses per layer kind, zero_grads and AdamW. Both draw weights and tokens here, on the
// host, which is why the same seed gives the same values on every backend.
#pragma once

#include <array>
#include <functional>
#include <span>

#include "runtime/backend.h"
#include "runtime/layer_spec.h"

namespace pipeplan {

// One layer kind's passes on a backend's tensors: Backend::forward, backward_p1 and backward_p2
// with the stash or retained set (already tagged with the layer index) handed in.
struct LayerPasses {
  std::function<Tensor(const LayerParams&, const Tensor& input, const Tensor& targets, Stash&)>
      forward;
  std::function<Tensor(const LayerParams&, Stash&, const Tensor& dy, Retained&)> backward_p1;
  std::function<void(LayerParams&, std::span<const Retained* const>)> backward_p2;
};

class LayerBackend : public Backend {
 public:
  // The passes may hold `this` (a backend's context): a backend stays where it was made.
  LayerBackend() = default;
  LayerBackend(const LayerBackend&) = delete;
  LayerBackend& operator=(const LayerBackend&) = delete;

  Tensor upload(std::span<const double> values, const Shape& shape) final;
  Tensor upload_tokens(std::span<const std::int32_t> tokens, const Shape& shape) final;
  Tensor upload_loss_gradient(double value) final;
  std::vector<double> download(const Tensor& tensor) final;
  std::vector<std::int32_t> download_tokens(const Tensor& tensor) final;

  LayerParams init_layer(const ModelConfig& model, LayerKind kind, int layer_index,
                         std::uint64_t seed) final;
  TokenBatch synthetic_batch(int batch, int seq, int vocab, std::uint64_t seed) final;

  ForwardResult forward(const LayerParams& layer, const Tensor& input, const Tensor& targets) final;
  BackwardP1Result backward_p1(const LayerParams& layer, Stash stash, const Tensor& dy) final;
  void backward_p2(LayerParams& layer, std::span<const Retained* const> retained) final;

 protected:
  // `values` rounded on the host to `dtype` (f32, f64 or bf16, round to nearest even) and copied
  // into a new tensor of this backend.
  Tensor upload_as(std::span<const double> values, const Shape& shape, DType dtype);
  void set_passes(LayerPasses embedding, LayerPasses block, LayerPasses head);

  // A new tensor holding `bytes` (numel × dtype bytes); returns once `bytes` may be freed.
  virtual Tensor from_host(const void* bytes, const Shape& shape, DType dtype) = 0;
  // Copies a defined tensor's bytes into `out` and waits for the copy; throws Error when the
  // tensor lives on another device.
  virtual void to_host(const Tensor& tensor, void* out) = 0;
  // A parameter holding the spec's initial `values`, with zeroed gradient and moments.
  virtual Parameter make_parameter(const ParamSpec& spec, std::span<const double> values) = 0;

 private:
  const LayerPasses& passes(LayerKind kind) const;

  std::array<LayerPasses, 3> passes_;  // by LayerKind
};

}  // namespace pipeplan
