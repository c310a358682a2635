// SwiGLU gate (Shazeer 2020): h = silu(gate) ⊙ up and its p1; the three GEMMs are in block.cpp.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace pipeplan::cuda {

namespace {

constexpr int kThreads = 256;

// Each thread takes W adjacent elements (common.cuh's packs); n is a multiple of W.
template <int W>
__global__ void swiglu_forward_kernel(bf16* h, const bf16* gate, const bf16* up, std::int64_t n) {
  const std::int64_t i = (std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x) * W;
  if (i >= n) return;
  const Pack<W> z_in = load_pack<W>(gate + i);
  const Pack<W> u_in = load_pack<W>(up + i);
  Pack<W> out;
  for (int k = 0; k < W; ++k) {
    const float z = __bfloat162float(z_in.v[k]);
    const float silu = z / (1.0f + __expf(-z));
    out.v[k] = __float2bfloat16(silu * __bfloat162float(u_in.v[k]));
  }
  store_pack<W>(h + i, out);
}

template <int W>
__global__ void swiglu_backward_p1_kernel(bf16* dgate, bf16* dup, const bf16* dh, const bf16* gate,
                                          const bf16* up, std::int64_t n) {
  const std::int64_t i = (std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x) * W;
  if (i >= n) return;
  const Pack<W> z_in = load_pack<W>(gate + i);
  const Pack<W> u_in = load_pack<W>(up + i);
  const Pack<W> grad_in = load_pack<W>(dh + i);
  Pack<W> dgate_out, dup_out;
  for (int k = 0; k < W; ++k) {
    const float z = __bfloat162float(z_in.v[k]);
    const float s = 1.0f / (1.0f + __expf(-z));
    const float grad = __bfloat162float(grad_in.v[k]);
    // d silu(z)/dz = s · (1 + z · (1 − s))
    dgate_out.v[k] =
        __float2bfloat16(grad * __bfloat162float(u_in.v[k]) * s * (1.0f + z * (1.0f - s)));
    dup_out.v[k] = __float2bfloat16(grad * z * s);
  }
  store_pack<W>(dgate + i, dgate_out);
  store_pack<W>(dup + i, dup_out);
}

}  // namespace

void swiglu_forward(bf16* h, const bf16* gate, const bf16* up, std::int64_t n,
                    cudaStream_t stream) {
  if (n == 0) return;
  if (vectorizable(n, h, gate, up)) {
    launch(swiglu_forward_kernel<kPack>, grid_for(n / kPack, kThreads), kThreads, stream, h, gate,
           up, n);
  } else {
    launch(swiglu_forward_kernel<1>, grid_for(n, kThreads), kThreads, stream, h, gate, up, n);
  }
}

void swiglu_backward_p1(bf16* dgate, bf16* dup, const bf16* dh, const bf16* gate, const bf16* up,
                        std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (vectorizable(n, dgate, dup, dh, gate, up)) {
    launch(swiglu_backward_p1_kernel<kPack>, grid_for(n / kPack, kThreads), kThreads, stream, dgate,
           dup, dh, gate, up, n);
  } else {
    launch(swiglu_backward_p1_kernel<1>, grid_for(n, kThreads), kThreads, stream, dgate, dup, dh,
           gate, up, n);
  }
}

}  // namespace pipeplan::cuda
