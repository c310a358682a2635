// Full activation recomputation applied to a profile, as Megatron-LM runs it with
// --recompute-granularity full --recompute-method uniform --recompute-num-layers 1: every
// transformer block keeps only its input (the checkpoint) from its forward pass to its backward,
// and re-runs its forward just before its p1 to recreate the rest. Per block and micro-batch size:
//   stash     -> the checkpoint: the block's input, the activation it receives (send_bytes, the
//                same shape as its output; already 1/T under tensor parallelism, whose sequence
//                parallelism shards it), never more than the stash it replaces;
//   p1 time   -> p1 + forward (the recomputation runs on the same stream, right before it);
//   p1 working memory -> the recomputation rebuilds the stash around the checkpoint (one of its
//                tensors) and p1 then runs as before: its peak is max(stash + forward work,
//                max(stash, retained) + p1 work), less the larger of the levels before
//                (checkpoint) and after (retained) p1;
//   forward working memory -> stash + forward work less the checkpoint: the forward runs as
//                before and frees what it does not keep (an upper bound: PyTorch's no-grad
//                forward frees each tensor once consumed).
// p2, its retained X and dY, the weights and the optimizer step are unchanged: p1 recreates
// what p2 needs. The embedding and the head keep their activations (Megatron recomputes
// transformer layers only). Model FLOPs, and so MFU, do not count the recomputed forward (that
// is hardware FLOPs utilisation): the longer step lowers MFU.
#pragma once

#include <string_view>

#include "profiles/profile.h"

namespace pipeplan {

enum class Recompute { none, full };

std::string_view to_string(Recompute recompute);
// Throws FieldError naming recompute for anything but "none" or "full".
Recompute recompute_from_string(std::string_view text);

// Recompute::none returns the profile unchanged.
Profile recompute_profile(Profile profile, Recompute recompute);

}  // namespace pipeplan
