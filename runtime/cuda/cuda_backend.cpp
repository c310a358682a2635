#include "runtime/cuda/cuda_backend.h"

#include <cmath>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/layers.h"
#include "runtime/cuda/matmul.h"
#include "runtime/cuda/sdpa.h"

namespace pipeplan::cuda {

CudaBackend::CudaBackend(CudaBackendOptions options)
    : ctx_(std::make_unique<DeviceContext>(options.stream)),
      attention_(options.attention),
      attention_note_("attention " + std::string(to_string(options.attention))),
      gemm_candidates_(options.gemm_candidates) {
  // flash is cuDNN's fused SDPA or nothing: never the recompute path under flash's name.
  check_attention_available(attention_);
  if (attention_ == Attention::flash) attention_note_ += ": " + fused_attention_description();
  set_gemm_candidates(*ctx_, gemm_candidates_);  // throws Error below 1
  LayerPasses embedding{
      [this](const LayerParams& layer, const Tensor& tokens, const Tensor&, Stash& stash) {
        return embedding_layer_forward(*ctx_, layer, tokens, stash);
      },
      embedding_layer_backward_p1,
      [this](LayerParams& layer, std::span<const Retained* const> retained) {
        embedding_layer_backward_p2(*ctx_, layer, retained);
      }};
  LayerPasses block{
      [this](const LayerParams& layer, const Tensor& x, const Tensor&, Stash& stash) {
        return block_forward(*ctx_, layer, x, attention_, stash);
      },
      [this](const LayerParams& layer, Stash& stash, const Tensor& dy, Retained& retained) {
        return block_backward_p1(*ctx_, layer, stash, dy, retained);
      },
      [this](LayerParams& layer, std::span<const Retained* const> retained) {
        block_backward_p2(*ctx_, layer, retained);
      }};
  LayerPasses head{
      [this](const LayerParams& layer, const Tensor& x, const Tensor& targets, Stash& stash) {
        return head_layer_forward(*ctx_, layer, x, targets, stash);
      },
      [this](const LayerParams& layer, Stash& stash, const Tensor& dloss, Retained& retained) {
        return head_layer_backward_p1(*ctx_, layer, stash, dloss, retained);
      },
      [this](LayerParams& layer, std::span<const Retained* const> retained) {
        head_layer_backward_p2(*ctx_, layer, retained);
      }};
  set_passes(std::move(embedding), std::move(block), std::move(head));
}

Tensor CudaBackend::from_host(const void* bytes, const Shape& shape, DType dtype) {
  Tensor tensor = ctx_->empty(shape, dtype);
  CUDA_CHECK(cudaMemcpyAsync(tensor.data(), bytes, static_cast<std::size_t>(tensor.bytes()),
                             cudaMemcpyHostToDevice, ctx_->stream()));
  CUDA_CHECK(cudaStreamSynchronize(ctx_->stream()));  // the caller frees `bytes` next
  return tensor;
}

void CudaBackend::to_host(const Tensor& tensor, void* out) {
  if (tensor.device() != Device::cuda) throw Error("download needs a defined CUDA tensor");
  CUDA_CHECK(cudaMemcpyAsync(out, tensor.data(), static_cast<std::size_t>(tensor.bytes()),
                             cudaMemcpyDeviceToHost, ctx_->stream()));
  CUDA_CHECK(cudaStreamSynchronize(ctx_->stream()));
}

Parameter CudaBackend::make_parameter(const ParamSpec& spec, std::span<const double> values) {
  const Tensor bf16_weight = upload(values, spec.shape);
  // The weight handle also drops the master entry when its storage goes.
  std::shared_ptr<Masters> masters = masters_;
  const void* address = bf16_weight.data();
  {
    const std::lock_guard lock(masters->mutex);
    masters->by_weight[address] = upload_as(values, spec.shape, DType::f32);
  }
  std::shared_ptr<void> storage(bf16_weight.data(), [masters, address, bf16_weight](void*) {
    const std::lock_guard lock(masters->mutex);
    masters->by_weight.erase(address);
  });
  Tensor weight(storage, spec.shape, DType::bf16, Device::cuda);
  return {spec.name,
          weight,
          ctx_->zeros(spec.shape, DType::f32),
          ctx_->zeros(spec.shape, DType::f32),
          ctx_->zeros(spec.shape, DType::f32),
          !spec.is_gain};
}

void CudaBackend::zero_grads(LayerParams& layer) {
  for (Parameter& param : layer.params) {
    CUDA_CHECK(cudaMemsetAsync(param.grad.data(), 0, static_cast<std::size_t>(param.grad.bytes()),
                               ctx_->stream()));
  }
}

void CudaBackend::add_grads(LayerParams& layer, std::span<const Tensor> grads) {
  check_grads_match(layer, grads, Device::cuda);
  for (std::size_t i = 0; i < grads.size(); ++i) {
    Tensor& mine = layer.params[i].grad;  // fp32, as zero_grads and AdamW take them
    add_f32(mine.data_as<float>(), grads[i].data_as<float>(), mine.numel(), ctx_->stream());
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

std::string CudaBackend::note() const {
  if (gemm_candidates_ <= 1) return attention_note_;
  return attention_note_ + "; GEMMs: the fastest of " + std::to_string(gemm_candidates_) +
         " cuBLASLt answers per shape";
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
