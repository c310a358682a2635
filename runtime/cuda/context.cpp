#include "runtime/cuda/context.h"

#include <utility>

#include "runtime/cuda/cuda_check.h"

namespace pipeplan::cuda {

DeviceContext::DeviceContext(cudaStream_t stream, std::shared_ptr<DeviceAllocator> allocator)
    : allocator_(allocator ? std::move(allocator) : std::make_shared<DeviceAllocator>()),
      stream_(stream) {
  if (cuda_device_count() == 0) throw Error("no CUDA device found");
  if (stream_ == nullptr) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    owns_stream_ = true;
  }
  CUBLAS_CHECK(cublasLtCreate(&lt_));
  CUBLAS_CHECK(cublasCreate(&blas_));
  CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  // The batched GEMMs (unfused attention) share the cuBLASLt workspace: one stream orders them.
  CUBLAS_CHECK(cublasSetWorkspace(blas_, workspace_, kWorkspaceBytes));
}

DeviceContext::~DeviceContext() {
  // No throwing from a destructor: errors here are reported by the next checked call.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  attention_state_.reset();  // its handle is bound to the stream
  gemm_state_.reset();
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  if (owns_stream_) cudaStreamDestroy(stream_);
}

Tensor DeviceContext::empty(const Shape& shape, DType dtype) {
  const std::int64_t bytes = shape_numel(shape) * dtype_bytes(dtype);
  return Tensor(allocator_->allocate(bytes), shape, dtype, Device::cuda);
}

Tensor DeviceContext::zeros(const Shape& shape, DType dtype) {
  Tensor tensor = empty(shape, dtype);
  CUDA_CHECK(cudaMemsetAsync(tensor.data(), 0, static_cast<std::size_t>(tensor.bytes()), stream_));
  return tensor;
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver / no device: clear the sticky error
    return 0;
  }
  return count;
}

}  // namespace pipeplan::cuda
