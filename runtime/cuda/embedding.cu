// Token embedding: forward gathers rows of wte; p2 scatter-adds dy rows into the fp32 gradient
// (atomicAdd: repeated tokens in the k micro-batches land on the same row).
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace pipeplan::cuda {

namespace {

__global__ void embedding_forward_kernel(bf16* y, const std::int32_t* tokens, const bf16* wte,
                                         std::int64_t n, int c, std::int64_t v) {
  const std::int64_t index = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (index >= n * c) return;
  const std::int64_t row = index / c;
  const std::int64_t token = tokens[row];
  const bool valid = token >= 0 && token < v;
  y[index] = valid ? wte[token * c + index % c] : __float2bfloat16(0.0f);
}

__global__ void embedding_backward_p2_kernel(float* dwte, const std::int32_t* tokens,
                                             const bf16* dy, std::int64_t rows, int c,
                                             std::int64_t v) {
  const std::int64_t index = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (index >= rows * c) return;
  const std::int64_t token = tokens[index / c];
  if (token < 0 || token >= v) return;
  atomicAdd(dwte + token * c + index % c, __bfloat162float(dy[index]));
}

}  // namespace

void embedding_forward(bf16* y, const std::int32_t* tokens, const bf16* wte, std::int64_t n,
                       std::int64_t c, std::int64_t v, cudaStream_t stream) {
  if (n == 0) return;
  launch(embedding_forward_kernel, grid_for(n * c, 256), 256, stream, y, tokens, wte, n,
         static_cast<int>(c), v);
}

void embedding_backward_p2(float* dwte, const std::int32_t* tokens, const bf16* dy,
                           std::int64_t rows, std::int64_t c, std::int64_t v, cudaStream_t stream) {
  if (rows == 0) return;
  launch(embedding_backward_p2_kernel, grid_for(rows * c, 256), 256, stream, dwte, tokens, dy, rows,
         static_cast<int>(c), v);
}

}  // namespace pipeplan::cuda
