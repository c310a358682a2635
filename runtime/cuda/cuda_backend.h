// The CUDA backend: bf16 activations and weights, fp32 gradients, fp32 master weights and fp32
// AdamW moments; cuBLASLt GEMMs and the kernels of this folder. One backend per pipeline stage:
// it owns the stage's stream, cuBLAS handles and caching allocator (exact byte accounting).
// Work is queued asynchronously on the stream; download() and synchronize() wait for it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <cuda_runtime.h>

#include "profiles/profile.h"
#include "runtime/cuda/context.h"
#include "runtime/layer_backend.h"

namespace pipeplan::cuda {

struct CudaBackendOptions {
  Attention attention = Attention::materialized;
  cudaStream_t stream = nullptr;  // null: the backend creates its own (e.g. in a green context)
  // cuBLASLt answers timed per GEMM shape, the fastest kept (matmul.h, set_gemm_candidates); 1:
  // the heuristic's first answer.
  int gemm_candidates = 1;
};

class CudaBackend final : public LayerBackend {
 public:
  // Throws "no CUDA device found" without a GPU, and FieldError("attention", …) for flash where
  // cuDNN's fused attention is unavailable (runtime/cuda/sdpa.h says why).
  explicit CudaBackend(CudaBackendOptions options = {});

  std::string name() const override { return "cuda-bf16"; }
  DType compute_dtype() const override { return DType::bf16; }
  void zero_grads(LayerParams& layer) override;
  void add_grads(LayerParams& layer, std::span<const Tensor> grads) override;
  void adamw_step(LayerParams& layer, const AdamWConfig& config, int step) override;
  void synchronize() override;

  // The fp32 master copy of a parameter's bf16 weights (what AdamW updates).
  Tensor master(const Parameter& param) const;
  // fp32 masters + both moments: the planner's optimizer_bytes.
  std::int64_t optimizer_bytes(const LayerParams& layer) const override;
  // The attention mode that runs: flash is cuDNN's fused SDPA (sdpa.h), the others the batched-GEMM
  // core (attention.h).
  Attention attention() const { return attention_; }
  // One line for reports and profile notes: "attention flash: cuDNN SDPA, cuDNN 9.19.0,
  // cudnn-frontend 1.32.0", or "attention recompute".
  const std::string& attention_note() const { return attention_note_; }
  // The attention note, then "; GEMMs: the fastest of N cuBLASLt answers per shape" where the
  // backend times them: for run reports and profile notes.
  std::string note() const;
  DeviceContext& context() { return *ctx_; }

 protected:
  Tensor from_host(const void* bytes, const Shape& shape, DType dtype) override;
  void to_host(const Tensor& tensor, void* out) override;
  // A bf16 weight with an fp32 master of the same values, fp32 gradient and moments.
  Parameter make_parameter(const ParamSpec& spec, std::span<const double> values) override;

 private:
  // Master weights keyed by the bf16 weight's address; an entry goes with its weight's storage.
  struct Masters {
    std::mutex mutex;
    std::map<const void*, Tensor> by_weight;
  };

  std::unique_ptr<DeviceContext> ctx_;
  Attention attention_;
  std::string attention_note_;
  int gemm_candidates_;
  std::shared_ptr<Masters> masters_ = std::make_shared<Masters>();
};

}  // namespace pipeplan::cuda
