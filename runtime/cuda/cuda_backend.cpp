#include "runtime/cuda/cuda_backend.h"

#include <cmath>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/layers.h"
#include "runtime/cuda/matmul.h"
#include "runtime/cuda/sdpa.h"

namespace pipeplan::cuda {

namespace {
// The backend whose side lane this thread is queueing (begin_second .. end_pair), if any.
thread_local const CudaBackend* side_lane = nullptr;
}  // namespace

CudaBackend::CudaBackend(CudaBackendOptions options)
    : ctx_(std::make_unique<DeviceContext>(options.stream)),
      side_stream_(options.side_stream),
      attention_(options.attention),
      attention_note_("attention " + std::string(to_string(options.attention))),
      gemm_candidates_(options.gemm_candidates) {
  // flash is cuDNN's fused SDPA or nothing: never the recompute path under flash's name.
  check_attention_available(attention_);
  if (attention_ == Attention::flash) attention_note_ += ": " + fused_attention_description();
  set_gemm_candidates(*ctx_, gemm_candidates_);  // throws Error below 1
  LayerPasses embedding{
      [this](const LayerParams& layer, const Tensor& tokens, const Tensor&, Stash& stash) {
        return embedding_layer_forward(lane(), layer, tokens, stash);
      },
      embedding_layer_backward_p1,
      [this](LayerParams& layer, std::span<const Retained* const> retained) {
        embedding_layer_backward_p2(lane(), layer, retained);
      }};
  LayerPasses block{
      [this](const LayerParams& layer, const Tensor& x, const Tensor&, Stash& stash) {
        return block_forward(lane(), layer, x, attention_, stash);
      },
      [this](const LayerParams& layer, Stash& stash, const Tensor& dy, Retained& retained) {
        return block_backward_p1(lane(), layer, stash, dy, retained);
      },
      [this](LayerParams& layer, std::span<const Retained* const> retained) {
        block_backward_p2(lane(), layer, retained);
      }};
  LayerPasses head{
      [this](const LayerParams& layer, const Tensor& x, const Tensor& targets, Stash& stash) {
        return head_layer_forward(lane(), layer, x, targets, stash);
      },
      [this](const LayerParams& layer, Stash& stash, const Tensor& dloss, Retained& retained) {
        return head_layer_backward_p1(lane(), layer, stash, dloss, retained);
      },
      [this](LayerParams& layer, std::span<const Retained* const> retained) {
        head_layer_backward_p2(lane(), layer, retained);
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

CudaBackend::~CudaBackend() {
  // No throwing from a destructor: the side context drains its stream before the events go.
  side_.reset();
  if (fork_ != nullptr) cudaEventDestroy(fork_);
  if (join_ != nullptr) cudaEventDestroy(join_);
}

void CudaBackend::synchronize() {
  if (side_) CUDA_CHECK(cudaStreamSynchronize(side_->stream()));
  CUDA_CHECK(cudaStreamSynchronize(ctx_->stream()));
}

DeviceContext& CudaBackend::lane() {
  return side_lane == this ? *side_ : *ctx_;
}

void CudaBackend::begin_pair() {
  if (!side_) {
    side_ = std::make_unique<DeviceContext>(side_stream_, ctx_->shared_allocator());
    set_gemm_candidates(*side_, gemm_candidates_);
    CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  }
  side_->set_op_marks(ctx_->op_marks());
  CUDA_CHECK(cudaEventRecord(fork_, ctx_->stream()));
  ctx_->allocator().begin_pair();
  pair_open_ = true;
}

void CudaBackend::begin_second() {
  if (!pair_open_) throw Error("CUDA backend: begin_second outside an overlapped pair");
  CUDA_CHECK(cudaStreamWaitEvent(side_->stream(), fork_, 0));
  ctx_->allocator().set_side_lane(true);
  side_lane = this;
}

void CudaBackend::end_pair() {
  if (!pair_open_) return;
  side_lane = nullptr;
  ctx_->allocator().set_side_lane(false);
  pair_open_ = false;
  // The side lane's blocks are for the stage's stream again only once it waits for the side.
  CUDA_CHECK(cudaEventRecord(join_, side_->stream()));
  CUDA_CHECK(cudaStreamWaitEvent(ctx_->stream(), join_, 0));
  ctx_->allocator().end_pair();
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
