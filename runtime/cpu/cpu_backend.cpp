#include "runtime/cpu/cpu_backend.h"

#include <cstring>
#include <string>

#include "runtime/cpu/adamw.h"
#include "runtime/cpu/block.h"
#include "runtime/cpu/edge_layers.h"
#include "runtime/cpu/host_tensor.h"
#include "runtime/cpu/random.h"

namespace pipeplan::cpu {

namespace {

constexpr double kInitStddev = 0.02;  // GPT-2 / LLaMA reference init for every matrix

struct ParamSpec {
  std::string name;
  Shape shape;
  bool is_gain;  // RMSNorm gain: initialised to 1, no weight decay
};

std::vector<ParamSpec> param_specs(const ModelConfig& model, LayerKind kind) {
  const std::int64_t c = model.hidden, v = model.vocab, f = model.ffn_hidden;
  const std::int64_t kv_heads = model.kv_heads > 0 ? model.kv_heads : model.heads;
  const std::int64_t qkv_width = (model.heads + 2 * kv_heads) * (c / model.heads);
  switch (kind) {
    case LayerKind::embedding:
      return {{"wte", {v, c}, false}};
    case LayerKind::block:
      return {{"attn_norm", {c}, true},      {"attn.wqkv", {qkv_width, c}, false},
              {"attn.wo", {c, c}, false},    {"mlp_norm", {c}, true},
              {"mlp.w_gate", {f, c}, false}, {"mlp.w_up", {f, c}, false},
              {"mlp.w_down", {c, f}, false}};
    case LayerKind::head:
      return {{"final_norm", {c}, true}, {"lm_head", {v, c}, false}};
  }
  throw Error("unknown layer kind");
}

// Calls fn(T{}) with T the C++ type of the compute dtype.
template <typename Fn>
decltype(auto) with_scalar(DType dtype, Fn&& fn) {
  if (dtype == DType::f64) return fn(double{});
  return fn(float{});
}

void check_layer_index(const LayerParams& layer, const TensorSet& set, const char* what) {
  if (set.layer_index != layer.layer_index) {
    throw Error(std::string(what) + " of layer " + std::to_string(set.layer_index) +
                " passed to layer " + std::to_string(layer.layer_index));
  }
}

}  // namespace

void check_model_supported(const ModelConfig& model) {
  const auto fail = [&](const std::string& why) {
    throw Error("model '" + model.name + "': the CPU backend needs " + why);
  };
  if (model.hidden <= 0 || model.heads <= 0 || model.ffn_hidden <= 0 || model.vocab <= 0) {
    fail("positive hidden, heads, ffn_hidden and vocab");
  }
  const int kv_heads = model.kv_heads > 0 ? model.kv_heads : model.heads;
  if (model.hidden % model.heads != 0) fail("hidden divisible by heads");
  if (model.heads % kv_heads != 0) fail("heads divisible by kv_heads");
  if (model.head_dim() % 2 != 0) fail("an even head dim (RoPE rotates pairs)");
  if (model.mlp != MlpKind::swiglu) fail("mlp = swiglu");
  if (model.norm != NormKind::rmsnorm) fail("norm = rmsnorm");
  if (model.tied_embeddings) fail("untied embeddings (embedding and head may sit on two stages)");
}

CpuBackend::CpuBackend(DType compute_dtype) : dtype_(compute_dtype) {
  if (dtype_ != DType::f32 && dtype_ != DType::f64) {
    throw Error("the CPU backend computes in f32 or f64, not " + std::string(to_string(dtype_)));
  }
}

std::string CpuBackend::name() const {
  return "cpu-" + std::string(to_string(dtype_));
}

Tensor CpuBackend::upload(std::span<const double> values, const Shape& shape) {
  if (shape_numel(shape) != static_cast<std::int64_t>(values.size())) {
    throw Error("upload of " + std::to_string(values.size()) + " values into shape " +
                shape_string(shape));
  }
  Tensor tensor = host_zeros(shape, dtype_);
  with_scalar(dtype_, [&](auto zero) {
    using T = decltype(zero);
    T* data = tensor.data_as<T>();
    for (std::size_t i = 0; i < values.size(); ++i)
      data[i] = static_cast<T>(values[i]);
  });
  return tensor;
}

Tensor CpuBackend::upload_tokens(std::span<const std::int32_t> tokens, const Shape& shape) {
  if (shape_numel(shape) != static_cast<std::int64_t>(tokens.size())) {
    throw Error("upload of " + std::to_string(tokens.size()) + " tokens into shape " +
                shape_string(shape));
  }
  Tensor tensor = host_zeros(shape, DType::i32);
  std::memcpy(tensor.data(), tokens.data(), tokens.size_bytes());
  return tensor;
}

std::vector<double> CpuBackend::download(const Tensor& tensor) {
  check_tensor(tensor, tensor.shape(), tensor.dtype(), "downloaded tensor");
  if (tensor.dtype() == DType::f32) {
    const float* data = tensor.data_as<float>();
    return std::vector<double>(data, data + tensor.numel());
  }
  const double* data = tensor.data_as<double>();
  return std::vector<double>(data, data + tensor.numel());
}

std::vector<std::int32_t> CpuBackend::download_tokens(const Tensor& tensor) {
  const std::int32_t* data = tensor.data_as<std::int32_t>();
  return std::vector<std::int32_t>(data, data + tensor.numel());
}

LayerParams CpuBackend::init_layer(const ModelConfig& model, LayerKind kind, int layer_index,
                                   std::uint64_t seed) {
  check_model_supported(model);
  LayerParams layer{kind, layer_index, model, {}};
  std::uint64_t position = 0;
  for (const ParamSpec& spec : param_specs(model, kind)) {
    std::vector<double> values(static_cast<std::size_t>(shape_numel(spec.shape)), 1.0);
    const std::uint64_t stream =
        mix_seed(seed, static_cast<std::uint64_t>(layer_index), position++);
    if (!spec.is_gain) fill_normal(values, kInitStddev, stream);
    layer.params.push_back({spec.name, upload(values, spec.shape), host_zeros(spec.shape, dtype_),
                            host_zeros(spec.shape, dtype_), host_zeros(spec.shape, dtype_),
                            !spec.is_gain});
  }
  return layer;
}

TokenBatch CpuBackend::synthetic_batch(int batch, int seq, int vocab, std::uint64_t seed) {
  if (batch <= 0 || seq <= 0 || vocab <= 0) {
    throw Error("synthetic batch needs positive batch, seq and vocab");
  }
  const std::int64_t row = std::int64_t{seq} + 1;
  const std::vector<std::int32_t> stream = random_tokens(batch * row, vocab, seed);
  std::vector<std::int32_t> inputs, targets;
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto begin = stream.begin() + b * row;
    inputs.insert(inputs.end(), begin, begin + seq);
    targets.insert(targets.end(), begin + 1, begin + row);
  }
  return {upload_tokens(inputs, {batch, seq}), upload_tokens(targets, {batch, seq})};
}

