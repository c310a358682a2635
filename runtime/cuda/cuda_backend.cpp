#include "runtime/cuda/cuda_backend.h"

#include <cmath>
#include <cstring>
#include <string>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/random.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/layers.h"

namespace pipeplan::cuda {

namespace {

constexpr double kInitStddev = 0.02;  // as runtime/cpu/cpu_backend.cpp

struct ParamSpec {
  std::string name;
  Shape shape;
  bool is_gain;
};

// Must list the parameters in runtime/cpu/cpu_backend.cpp's order: the init streams are keyed
// by position, and tests/runtime/cuda compares the two backends weight by weight.
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

// Round to nearest even, as __float2bfloat16 does.
std::uint16_t bf16_bits(float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  if (std::isnan(value)) return 0x7fc0;
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

float bf16_value(std::uint16_t bits16) {
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

}  // namespace

CudaBackend::CudaBackend(CudaBackendOptions options)
    : ctx_(std::make_unique<DeviceContext>(options.stream)), attention_(options.attention) {}

Tensor CudaBackend::upload(std::span<const double> values, const Shape& shape) {
  check_count(values.size(), shape, "values");
  std::vector<std::uint16_t> host(values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    host[i] = bf16_bits(static_cast<float>(values[i]));
  Tensor tensor = ctx_->empty(shape, DType::bf16);
  CUDA_CHECK(cudaMemcpyAsync(tensor.data(), host.data(), host.size() * sizeof(std::uint16_t),
                             cudaMemcpyHostToDevice, ctx_->stream()));
  CUDA_CHECK(cudaStreamSynchronize(ctx_->stream()));  // `host` dies at return
  return tensor;
}

Tensor CudaBackend::upload_f32(std::span<const double> values, const Shape& shape) {
  check_count(values.size(), shape, "values");
  const std::vector<float> host(values.begin(), values.end());
  Tensor tensor = ctx_->empty(shape, DType::f32);
  CUDA_CHECK(cudaMemcpyAsync(tensor.data(), host.data(), host.size() * sizeof(float),
                             cudaMemcpyHostToDevice, ctx_->stream()));
  CUDA_CHECK(cudaStreamSynchronize(ctx_->stream()));
  return tensor;
}

Tensor CudaBackend::upload_tokens(std::span<const std::int32_t> tokens, const Shape& shape) {
  check_count(tokens.size(), shape, "tokens");
  Tensor tensor = ctx_->empty(shape, DType::i32);
  CUDA_CHECK(cudaMemcpyAsync(tensor.data(), tokens.data(), tokens.size_bytes(),
                             cudaMemcpyHostToDevice, ctx_->stream()));
  CUDA_CHECK(cudaStreamSynchronize(ctx_->stream()));
  return tensor;
}

std::vector<double> CudaBackend::download(const Tensor& tensor) {
  if (!tensor.defined() || tensor.device() != Device::cuda) {
    throw Error("download needs a defined CUDA tensor");
  }
  const auto count = static_cast<std::size_t>(tensor.numel());
  std::vector<double> values(count);
  if (tensor.dtype() == DType::bf16) {
    std::vector<std::uint16_t> host(count);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), tensor.data(), count * sizeof(std::uint16_t),
                               cudaMemcpyDeviceToHost, ctx_->stream()));
    CUDA_CHECK(cudaStreamSynchronize(ctx_->stream()));
    for (std::size_t i = 0; i < count; ++i)
      values[i] = bf16_value(host[i]);
  } else if (tensor.dtype() == DType::f32) {
    std::vector<float> host(count);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), tensor.data(), count * sizeof(float),
                               cudaMemcpyDeviceToHost, ctx_->stream()));
    CUDA_CHECK(cudaStreamSynchronize(ctx_->stream()));
    values.assign(host.begin(), host.end());
  } else {
    throw Error("download of a " + std::string(to_string(tensor.dtype())) + " tensor");
  }
  return values;
}

std::vector<std::int32_t> CudaBackend::download_tokens(const Tensor& tensor) {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(tensor.numel()));
  CUDA_CHECK(cudaMemcpyAsync(tokens.data(), i32_ptr(tensor), tokens.size() * sizeof(std::int32_t),
                             cudaMemcpyDeviceToHost, ctx_->stream()));
  CUDA_CHECK(cudaStreamSynchronize(ctx_->stream()));
  return tokens;
}

