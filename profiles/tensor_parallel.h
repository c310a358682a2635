// Megatron-style tensor parallelism applied analytically to a profile: each pipeline "device"
// becomes a group of T GPUs that split every layer's GEMMs, attention heads and vocabulary
// (Shoeybi et al. 2019) with sequence parallelism for the rest (Korthikanti et al. 2022), so
// time (the optimizer step's too: each GPU updates its 1/T of the parameters), stash, retained
// X/dY, working memory, parameters, gradients, optimizer state and the activation sent to the
// next stage all divide by T. A mixture of experts' T GPUs split its experts rather than each
// expert (Megatron-Core's expert parallelism over the same GPUs; T must divide the experts):
// each holds 1/T of them and of the dispatched rows, each expert's GEMM keeps its rows. GEMM
// efficiency is kept at its value for the same token count (TP shrinks the N/K dimensions, not
// M). TP's own all-gather/reduce-scatter traffic, and the experts' all-to-all, are NOT modelled
// (assumed overlapped on NVLink inside one node): absolute MFU is optimistic by that amount, the
// same fraction for every micro-batch size, so BPipe comparisons are unaffected.
#pragma once

#include "profiles/profile.h"

namespace pipeplan {

// Throws FieldError naming tensor_parallel when t < 1, above its limit, or not a divisor of the
// model's attention heads and key/value heads (Megatron splits heads across the T GPUs).
Profile tensor_parallel_profile(Profile profile, int t);

}  // namespace pipeplan
