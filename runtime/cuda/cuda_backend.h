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
  // The stream an overlapped pair's second op runs on (begin_second); null: the backend creates
  // its own at the first pair, in the context current then.
  cudaStream_t side_stream = nullptr;
};

class CudaBackend final : public LayerBackend {
 public:
  // Throws "no CUDA device found" without a GPU, and FieldError("attention", …) for flash where
  // cuDNN's fused attention is unavailable (runtime/cuda/sdpa.h says why).
  explicit CudaBackend(CudaBackendOptions options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda-bf16"; }
  DType compute_dtype() const override { return DType::bf16; }
  void zero_grads(LayerParams& layer) override;
  void add_grads(LayerParams& layer, std::span<const Tensor> grads) override;
  void adamw_step(LayerParams& layer, const AdamWConfig& config, int step) override;
  void synchronize() override;
  // An overlapped pair's second op runs on a side stream with a cuBLAS context and workspace of
  // its own and the stage's allocator (allocator.h, "Overlapped pairs"): begin_pair records a
  // fork on the stage's stream, begin_second makes the side stream wait for it and sends this
  // thread's layer calls there, end_pair makes the stage's stream wait for the side stream.
  // Other threads' calls stay on the stage's stream throughout.
  void begin_pair() override;
  void begin_second() override;
  void end_pair() override;

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
  // The stage's context (its stream, handles and allocator).
  DeviceContext& context() { return *ctx_; }
  // The context this thread's layer calls go to now: the side one between begin_second and
  // end_pair, the stage's otherwise.
  DeviceContext& lane();

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
  cudaStream_t side_stream_;             // CudaBackendOptions::side_stream
  std::unique_ptr<DeviceContext> side_;  // made at the first pair; goes before ctx_
  cudaEvent_t fork_ = nullptr;
  cudaEvent_t join_ = nullptr;
  bool pair_open_ = false;  // between begin_pair and end_pair (the pair's thread only)
  Attention attention_;
  std::string attention_note_;
  int gemm_candidates_;
  std::shared_ptr<Masters> masters_ = std::make_shared<Masters>();
};

}  // namespace pipeplan::cuda
