// RMSNorm (Zhang & Sennrich 2019): forward, p1 (input gradient) and p2 (gain gradient).
// One block per row for forward and p1; fp32 arithmetic on bf16 storage.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace pipeplan::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void rmsnorm_forward_kernel(bf16* y, bf16* xhat, float* rstd, const bf16* x,
                                       const bf16* g, int c, float eps) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const bf16* x_row = x + row * c;
  float sum_squares = 0.0f;
  for (int i = threadIdx.x; i < c; i += blockDim.x) {
    const float value = __bfloat162float(x_row[i]);
    sum_squares += value * value;
  }
  const float s = rsqrtf(block_sum(sum_squares, scratch) / float(c) + eps);
  if (threadIdx.x == 0) rstd[row] = s;
  for (int i = threadIdx.x; i < c; i += blockDim.x) {
    const float normalised = __bfloat162float(x_row[i]) * s;
    xhat[row * c + i] = __float2bfloat16(normalised);
    y[row * c + i] = __float2bfloat16(normalised * __bfloat162float(g[i]));
  }
}

__global__ void rmsnorm_backward_p1_kernel(bf16* dx, const bf16* residual, const bf16* dy,
                                           const bf16* xhat, const float* rstd, const bf16* g,
                                           int c) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const std::int64_t base = row * c;
  float dot = 0.0f;  // Σ (dy ⊙ g) ⊙ x̂
  for (int i = threadIdx.x; i < c; i += blockDim.x) {
    dot +=
        __bfloat162float(dy[base + i]) * __bfloat162float(g[i]) * __bfloat162float(xhat[base + i]);
  }
  const float mean = block_sum(dot, scratch) / float(c);
  const float s = rstd[row];
  for (int i = threadIdx.x; i < c; i += blockDim.x) {
    const float dnorm = __bfloat162float(dy[base + i]) * __bfloat162float(g[i]);
    float value = s * (dnorm - __bfloat162float(xhat[base + i]) * mean);
    if (residual != nullptr) value += __bfloat162float(residual[base + i]);
    dx[base + i] = __float2bfloat16(value);
  }
}

// Grid (column tiles, row chunks): each thread sums one column over a chunk of rows (coalesced
// across the warp), then one atomicAdd per column and chunk.
constexpr int kRowsPerChunk = 128;
__global__ void rmsnorm_backward_p2_kernel(float* dg, const bf16* xhat, const bf16* dy,
                                           std::int64_t rows, int c) {
  const int column = blockIdx.x * blockDim.x + threadIdx.x;
  if (column >= c) return;
  const std::int64_t begin = std::int64_t{blockIdx.y} * kRowsPerChunk;
  const std::int64_t end = begin + kRowsPerChunk < rows ? begin + kRowsPerChunk : rows;
  float sum = 0.0f;
  for (std::int64_t r = begin; r < end; ++r) {
    sum += __bfloat162float(dy[r * c + column]) * __bfloat162float(xhat[r * c + column]);
  }
  atomicAdd(dg + column, sum);
}

}  // namespace

void rmsnorm_forward(bf16* y, bf16* xhat, float* rstd, const bf16* x, const bf16* g, std::int64_t n,
                     std::int64_t c, double eps, cudaStream_t stream) {
  if (n == 0) return;
  launch(rmsnorm_forward_kernel, static_cast<unsigned>(n), kThreads, stream, y, xhat, rstd, x, g,
         static_cast<int>(c), static_cast<float>(eps));
}

void rmsnorm_backward_p1(bf16* dx, const bf16* residual, const bf16* dy, const bf16* xhat,
                         const float* rstd, const bf16* g, std::int64_t n, std::int64_t c,
                         cudaStream_t stream) {
  if (n == 0) return;
  launch(rmsnorm_backward_p1_kernel, static_cast<unsigned>(n), kThreads, stream, dx, residual, dy,
         xhat, rstd, g, static_cast<int>(c));
}

void rmsnorm_backward_p2(float* dg, const bf16* xhat, const bf16* dy, std::int64_t rows,
                         std::int64_t c, cudaStream_t stream) {
  if (rows == 0) return;
  const dim3 grid(grid_for(c, kThreads), grid_for(rows, kRowsPerChunk));
  launch(rmsnorm_backward_p2_kernel, grid, kThreads, stream, dg, xhat, dy, rows,
         static_cast<int>(c));
}

}  // namespace pipeplan::cuda
