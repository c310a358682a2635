// Megatron-style tensor parallelism applied analytically to a profile: each pipeline "device"
// becomes a group of T GPUs that split every layer's GEMMs, attention heads and vocabulary
// (Shoeybi et al. 2019) with sequence parallelism for the rest (Korthikanti et al. 2022), so
// time (the optimizer step's too: each GPU updates its 1/T of the parameters), stash, retained
// X/dY, working memory, parameters, gradients, optimizer state and the activation sent to the
// next stage all divide by T. A mixture of experts' T GPUs split its experts rather than each
// expert (Megatron-Core's expert parallelism over the same GPUs; T must divide the experts):
// each holds 1/T of them and of the dispatched rows, each expert's GEMM keeps its rows. GEMM
// efficiency is kept at its value for the same token count (TP shrinks the N/K dimensions, not
// M). TP's own traffic is added to each pass: Megatron-LM's sequence-parallel all-gathers and
// reduce-scatters of the layer's activation (4 in a block's forward, 4 in its p1, 2 in its p2;
// the embedding's and head's in tensor_parallel.cpp), each latency + (T - 1)/T · bytes /
// bandwidth over the GPUs' link, not overlapped with compute (Megatron-LM overlaps some of it with
// --tp-comm-overlap: the time is then an upper bound), at the link's nominal bandwidth (NCCL
// reaches about 80 % of it: a lower bound there). The experts' all-to-all is not modelled. A
// profile's time has no part of its own for kernel launches, so theirs divides by T too (each GPU
// launches every kernel: the analytic model's 4 us a kernel, about 2.4 % of a LLaMA-2-70B block
// pass at T = 8).
#pragma once

#include "profiles/link.h"
#include "profiles/profile.h"

namespace pipeplan {

// Throws FieldError naming tensor_parallel when t < 1, above its limit, or not a divisor of the
// model's attention heads and key/value heads (Megatron splits heads across the T GPUs), of its
// MLP width (a mixture of experts: its shared expert's) or of its experts.
void check_tensor_parallel(const ModelConfig& model, int t);
// check_tensor_parallel, then the profile's costs of one of the T GPUs.
// group_link is the link between a stage's T GPUs (NVLink inside a node: node_link, gpu.h);
// a default P2pLink adds no communication time.
Profile tensor_parallel_profile(Profile profile, int t, const P2pLink& group_link);

}  // namespace pipeplan
