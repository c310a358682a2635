#include "runtime/layer_backend.h"

#include <array>
#include <cmath>
#include <cstring>
#include <string>

#include "runtime/random.h"

namespace pipeplan {

namespace {

// Round to nearest even, as CUDA's __float2bfloat16 does.
std::uint16_t bf16_bits(float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  if (std::isnan(value)) return 0x7fc0;
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

double bf16_value(std::uint16_t bits16) {
  const std::uint32_t bits = std::uint32_t{bits16} << 16;
  float value = 0;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

void check_count(std::size_t count, const Shape& shape, const char* what) {
  if (shape_numel(shape) != static_cast<std::int64_t>(count)) {
    throw Error(std::string("upload of ") + std::to_string(count) + " " + what + " into shape " +
                shape_string(shape));
  }
}

void check_layer_index(const LayerParams& layer, const TensorSet& set, const char* what) {
  if (set.layer_index != layer.layer_index) {
    throw Error(std::string(what) + " of layer " + std::to_string(set.layer_index) +
                " passed to layer " + std::to_string(layer.layer_index));
  }
}

// Host copy of `values` in `dtype`.
template <typename T, typename Convert>
std::vector<T> converted(std::span<const double> values, Convert convert) {
  std::vector<T> host(values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    host[i] = convert(values[i]);
  return host;
}

}  // namespace

Tensor LayerBackend::upload_as(std::span<const double> values, const Shape& shape, DType dtype) {
  check_count(values.size(), shape, "values");
  switch (dtype) {
    case DType::f64:
      return from_host(values.data(), shape, dtype);
    case DType::f32: {
      const auto host = converted<float>(values, [](double v) { return static_cast<float>(v); });
      return from_host(host.data(), shape, dtype);
    }
    case DType::bf16: {
      const auto host = converted<std::uint16_t>(
          values, [](double v) { return bf16_bits(static_cast<float>(v)); });
      return from_host(host.data(), shape, dtype);
    }
    case DType::i32:
      break;
  }
  throw Error("upload of values as " + std::string(to_string(dtype)) + " (use upload_tokens)");
}

Tensor LayerBackend::upload(std::span<const double> values, const Shape& shape) {
  return upload_as(values, shape, compute_dtype());
}

Tensor LayerBackend::upload_loss_gradient(double value) {
  const std::array<double, 1> values = {value};
  return upload_as(values, {1}, compute_dtype() == DType::f64 ? DType::f64 : DType::f32);
}

Tensor LayerBackend::upload_tokens(std::span<const std::int32_t> tokens, const Shape& shape) {
  check_count(tokens.size(), shape, "tokens");
  return from_host(tokens.data(), shape, DType::i32);
}

std::vector<double> LayerBackend::download(const Tensor& tensor) {
  if (!tensor.defined()) throw Error("downloaded tensor is undefined");
  const auto count = static_cast<std::size_t>(tensor.numel());
  std::vector<double> values(count);
  switch (tensor.dtype()) {
    case DType::f64:
      to_host(tensor, values.data());
      return values;
    case DType::f32: {
      std::vector<float> host(count);
      to_host(tensor, host.data());
      values.assign(host.begin(), host.end());
      return values;
    }
    case DType::bf16: {
      std::vector<std::uint16_t> host(count);
      to_host(tensor, host.data());
      for (std::size_t i = 0; i < count; ++i)
        values[i] = bf16_value(host[i]);
      return values;
    }
    case DType::i32:
      break;
  }
  throw Error("download of a " + std::string(to_string(tensor.dtype())) +
              " tensor (use download_tokens)");
}

std::vector<std::int32_t> LayerBackend::download_tokens(const Tensor& tensor) {
  if (!tensor.defined() || tensor.dtype() != DType::i32) {
    throw Error("download_tokens needs a defined i32 tensor");
  }
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(tensor.numel()));
  to_host(tensor, tokens.data());
  return tokens;
}

LayerParams LayerBackend::init_layer(const ModelConfig& model, LayerKind kind, int layer_index,
                                     std::uint64_t seed) {
  check_model_supported(model, "backend " + name());
  LayerParams layer{kind, layer_index, model, {}};
  std::uint64_t position = 0;
  for (const ParamSpec& spec : param_specs(model, kind)) {
    const std::vector<double> values = initial_values(spec, seed, layer_index, position++);
    layer.params.push_back(make_parameter(spec, values));
  }
  synchronize();
  return layer;
}

TokenBatch LayerBackend::synthetic_batch(int batch, int seq, int vocab, std::uint64_t seed) {
  if (batch <= 0 || seq <= 0 || vocab <= 0) {
    throw Error("synthetic batch needs positive batch, seq and vocab");
  }
  // One stream of batch rows of seq + 1 tokens: a row's targets are its inputs shifted by one.
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

void LayerBackend::set_passes(LayerPasses embedding, LayerPasses block, LayerPasses head) {
  passes_ = {std::move(embedding), std::move(block), std::move(head)};
}

const LayerPasses& LayerBackend::passes(LayerKind kind) const {
  const auto index = static_cast<std::size_t>(kind);
  if (index >= passes_.size() || !passes_[index].forward) {
    throw Error("backend " + name() + " has no passes for layer kind " +
                std::string(to_string(kind)));
  }
  return passes_[index];
}

ForwardResult LayerBackend::forward(const LayerParams& layer, const Tensor& input,
                                    const Tensor& targets) {
  ForwardResult result;
  result.stash.layer_index = layer.layer_index;
  result.output = passes(layer.kind).forward(layer, input, targets, result.stash);
  return result;
}

BackwardP1Result LayerBackend::backward_p1(const LayerParams& layer, Stash stash,
                                           const Tensor& dy) {
  check_layer_index(layer, stash, "stash");
  BackwardP1Result result;
  result.retained.layer_index = layer.layer_index;
  result.input_grad = passes(layer.kind).backward_p1(layer, stash, dy, result.retained);
  return result;
}

void LayerBackend::backward_p2(LayerParams& layer, std::span<const Retained* const> retained) {
  for (const Retained* set : retained)
    check_layer_index(layer, *set, "retained set");
  passes(layer.kind).backward_p2(layer, retained);
}

}  // namespace pipeplan
