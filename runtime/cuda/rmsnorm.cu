// RMSNorm (Zhang & Sennrich 2019): forward, p1 (input gradient) and p2 (gain gradient).
// One block per row for forward and p1 (whole warps, one per 32 packs of the row, at most 256
// threads); fp32 arithmetic on bf16 storage. Each kernel is a template
// on the pack width W (common.cuh): 8 values per access where the rows allow it, else 1.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace pipeplan::cuda {

namespace {

constexpr int kThreads = 256;

template <int W>
__global__ void rmsnorm_forward_kernel(bf16* y, bf16* xhat, float* rstd, const bf16* x,
                                       const bf16* g, int c, float eps) {
  __shared__ float scratch[32];
  const std::int64_t base = std::int64_t{blockIdx.x} * c;
  float sum_squares = 0.0f;
  for (int i = static_cast<int>(threadIdx.x) * W; i < c; i += static_cast<int>(blockDim.x) * W) {
    const Pack<W> in = load_pack<W>(x + base + i);
    for (int k = 0; k < W; ++k) {
      const float value = __bfloat162float(in.v[k]);
      sum_squares += value * value;
    }
  }
  const float s = rsqrtf(block_sum(sum_squares, scratch) / float(c) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = s;
  for (int i = static_cast<int>(threadIdx.x) * W; i < c; i += static_cast<int>(blockDim.x) * W) {
    const Pack<W> in = load_pack<W>(x + base + i);
    const Pack<W> gain = load_pack<W>(g + i);
    Pack<W> normalised_out, out;
    for (int k = 0; k < W; ++k) {
      const float normalised = __bfloat162float(in.v[k]) * s;
      normalised_out.v[k] = __float2bfloat16(normalised);
      out.v[k] = __float2bfloat16(normalised * __bfloat162float(gain.v[k]));
    }
    store_pack<W>(xhat + base + i, normalised_out);
    store_pack<W>(y + base + i, out);
  }
}

template <int W>
__global__ void rmsnorm_backward_p1_kernel(bf16* dx, const bf16* residual, const bf16* dy,
                                           const bf16* xhat, const float* rstd, const bf16* g,
                                           int c) {
  __shared__ float scratch[32];
  const std::int64_t base = std::int64_t{blockIdx.x} * c;
  float dot = 0.0f;  // Σ (dy ⊙ g) ⊙ x̂
  for (int i = static_cast<int>(threadIdx.x) * W; i < c; i += static_cast<int>(blockDim.x) * W) {
    const Pack<W> grad = load_pack<W>(dy + base + i);
    const Pack<W> gain = load_pack<W>(g + i);
    const Pack<W> normalised = load_pack<W>(xhat + base + i);
    for (int k = 0; k < W; ++k) {
      dot += __bfloat162float(grad.v[k]) * __bfloat162float(gain.v[k]) *
             __bfloat162float(normalised.v[k]);
    }
  }
  const float mean = block_sum(dot, scratch) / float(c);
  const float s = rstd[blockIdx.x];
  for (int i = static_cast<int>(threadIdx.x) * W; i < c; i += static_cast<int>(blockDim.x) * W) {
    const Pack<W> grad = load_pack<W>(dy + base + i);
    const Pack<W> gain = load_pack<W>(g + i);
    const Pack<W> normalised = load_pack<W>(xhat + base + i);
    Pack<W> skip{};
    if (residual != nullptr) skip = load_pack<W>(residual + base + i);
    Pack<W> out;
    for (int k = 0; k < W; ++k) {
      const float dnorm = __bfloat162float(grad.v[k]) * __bfloat162float(gain.v[k]);
      float value = s * (dnorm - __bfloat162float(normalised.v[k]) * mean);
      if (residual != nullptr) value += __bfloat162float(skip.v[k]);
      out.v[k] = __float2bfloat16(value);
    }
    store_pack<W>(dx + base + i, out);
  }
}

// Grid (column tiles, row chunks): each thread sums W adjacent columns over a chunk of rows (a
// warp reads 32·W contiguous values per row), then one atomicAdd per column and block. Short
// chunks, so that a 2048 x 4096 gradient still makes hundreds of blocks. A grid has at most
// 65,535 rows of blocks: beyond 65,535 chunks (a million rows, e.g. mbs 16 x seq 65,536) a block
// sums every gridDim.y-th chunk.
constexpr int kP2Threads = 128;
constexpr int kRowsPerChunk = 16;
constexpr unsigned kMaxGridY = 65535;
template <int W>
__global__ void rmsnorm_backward_p2_kernel(float* dg, const bf16* xhat, const bf16* dy,
                                           std::int64_t rows, int c) {
  const int column =
      (static_cast<int>(blockIdx.x * blockDim.x) + static_cast<int>(threadIdx.x)) * W;
  if (column >= c) return;
  float sum[W] = {};
  const std::int64_t stride = std::int64_t{gridDim.y} * kRowsPerChunk;
  for (std::int64_t begin = std::int64_t{blockIdx.y} * kRowsPerChunk; begin < rows;
       begin += stride) {
    const std::int64_t end = begin + kRowsPerChunk < rows ? begin + kRowsPerChunk : rows;
    for (std::int64_t r = begin; r < end; ++r) {
      const Pack<W> grad = load_pack<W>(dy + r * c + column);
      const Pack<W> normalised = load_pack<W>(xhat + r * c + column);
      for (int k = 0; k < W; ++k)
        sum[k] += __bfloat162float(grad.v[k]) * __bfloat162float(normalised.v[k]);
    }
  }
  for (int k = 0; k < W; ++k)
    atomicAdd(dg + column + k, sum[k]);
}

}  // namespace

void rmsnorm_forward(bf16* y, bf16* xhat, float* rstd, const bf16* x, const bf16* g, std::int64_t n,
                     std::int64_t c, double eps, cudaStream_t stream) {
  if (n == 0) return;
  const auto rows = static_cast<unsigned>(n);
  if (vectorizable(c, y, xhat, x, g)) {
    launch(rmsnorm_forward_kernel<kPack>, rows, threads_for(c / kPack, kThreads), stream, y, xhat,
           rstd, x, g, static_cast<int>(c), static_cast<float>(eps));
  } else {
    launch(rmsnorm_forward_kernel<1>, rows, threads_for(c, kThreads), stream, y, xhat, rstd, x, g,
           static_cast<int>(c), static_cast<float>(eps));
  }
}

void rmsnorm_backward_p1(bf16* dx, const bf16* residual, const bf16* dy, const bf16* xhat,
                         const float* rstd, const bf16* g, std::int64_t n, std::int64_t c,
                         cudaStream_t stream) {
  if (n == 0) return;
  const auto rows = static_cast<unsigned>(n);
  if (vectorizable(c, dx, residual, dy, xhat, g)) {
    launch(rmsnorm_backward_p1_kernel<kPack>, rows, threads_for(c / kPack, kThreads), stream, dx,
           residual, dy, xhat, rstd, g, static_cast<int>(c));
  } else {
    launch(rmsnorm_backward_p1_kernel<1>, rows, threads_for(c, kThreads), stream, dx, residual, dy,
           xhat, rstd, g, static_cast<int>(c));
  }
}

void rmsnorm_backward_p2(float* dg, const bf16* xhat, const bf16* dy, std::int64_t rows,
                         std::int64_t c, cudaStream_t stream) {
  if (rows == 0) return;
  const unsigned chunks = std::min(grid_for(rows, kRowsPerChunk), kMaxGridY);
  if (vectorizable(c, xhat, dy)) {
    const int threads = threads_for(c / kPack, kP2Threads);
    const dim3 grid(grid_for(c / kPack, threads), chunks);
    launch(rmsnorm_backward_p2_kernel<kPack>, grid, threads, stream, dg, xhat, dy, rows,
           static_cast<int>(c));
  } else {
    const int threads = threads_for(c, kP2Threads);
    const dim3 grid(grid_for(c, threads), chunks);
    launch(rmsnorm_backward_p2_kernel<1>, grid, threads, stream, dg, xhat, dy, rows,
           static_cast<int>(c));
  }
}

}  // namespace pipeplan::cuda
