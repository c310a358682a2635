// The pipeline layers on the GPU, composed from the GEMMs (matmul.h), the attention core
// (attention.h, or cuDNN's fused SDPA, sdpa.h) and the kernels (kernels.h). Stash and retained
// sets follow the layer spec (runtime/layer_spec.h) as the CPU reference does, with statistics
// (RMSNorm's rstd, flash attention's `attn.lse`) in fp32, `attn.probs` stashed only in
// materialized attention and `attn.lse` only in flash. Everything else is bf16; gradients fp32.
#pragma once

#include <span>

#include "profiles/profile.h"
#include "runtime/cuda/context.h"
#include "runtime/cuda/kernels.h"
#include "runtime/layer_spec.h"

namespace pipeplan::cuda {

// Typed device pointers of a tensor; throw Error on a dtype or device mismatch.
bf16* bf16_ptr(const Tensor& tensor);
float* f32_ptr(const Tensor& tensor);
std::int32_t* i32_ptr(const Tensor& tensor);
// The dtype of a stashed tensor of this role (runtime/layer_spec.h): bf16, rstd in fp32.
DType stash_dtype(TensorRole role);

Tensor block_forward(DeviceContext& ctx, const LayerParams& layer,
                     const Tensor& x,  // (B, T, C) bf16
                     Attention attention, Stash& stash);
Tensor block_backward_p1(DeviceContext& ctx, const LayerParams& layer, Stash& stash,
                         const Tensor& dy,  // (B, T, C) bf16
                         Retained& retained);
void block_backward_p2(DeviceContext& ctx, LayerParams& layer,
                       std::span<const Retained* const> retained);

Tensor embedding_layer_forward(DeviceContext& ctx, const LayerParams& layer,
                               const Tensor& tokens,  // (B, T) i32
                               Stash& stash);
Tensor embedding_layer_backward_p1(const LayerParams& layer, Stash& stash,
                                   const Tensor& dy,  // (B, T, C) bf16
                                   Retained& retained);
void embedding_layer_backward_p2(DeviceContext& ctx, LayerParams& layer,
                                 std::span<const Retained* const> retained);

// Returns the loss (1) f32, the mean over B·T tokens.
Tensor head_layer_forward(DeviceContext& ctx, const LayerParams& layer,
                          const Tensor& x,        // (B, T, C) bf16
                          const Tensor& targets,  // (B, T) i32
                          Stash& stash);
Tensor head_layer_backward_p1(DeviceContext& ctx, const LayerParams& layer, Stash& stash,
                              const Tensor& dloss,  // (1) bf16 or f32
                              Retained& retained);
void head_layer_backward_p2(DeviceContext& ctx, LayerParams& layer,
                            std::span<const Retained* const> retained);

}  // namespace pipeplan::cuda
