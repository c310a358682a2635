// Linear op without bias (LLaMA has none), Y = X·W^T, with the two backward GEMMs apart as 2BP
// needs them: p1 dX = dY·W (input gradient), p2 dW += dY^T·X (weight gradient) over the rows of
// k micro-batches at once. Cache-blocked fp32/fp64, no BLAS: a reference, not a fast path.
// T is float (the backend) or double (gradient checks).
#pragma once

#include <cstdint>
#include <span>

namespace pipeplan::cpu {

// One micro-batch's rows of a linear op, as retained from p1 for p2.
template <typename T>
struct MatmulRows {
  const T* x;   // (rows, I) input of the op
  const T* dy;  // (rows, O) gradient of its output
  std::int64_t rows;
};

template <typename T>
void matmul_forward(T* y,        // (N, O) overwritten
                    const T* x,  // (N, I)
                    const T* w,  // (O, I)
                    std::int64_t n, std::int64_t in, std::int64_t out);

// p1: dX += dY·W.
template <typename T>
void matmul_backward_p1(T* dx,        // (N, I) accumulated
                        const T* dy,  // (N, O)
                        const T* w,   // (O, I)
                        std::int64_t n, std::int64_t in, std::int64_t out);

// p2: dW += [dY_1; ...; dY_k]^T · [X_1; ...; X_k]: one GEMM whose reduction runs over the rows of
// all k blocks. Each dW element sums its rows in block order, so the result equals k separate
// calls in sequence.
template <typename T>
void matmul_backward_p2(T* dw,  // (O, I) accumulated
                        std::span<const MatmulRows<T>> blocks, std::int64_t in, std::int64_t out);

}  // namespace pipeplan::cpu
