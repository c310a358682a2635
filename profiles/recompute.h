// Full activation recomputation of transformer blocks, as Megatron-LM runs it with
// --recompute-granularity full: a recomputed block keeps only its input (the checkpoint) from its
// forward pass to its backward, and re-runs its forward just before its p1 to recreate the rest.
// Which blocks: every one (--recompute-method uniform --recompute-num-layers 1), or the first N of
// each virtual pipeline stage (--recompute-method block --recompute-num-layers N), or, planning,
// the smallest such N that makes the plan fit its memory limit (planner/plan/make_plan.h).
//
// A recomputed block's costs (recomputed_block), per micro-batch size:
//   stash     -> the checkpoint: the block's input, the activation it receives (send_bytes, the
//                same shape as its output; already 1/T under tensor parallelism, whose sequence
//                parallelism shards it), never more than the stash it replaces;
//   p1 time   -> p1 + forward (the recomputation runs on the same stream, right before it);
//   p1 working memory -> the recomputation rebuilds the whole stash from the checkpoint, which
//                it frees once the stash is made (a block's stash holds the normalised input,
//                not the input), and p1 then runs as before: its peak is max(checkpoint +
//                stash + forward work, max(stash, retained) + p1 work), less the larger of the
//                levels before (checkpoint) and after (retained) p1;
//   forward working memory -> stash + forward work less the checkpoint: the forward runs as
//                before and frees what it does not keep (an upper bound: PyTorch's no-grad
//                forward frees each tensor once consumed).
// p2, its retained X and dY, the weights and the optimizer step are unchanged: p1 recreates
// what p2 needs. The embedding and the head keep their activations (Megatron recomputes
// transformer layers only). Model FLOPs, and so MFU, do not count the recomputed forward (that
// is hardware FLOPs utilisation): the longer step lowers MFU.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "profiles/profile.h"

namespace pipeplan {

struct Recompute {
  // automatic is a request only (make_plan resolves it to none, block or full).
  enum class Method { none, full, block, automatic };
  Method method = Method::none;
  int blocks = 0;  // block: the first `blocks` (1 or more) of each virtual stage

  bool any() const { return method != Method::none; }
  // How many of a virtual stage's `stage_blocks` blocks recompute (its first ones). Throws
  // InternalError for automatic, which has no count until it is resolved.
  int recomputed_of(int stage_blocks) const;
  bool operator==(const Recompute&) const = default;
};

// Which layers of a virtual stage recompute, given the kinds of its layers in model order: its
// first recomputed_of(blocks) transformer blocks (the embedding and the head never do). The one
// rule the planner's costs and the runtime's passes both follow.
std::vector<bool> recomputed_layers(const Recompute& recompute,
                                    std::span<const LayerKind> stage_kinds);

// The --recompute value: "none", "full", "auto" or the block count ("3").
std::string to_string(const Recompute& recompute);
// Throws FieldError naming recompute for anything but none, full, auto or a count from 1 to
// limits::kMaxLayers.
Recompute recompute_from_string(std::string_view text);
// In words: "none", "full (every block)", "the first block of each stage", "the first 3
// blocks of each stage", "auto".
std::string recompute_text(const Recompute& recompute);
// Megatron-LM's arguments that run it ("--recompute-granularity full --recompute-method block
// --recompute-num-layers 3"); empty for none and automatic.
std::string megatron_recompute_args(const Recompute& recompute);

// {"method": "full"}, {"method": "block", "blocks": 3}, {"method": "none"}.
nlohmann::json recompute_to_json(const Recompute& recompute);
// Throws Error naming `context` and the field on anything recompute_to_json does not write
// (automatic included: a plan holds a resolved choice).
Recompute recompute_from_json(const nlohmann::json& json, const std::string& context);

// A block's costs when it recomputes (above).
LayerCost recomputed_block(LayerCost block);

}  // namespace pipeplan
