// What every CUDA layer call needs: the stream its work is queued on, the cuBLAS(Lt) handles
// bound to it, a GEMM workspace and the stage's allocator. One per backend (= per stage).
#pragma once

#include <cstdint>
#include <memory>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "runtime/backend.h"
#include "runtime/cuda/allocator.h"

namespace pipeplan::cuda {

class OpMarks;  // op_marks.h

class DeviceContext {
 public:
  // `stream` may be null: the context then creates (and owns) its own non-blocking stream.
  // `allocator`: another context's, to share (an overlapped pair's side stream allocates from its
  // stage's allocator, allocator.h); null: one of its own.
  explicit DeviceContext(cudaStream_t stream = nullptr,
                         std::shared_ptr<DeviceAllocator> allocator = nullptr);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t lt() const { return lt_; }
  cublasHandle_t blas() const { return blas_; }
  void* workspace() const { return workspace_; }
  std::size_t workspace_bytes() const { return kWorkspaceBytes; }
  DeviceAllocator& allocator() { return *allocator_; }
  const std::shared_ptr<DeviceAllocator>& shared_allocator() const { return allocator_; }

  // State one component keeps per context (= per stage), made on its first use and dropped
  // after the stream drains, before the stream goes: the fused attention's cuDNN handle and
  // built graphs (sdpa.cpp).
  class Extension {
   public:
    virtual ~Extension() = default;
  };
  std::unique_ptr<Extension>& attention_state() { return attention_state_; }
  // The cuBLASLt descriptors and chosen algorithm per GEMM shape (matmul.cpp).
  std::unique_ptr<Extension>& gemm_state() { return gemm_state_; }
  // Per-op timing (op_marks.h): null (the default) records nothing; the marks outlive their use.
  OpMarks* op_marks() const { return op_marks_; }
  void set_op_marks(OpMarks* marks) { op_marks_ = marks; }

  // A tensor in device memory from the stage's allocator (contents undefined).
  Tensor empty(const Shape& shape, DType dtype);
  Tensor zeros(const Shape& shape, DType dtype);  // cudaMemsetAsync 0

 private:
  static constexpr std::size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt: 32 MiB on Hopper
  std::shared_ptr<DeviceAllocator> allocator_;
  cudaStream_t stream_ = nullptr;
  bool owns_stream_ = false;
  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* workspace_ = nullptr;
  std::unique_ptr<Extension> attention_state_;
  std::unique_ptr<Extension> gemm_state_;
  OpMarks* op_marks_ = nullptr;
};

// Number of CUDA devices; 0 (not an error) when there is no driver or no GPU.
int cuda_device_count();

}  // namespace pipeplan::cuda
