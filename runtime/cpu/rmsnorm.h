// RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x²) + eps) ⊙ g. The input gradient is p1;
// the gain gradient needs the normalised input x̂ and dY, so it is p2 (both are retained).
#pragma once

#include <cstdint>
#include <span>

#include "runtime/layer_spec.h"  // kRmsNormEps

namespace pipeplan::cpu {

// One micro-batch's rows, as retained from p1 for p2.
template <typename T>
struct RmsnormRows {
  const T* xhat;  // (rows, C) normalised input, before the gain
  const T* dy;    // (rows, C) gradient of the output
  std::int64_t rows;
};

template <typename T>
void rmsnorm_forward(T* y,        // (N, C) overwritten
                     T* xhat,     // (N, C) overwritten; stashed for p1, retained for p2
                     T* rstd,     // (N) overwritten; stashed for p1
                     const T* x,  // (N, C)
                     const T* g,  // (C)
                     std::int64_t n, std::int64_t c);

// p1: dx += rstd · (dx̂ − x̂ · mean(dx̂ ⊙ x̂)), dx̂ = dy ⊙ g.
template <typename T>
void rmsnorm_backward_p1(T* dx,          // (N, C) accumulated
                         const T* dy,    // (N, C)
                         const T* xhat,  // (N, C)
                         const T* rstd,  // (N)
                         const T* g,     // (C)
                         std::int64_t n, std::int64_t c);

// p2: dg += Σ over the rows of all blocks of dy ⊙ x̂.
template <typename T>
void rmsnorm_backward_p2(T* dg,  // (C) accumulated
                         std::span<const RmsnormRows<T>> blocks, std::int64_t c);

}  // namespace pipeplan::cpu