LayerParams CudaBackend::init_layer(const ModelConfig& model, LayerKind kind, int layer_index,
                                    std::uint64_t seed) {
  cpu::check_model_supported(model);  // the same family as the CPU reference
  LayerParams layer{kind, layer_index, model, {}};
  std::uint64_t position = 0;
  for (const ParamSpec& spec : param_specs(model, kind)) {
    std::vector<double> values(static_cast<std::size_t>(shape_numel(spec.shape)), 1.0);
    const std::uint64_t stream =
        cpu::mix_seed(seed, static_cast<std::uint64_t>(layer_index), position++);
    if (!spec.is_gain) cpu::fill_normal(values, kInitStddev, stream);
    const Tensor bf16_weight = upload(values, spec.shape);
    // The weight handle also drops the master entry when its storage goes.
    std::shared_ptr<Masters> masters = masters_;
    const void* address = bf16_weight.data();
    {
      const std::lock_guard lock(masters->mutex);
      masters->by_weight[address] = upload_f32(values, spec.shape);
    }
    std::shared_ptr<void> storage(bf16_weight.data(), [masters, address, bf16_weight](void*) {
      const std::lock_guard lock(masters->mutex);
      masters->by_weight.erase(address);
    });
    Tensor weight(storage, spec.shape, DType::bf16, Device::cuda);
    layer.params.push_back({spec.name, weight, ctx_->zeros(spec.shape, DType::f32),
                            ctx_->zeros(spec.shape, DType::f32),
                            ctx_->zeros(spec.shape, DType::f32), !spec.is_gain});
  }
  CUDA_CHECK(cudaStreamSynchronize(ctx_->stream()));
  return layer;
}

TokenBatch CudaBackend::synthetic_batch(int batch, int seq, int vocab, std::uint64_t seed) {
  // The CPU reference draws the tokens: same seed, same batch on both backends.
  cpu::CpuBackend host;
  const TokenBatch tokens = host.synthetic_batch(batch, seq, vocab, seed);
  return {upload_tokens(host.download_tokens(tokens.inputs), tokens.inputs.shape()),
          upload_tokens(host.download_tokens(tokens.targets), tokens.targets.shape())};
}

ForwardResult CudaBackend::forward(const LayerParams& layer, const Tensor& input,
                                   const Tensor& targets) {
  ForwardResult result;
  result.stash.layer_index = layer.layer_index;
  switch (layer.kind) {
    case LayerKind::embedding:
      result.output = embedding_layer_forward(*ctx_, layer, input, result.stash);
      break;
    case LayerKind::block:
      result.output = block_forward(*ctx_, layer, input, attention_, result.stash);
      break;
    case LayerKind::head:
      result.output = head_layer_forward(*ctx_, layer, input, targets, result.stash);
      break;
  }
  return result;
}

BackwardP1Result CudaBackend::backward_p1(const LayerParams& layer, Stash stash, const Tensor& dy) {
  check_layer_index(layer, stash, "stash");
  BackwardP1Result result;
  result.retained.layer_index = layer.layer_index;
  switch (layer.kind) {
    case LayerKind::embedding:
      result.input_grad = embedding_layer_backward_p1(layer, stash, dy, result.retained);
      break;
    case LayerKind::block:
      result.input_grad = block_backward_p1(*ctx_, layer, stash, dy, result.retained);
      break;
    case LayerKind::head:
      result.input_grad = head_layer_backward_p1(*ctx_, layer, stash, dy, result.retained);
      break;
  }
  return result;
}

void CudaBackend::backward_p2(LayerParams& layer, std::span<const Retained* const> retained) {
  for (const Retained* set : retained)
    check_layer_index(layer, *set, "retained set");
  switch (layer.kind) {
    case LayerKind::embedding:
      return embedding_layer_backward_p2(*ctx_, layer, retained);
    case LayerKind::block:
      return block_backward_p2(*ctx_, layer, retained);
    case LayerKind::head:
      return head_layer_backward_p2(*ctx_, layer, retained);
  }
}

void CudaBackend::zero_grads(LayerParams& layer) {
  for (Parameter& param : layer.params) {
    CUDA_CHECK(cudaMemsetAsync(param.grad.data(), 0, static_cast<std::size_t>(param.grad.bytes()),
                               ctx_->stream()));
  }
}

void CudaBackend::adamw_step(LayerParams& layer, const AdamWConfig& config, int step) {
  if (step < 1) throw Error("AdamW step must count from 1, got " + std::to_string(step));
  for (Parameter& p : layer.params) {
    AdamWStep args{};
    args.lr = static_cast<float>(config.lr);
    args.beta1 = static_cast<float>(config.beta1);
    args.beta2 = static_cast<float>(config.beta2);
    args.eps = static_cast<float>(config.eps);
    args.weight_decay = p.weight_decay ? static_cast<float>(config.weight_decay) : 0.0f;
    args.m_correction = static_cast<float>(1.0 - std::pow(config.beta1, step));
    args.v_correction = static_cast<float>(1.0 - std::pow(config.beta2, step));
    adamw_update(f32_ptr(master(p)), f32_ptr(p.adam_m), f32_ptr(p.adam_v), f32_ptr(p.grad),
                 bf16_ptr(p.weight), p.weight.numel(), args, ctx_->stream());
  }
}

void CudaBackend::synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(ctx_->stream()));
}

Tensor CudaBackend::master(const Parameter& param) const {
  const std::lock_guard lock(masters_->mutex);
  const auto it = masters_->by_weight.find(param.weight.data());
  if (it == masters_->by_weight.end()) {
    throw Error("parameter '" + param.name + "' was not made by this CUDA backend");
  }
  return it->second;
}

std::int64_t CudaBackend::optimizer_bytes(const LayerParams& layer) const {
  std::int64_t total = layer.optimizer_bytes();
  for (const Parameter& param : layer.params)
    total += master(param).bytes();
  return total;
}

}  // namespace pipeplan::cuda
