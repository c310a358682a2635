// Data parallelism applied analytically to a profile: the pipeline is replicated D times, each
// replica runs its own micro-batches (the global batch is D times one replica's), and before the
// optimizer step every stage's D copies combine their weight gradients over the data-parallel
// link. Two optimizer layouts, as Megatron-LM runs them:
//   sharded (--use-distributed-optimizer, ZeRO stage 1): the fp32 gradients are reduce-scattered,
//     each GPU updates its 1/D of the parameters with its 1/D of the fp32 master weights and
//     AdamW moments, and the updated bf16 parameters are all-gathered. Per layer the optimizer
//     step becomes optimizer / D + RS(grad bytes) + AG(param bytes), and the optimizer state
//     divides by D (rounded up); the gradient buffer stays whole (Megatron reduce-scatters it in
//     place).
//   replicated (plain DDP): the gradients are all-reduced (RS + AG of the grad bytes) and every
//     GPU runs the whole optimizer step on its whole state.
// Each collective is latency + (D - 1)/D · bytes / bandwidth over a ring (ring_collective_us:
// one latency, as NCCL pipelines the ring's D - 1 steps; with small buckets at large D each step
// would pay one), per layer (Megatron buckets about a block's gradients at a time), and none is
// overlapped with the backward pass (Megatron-LM's --overlap-grad-reduce and
// --overlap-param-gather hide part of it): the added time is an upper bound on the bandwidth
// part. A layer without an optimizer step (a profile that does not time it: its plans have no
// optimizer node) gets no reduction either, and layers without bytes (--uniform costs) add no
// traffic. Nothing else changes: a replica's forward and backward passes are the same.
#pragma once

#include <string>
#include <string_view>

#include "profiles/link.h"
#include "profiles/profile.h"

namespace pipeplan {

enum class DataParallelOptimizer { sharded, replicated };

std::string_view to_string(DataParallelOptimizer optimizer);
// Throws FieldError naming data_parallel_optimizer for anything but "sharded" or "replicated".
DataParallelOptimizer data_parallel_optimizer_from_string(std::string_view text);

struct DataParallel {
  int replicas = 1;  // D: copies of the whole pipeline
  DataParallelOptimizer optimizer = DataParallelOptimizer::sharded;
  P2pLink link;  // between a stage's D copies (per GPU, per direction)
};

// Throws FieldError naming data_parallel when replicas < 1 or above its limit, or naming
// data_parallel_link when the link's bandwidth or latency is unusable. replicas = 1 returns the
// profile unchanged.
Profile data_parallel_profile(Profile profile, const DataParallel& dp);

// "4 replicas, sharded optimizer, 50 GB/s per direction, 10 us latency" ("no bandwidth limit"
// for a bandwidth of 0).
std::string data_parallel_text(const DataParallel& dp);

}  // namespace pipeplan
