#include "runtime/cpu/cpu_backend.h"

#include <cstring>
#include <string>

#include "runtime/cpu/adamw.h"
#include "runtime/cpu/block.h"
#include "runtime/cpu/edge_layers.h"
#include "runtime/host_tensor.h"

namespace pipeplan::cpu {

namespace {

// The kernels are templates on the element type; T is the compute dtype's.
template <typename T>
LayerPasses embedding_passes() {
  return {[](const LayerParams& layer, const Tensor& tokens, const Tensor&, Stash& stash) {
            return embedding_layer_forward<T>(layer, tokens, stash);
          },
          embedding_layer_backward_p1<T>, embedding_layer_backward_p2<T>};
}

template <typename T>
LayerPasses block_passes() {
  return {[](const LayerParams& layer, const Tensor& x, const Tensor&, Stash& stash) {
            return block_forward<T>(layer, x, stash);
          },
          block_backward_p1<T>, block_backward_p2<T>};
}

template <typename T>
LayerPasses head_passes() {
  return {head_layer_forward<T>, head_layer_backward_p1<T>, head_layer_backward_p2<T>};
}

}  // namespace

CpuBackend::CpuBackend(DType compute_dtype) : dtype_(compute_dtype) {
  if (dtype_ == DType::f32) {
    set_passes(embedding_passes<float>(), block_passes<float>(), head_passes<float>());
  } else if (dtype_ == DType::f64) {
    set_passes(embedding_passes<double>(), block_passes<double>(), head_passes<double>());
  } else {
    throw Error("the CPU backend computes in f32 or f64, not " + std::string(to_string(dtype_)));
  }
}

std::string CpuBackend::name() const {
  return "cpu-" + std::string(to_string(dtype_));
}

Tensor CpuBackend::from_host(const void* bytes, const Shape& shape, DType dtype) {
  Tensor tensor = host_zeros(shape, dtype);
  std::memcpy(tensor.data(), bytes, static_cast<std::size_t>(tensor.bytes()));
  return tensor;
}

void CpuBackend::to_host(const Tensor& tensor, void* out) {
  check_tensor(tensor, tensor.shape(), tensor.dtype(), "downloaded tensor");
  std::memcpy(out, tensor.data(), static_cast<std::size_t>(tensor.bytes()));
}

Parameter CpuBackend::make_parameter(const ParamSpec& spec, std::span<const double> values) {
  return {spec.name,
          upload(values, spec.shape),
          host_zeros(spec.shape, dtype_),
          host_zeros(spec.shape, dtype_),
          host_zeros(spec.shape, dtype_),
          !spec.is_gain};
}

void CpuBackend::zero_grads(LayerParams& layer) {
  for (Parameter& param : layer.params) {
    std::memset(param.grad.data(), 0, static_cast<std::size_t>(param.grad.bytes()));
  }
}

void CpuBackend::add_grads(LayerParams& layer, std::span<const Tensor> grads) {
  check_grads_match(layer, grads, Device::cpu);
  const auto add = [](auto* into, const auto* from, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i)
      into[i] += from[i];
  };
  for (std::size_t i = 0; i < grads.size(); ++i) {
    Tensor& mine = layer.params[i].grad;
    if (mine.dtype() == DType::f64) {
      add(mine.data_as<double>(), grads[i].data_as<double>(), mine.numel());
    } else {
      add(mine.data_as<float>(), grads[i].data_as<float>(), mine.numel());
    }
  }
}

void CpuBackend::adamw_step(LayerParams& layer, const AdamWConfig& config, int step) {
  const auto update = [&](auto zero) {
    using T = decltype(zero);
    for (Parameter& p : layer.params) {
      adamw_update(p.weight.data_as<T>(), p.adam_m.data_as<T>(), p.adam_v.data_as<T>(),
                   p.grad.data_as<T>(), p.weight.numel(), config, step, p.weight_decay);
    }
  };
  if (dtype_ == DType::f64) return update(double{});
  update(float{});
}

}  // namespace pipeplan::cpu
