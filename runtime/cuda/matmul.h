// Linear ops Y = X·Wᵀ on cuBLASLt (bf16 operands, fp32 accumulation), with the two backward
// GEMMs as separate calls as 2BP needs them: p1 dX = dY·W, p2 dW += [dY_1;…;dY_k]ᵀ·[X_1;…;X_k]
// into an fp32 gradient, one GEMM whose reduction runs over the rows of all k micro-batches.
// Row-major tensors are handed to column-major cuBLAS as their transposes (no copies).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/cuda/context.h"
#include "runtime/cuda/kernels.h"

namespace pipeplan::cuda {

// y = x·wᵀ (+ residual when non-null: the residual add rides the GEMM's C operand).
void matmul_forward(DeviceContext& ctx,
                    bf16* y,               // (N, O)
                    const bf16* x,         // (N, I)
                    const bf16* w,         // (O, I)
                    const bf16* residual,  // (N, O) or null
                    std::int64_t n, std::int64_t in, std::int64_t out);

// p1: dx = dy·w, or dx += dy·w when `accumulate`.
void matmul_backward_p1(DeviceContext& ctx,
                        bf16* dx,        // (N, I)
                        const bf16* dy,  // (N, O)
                        const bf16* w,   // (O, I)
                        std::int64_t n, std::int64_t in, std::int64_t out, bool accumulate);

// One micro-batch's rows of a linear op, as retained from p1.
struct MatmulRows {
  const bf16* x;   // (rows, I)
  const bf16* dy;  // (rows, O)
  std::int64_t rows;
};

// p2: dw += dYᵀ·X over the concatenated rows. k > 1 micro-batches are first gathered into two
// contiguous scratch buffers so the reduction is one GEMM of depth Σ rows. Not free: the copies
// read and write 4·R·(I+O) bytes (R = Σ rows) against the GEMM's 2·R·I·O FLOPs, so at 3 TB/s
// and 700 TFLOP/s (estimates, not measured) they add about 16 % to a 4096 x 11008 GEMM and 23 %
// to a 4096 x 4096 one. k GEMMs with beta = 1 would instead read and write the fp32 dW k times
// (8·I·O bytes each): more than the copies below 2·I·O·(k−1)/(k·(I+O)) rows per micro-batch,
// 2,985 for 4096 x 11008 at k = 2 (seq 2048 at mbs 1 is 2,048). The profile's p2 times include
// the copies, so the planner sees their cost.
void matmul_backward_p2(DeviceContext& ctx,
                        float* dw,  // (O, I) fp32, accumulated
                        std::span<const MatmulRows> blocks, std::int64_t in, std::int64_t out);

// Which cuBLASLt algorithm a GEMM shape runs. By default cuBLASLt's first heuristic answer. With
// set_gemm_candidates(ctx, n), n > 1, the first call of each shape after it asks for n answers and
// times each on the call's operands (one untimed run, then the median of three, into a zeroed
// scratch output: the call's own output is not touched), keeping the fastest. For benchmarks
// (bench_block --gemm-candidates): the scratch, as large as the output, comes from the stage's
// allocator, so it shows in the allocator's peak, and the timing waits for the GPU once per shape.
void set_gemm_candidates(DeviceContext& ctx, int candidates);  // throws Error below 1
struct GemmChoice {
  std::string shape;              // "NT 4096x11008x2048": op(A), op(B), then m x n x k
  int candidates = 0;             // answers the heuristic gave
  int chosen = 0;                 // index of the fastest (0: the heuristic's first)
  std::vector<double> answer_us;  // each answer's median µs (infinity: it failed)
};
// The shapes whose answers were timed in this context, in the order they were first called.
std::vector<GemmChoice> gemm_choices(DeviceContext& ctx);

// Strided-batched GEMM on column-major operands (cuBLAS), bf16 in, fp32 compute, bf16 or fp32
// out: the attention core's per-head products (fp32 out where several are summed). Arguments
// follow cublasGemmStridedBatchedEx.
struct BatchedOperand {
  const bf16* data;
  std::int64_t ld;
  std::int64_t stride;
};
void batched_gemm(DeviceContext& ctx, bool transa, bool transb, std::int64_t m, std::int64_t n,
                  std::int64_t k, float alpha, BatchedOperand a, BatchedOperand b, float beta,
                  bf16* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t batch);
void batched_gemm(DeviceContext& ctx, bool transa, bool transb, std::int64_t m, std::int64_t n,
                  std::int64_t k, float alpha, BatchedOperand a, BatchedOperand b, float beta,
                  float* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t batch);

}  // namespace pipeplan::cuda
