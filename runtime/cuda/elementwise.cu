// Small elementwise helpers: fill, fp32 add (another copy's weight gradients) and fp32 → bf16
// casts (uploads, AdamW's bf16 weight copy; the attention core's grouped dK and dV, into rows of
// qkv's gradient).
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace pipeplan::cuda {

namespace {

__global__ void fill_f32_kernel(float* out, std::int64_t n, float value) {
  const std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

__global__ void add_f32_kernel(float* out, const float* in, std::int64_t n) {
  const std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) out[i] += in[i];
}

__global__ void cast_f32_to_bf16_kernel(bf16* out, const float* in, std::int64_t n) {
  const std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(in[i]);
}

__global__ void cast_f32_to_bf16_rows_kernel(bf16* out, std::int64_t out_ld, const float* in,
                                             std::int64_t rows, std::int64_t cols) {
  const std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < rows * cols) out[(i / cols) * out_ld + i % cols] = __float2bfloat16(in[i]);
}

}  // namespace

void fill_f32(float* out, std::int64_t n, float value, cudaStream_t stream) {
  if (n == 0) return;
  launch(fill_f32_kernel, grid_for(n, 256), 256, stream, out, n, value);
}

void add_f32(float* out, const float* in, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(add_f32_kernel, grid_for(n, 256), 256, stream, out, in, n);
}

void cast_f32_to_bf16(bf16* out, const float* in, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(cast_f32_to_bf16_kernel, grid_for(n, 256), 256, stream, out, in, n);
}

void cast_f32_to_bf16_rows(bf16* out, std::int64_t out_ld, const float* in, std::int64_t rows,
                           std::int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  launch(cast_f32_to_bf16_rows_kernel, grid_for(rows * cols, 256), 256, stream, out, out_ld, in,
         rows, cols);
}

}  // namespace pipeplan::cuda
