// Profile producers that need no GPU: the analytic model (FLOP and memory formulas of
// Zero Bubble / Korthikanti et al. with documented efficiency factors) and the uniform profile
// (identical stages with paper-style T_F, T_B, T_W, T_comm).
#pragma once

#include <vector>

#include "profiles/gpu.h"
#include "profiles/model.h"
#include "profiles/profile.h"

namespace pipeplan {

struct AnalyticOptions {
  int seq = 0;  // 0: the model's default
  std::vector<int> micro_batch_sizes{1};
  Attention attention = Attention::flash;
  int max_p2_concat = 8;  // p2_concat_us entries k = 1..max_p2_concat
};

Profile analytic_profile(const ModelConfig& model, const GpuSpec& gpu,
                         const AnalyticOptions& options);

// FLOPs of one layer's passes at micro-batch size `mbs` and sequence length `seq` (the numbers the
// analytic profile's times are built from). For a GPT block with materialized attention these are
// Zero Bubble's sbh(24h + 4s), sbh(24h + 8s) and 24sbh^2.
struct PassFlops {
  double forward = 0, p1 = 0, p2 = 0;
};
PassFlops analytic_flops(const ModelConfig& model, LayerKind kind, int mbs, int seq,
                         Attention attention);

struct UniformCosts {
  double forward_ms = 0, p1_ms = 0, p2_ms = 0, comm_ms = 0;
  // GiB allocated by F (> 0) and released by P1 and by P2 (<= 0); they sum to 0.
  double mem_f_gib = 0, mem_p1_gib = 0, mem_p2_gib = 0;
};
// Parses "F:B:W:COMM" (milliseconds) and "F:P1:P2" (GiB); throws Error naming the option.
UniformCosts parse_uniform(std::string_view times, std::string_view memory);
// A synthetic model of `layers` identical blocks, each costing 1/`layers_per_stage` of a stage.
Profile uniform_profile(const UniformCosts& costs, int layers, int layers_per_stage);

}  // namespace pipeplan
