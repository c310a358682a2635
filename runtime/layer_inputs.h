// The inputs a layer kind's passes take at one micro-batch size, for the profilers (CPU and
// CUDA): random tokens and activations, never zeros (they time faster than real data).
#pragma once

#include "runtime/backend.h"

namespace pipeplan {

struct LayerInputs {
  Tensor input, targets, dy;
};
LayerInputs make_layer_inputs(Backend& backend, LayerKind kind, const ModelConfig& model, int mbs,
                              int seq);

}  // namespace pipeplan
