// One transformer block as a pipeline layer, composed from the per-op kernels on host tensors:
//   x1 = x + attention(rmsnorm(x; g_attn));  y = x1 + swiglu_mlp(rmsnorm(x1; g_mlp)).
// The stash and retained sets hold named tensors (see docs/design/runtime-layers.md for the list).
// T is float (the backend) or double (gradient checks).
#pragma once

#include <span>

#include "runtime/backend.h"
#include "runtime/cpu/attention.h"

namespace pipeplan::cpu {

template <typename T>
Tensor block_forward(const LayerParams& layer,
                     const Tensor& x,  // (B, T, C)
                     Stash& stash);

// Returns dx (B, T, C); moves what p2 needs from the stash into `retained`.
template <typename T>
Tensor block_backward_p1(const LayerParams& layer, Stash& stash,
                         const Tensor& dy,  // (B, T, C)
                         Retained& retained);

template <typename T>
void block_backward_p2(LayerParams& layer, std::span<const Retained* const> retained);

}  // namespace pipeplan::cpu
