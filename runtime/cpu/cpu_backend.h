// The CPU reference backend: single-threaded, host memory, every layer composed from the
// per-op kernels in this folder. Computes in f32 (as a GPU backend would accumulate) or, for
// gradient checks against finite differences, in f64.
#pragma once

#include "runtime/layer_backend.h"

namespace pipeplan::cpu {

class CpuBackend final : public LayerBackend {
 public:
  explicit CpuBackend(DType compute_dtype = DType::f32);  // f32 or f64

  std::string name() const override;
  DType compute_dtype() const override { return dtype_; }
  void zero_grads(LayerParams& layer) override;
  void add_grads(LayerParams& layer, std::span<const Tensor> grads) override;
  void adamw_step(LayerParams& layer, const AdamWConfig& config, int step) override;

 protected:
  Tensor from_host(const void* bytes, const Shape& shape, DType dtype) override;
  void to_host(const Tensor& tensor, void* out) override;
  Parameter make_parameter(const ParamSpec& spec, std::span<const double> values) override;

 private:
  DType dtype_;
};

}  // namespace pipeplan::cpu
