// Assignment of the model's layers to virtual stages (P devices × V chunks), and the per-stage
// costs that the schedules and the task graph use.
#pragma once

#include <cstdint>
#include <vector>

#include "profiles/model.h"
#include "profiles/profile.h"
#include "profiles/recompute.h"

namespace pipeplan {

struct StageLayers {
  int first_layer = 0;  // index into ModelConfig::layer_list()
  int layer_count = 0;
};

// Virtual stage v holds layers [first_layer, first_layer + layer_count). Virtual stages are in
// model order; which device runs each is the schedule family's choice.
struct Partition {
  std::vector<StageLayers> stages;
};

// Contiguous partition of the blocks into `stage_count` parts minimising the largest part's
// F + p1 + p2 time at micro-batch size `mbs`, its first blocks recomputing as `recompute` says
// (their p1 runs the forward again); the embedding joins the first part and the head the last.
// Where parts share a device (`device_stages`: each device's parts, every part in one list; empty
// or all single: one part per device), the largest device's sum is minimised first (a device
// runs all of its parts for every micro-batch), each device's blocks then spread over its parts
// so that its largest part is as small as it can be.
// Throws Error when there are more stages than blocks, InternalError for an automatic recompute
// (resolve it first) or `device_stages` that are not a grouping of the parts.
Partition partition_balanced(const ModelConfig& model, const Profile& profile, int mbs,
                             int stage_count, const Recompute& recompute = {},
                             const std::vector<std::vector<int>>& device_stages = {});
// `blocks_per_stage` counts transformer blocks (embedding and head ride along with the first and
// last stage). Throws Error naming --layers-per-stage on a bad count or sum.
Partition partition_fixed(const ModelConfig& model, const std::vector<int>& blocks_per_stage);

// Transformer blocks of each stage of `partition` (the form --layers-per-stage takes).
std::vector<int> blocks_per_stage(const ModelConfig& model, const Partition& partition);

struct StageCost {
  double forward_us = 0, p1_us = 0, p2_us = 0;
  std::vector<double> p2_concat_us;  // index k-1: one p2 call over k micro-batches
  std::int64_t stash_bytes = 0, retained_bytes = 0;
  std::int64_t static_bytes = 0;  // parameters + gradients + optimizer state
  std::int64_t grad_bytes = 0;    // the weight gradients alone (what two copies of it exchange)
  std::int64_t send_bytes = 0;    // activation crossing to the next virtual stage
  // Working memory held only while an op of the stage runs (LayerCost::forward_work_bytes), above
  // what the plan's alloc/free accounting holds then (a stage op charges its whole stash or
  // retained change at once; its layers run one after another): the largest excess over its
  // layers. 0 where the profile has none.
  std::int64_t forward_work_bytes = 0;
  std::int64_t p1_work_bytes = 0;
  std::int64_t fused_work_bytes = 0;        // a fused backward (B): p1 then p2, layer by layer
  std::vector<std::int64_t> p2_work_bytes;  // index k-1: one p2 call over k micro-batches
  double optimizer_us = 0;  // the optimizer step over the stage's layers (0: not profiled)
  double p2_time_us(int k) const;
  std::int64_t p2_work(int k) const;  // beyond the table, linear in k (as p2_time_us)
  // The most any op of the stage holds while it runs (P2 up to the table's k): a reserve for the
  // schedule searches, which check memory between ops.
  std::int64_t max_work_bytes() const;
  bool operator==(const StageCost&) const = default;
};

// `recompute`: the blocks of each stage that recompute their activations (the first ones of the
// stage; profiles/recompute.h) take recomputed_block's costs. Throws InternalError for
// Recompute::Method::automatic (make_plan resolves it first).
std::vector<StageCost> stage_costs(const ModelConfig& model, const Profile& profile, int mbs,
                                   const Partition& partition, int max_concat,
                                   const Recompute& recompute = {});

// Each device's optimizer step: the optimizer_us of the stages `stage_device` puts on it, summed
// (0: none). Lowering's optimizer node takes it, as do the simulations and the lower bound.
// Stages mapped outside 0..devices-1 are left out.
std::vector<double> device_optimizer_us(const std::vector<StageCost>& costs,
                                        const std::vector<int>& stage_device, int devices);

}  // namespace pipeplan