ForwardResult CpuBackend::forward(const LayerParams& layer, const Tensor& input,
                                  const Tensor& targets) {
  ForwardResult result;
  result.stash.layer_index = layer.layer_index;
  result.output = with_scalar(dtype_, [&](auto zero) -> Tensor {
    using T = decltype(zero);
    switch (layer.kind) {
      case LayerKind::embedding:
        return embedding_layer_forward<T>(layer, input, result.stash);
      case LayerKind::block:
        return block_forward<T>(layer, input, result.stash);
      case LayerKind::head:
        return head_layer_forward<T>(layer, input, targets, result.stash);
    }
    throw Error("unknown layer kind");
  });
  return result;
}

BackwardP1Result CpuBackend::backward_p1(const LayerParams& layer, Stash stash, const Tensor& dy) {
  check_layer_index(layer, stash, "stash");
  BackwardP1Result result;
  result.retained.layer_index = layer.layer_index;
  result.input_grad = with_scalar(dtype_, [&](auto zero) -> Tensor {
    using T = decltype(zero);
    switch (layer.kind) {
      case LayerKind::embedding:
        return embedding_layer_backward_p1<T>(layer, stash, dy, result.retained);
      case LayerKind::block:
        return block_backward_p1<T>(layer, stash, dy, result.retained);
      case LayerKind::head:
        return head_layer_backward_p1<T>(layer, stash, dy, result.retained);
    }
    throw Error("unknown layer kind");
  });
  return result;
}

void CpuBackend::backward_p2(LayerParams& layer, std::span<const Retained* const> retained) {
  for (const Retained* set : retained)
    check_layer_index(layer, *set, "retained set");
  with_scalar(dtype_, [&](auto zero) {
    using T = decltype(zero);
    switch (layer.kind) {
      case LayerKind::embedding:
        return embedding_layer_backward_p2<T>(layer, retained);
      case LayerKind::block:
        return block_backward_p2<T>(layer, retained);
      case LayerKind::head:
        return head_layer_backward_p2<T>(layer, retained);
    }
  });
}

void CpuBackend::zero_grads(LayerParams& layer) {
  for (Parameter& param : layer.params) {
    std::memset(param.grad.data(), 0, static_cast<std::size_t>(param.grad.bytes()));
  }
}

void CpuBackend::adamw_step(LayerParams& layer, const AdamWConfig& config, int step) {
  with_scalar(dtype_, [&](auto zero) {
    using T = decltype(zero);
    for (Parameter& p : layer.params) {
      adamw_update(p.weight.data_as<T>(), p.adam_m.data_as<T>(), p.adam_v.data_as<T>(),
                   p.grad.data_as<T>(), p.weight.numel(), config, step, p.weight_decay);
    }
  });
}

}  // namespace pipeplan::cpu
