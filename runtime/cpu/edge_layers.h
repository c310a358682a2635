// The first and last pipeline layers on host tensors: the embedding (tokens → x) and the head
// (final RMSNorm + LM head + cross-entropy loss), composed from embedding.h and head.h.
#pragma once

#include <span>

#include "runtime/backend.h"

namespace pipeplan::cpu {

template <typename T>
Tensor embedding_layer_forward(const LayerParams& layer,
                               const Tensor& tokens,  // (B, T) i32
                               Stash& stash);         // returns (B, T, C)
// Nothing to propagate (the input is tokens): retains tokens and dy; returns an undefined tensor.
template <typename T>
Tensor embedding_layer_backward_p1(const LayerParams& layer, Stash& stash,
                                   const Tensor& dy,  // (B, T, C)
                                   Retained& retained);
template <typename T>
void embedding_layer_backward_p2(LayerParams& layer, std::span<const Retained* const> retained);

template <typename T>
Tensor head_layer_forward(const LayerParams& layer,
                          const Tensor& x,        // (B, T, C)
                          const Tensor& targets,  // (B, T) i32
                          Stash& stash);          // returns the loss (1)
template <typename T>
Tensor head_layer_backward_p1(const LayerParams& layer, Stash& stash,
                              const Tensor& dloss,  // (1)
                              Retained& retained);  // returns dx (B, T, C)
template <typename T>
void head_layer_backward_p2(LayerParams& layer, std::span<const Retained* const> retained);

}  // namespace pipeplan::cpu
