// `pipeplan plan --search`: the best plan over micro-batch size (global batch fixed), schedule
// family (auto included), backward mode, chunks and partition (balanced, and one block moved at
// either end), with the Pareto front of step time against peak memory
// (docs/design/auto-schedule.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/plan/make_plan.h"
#include "profiles/recompute.h"

namespace pipeplan {

struct SearchRequest {
  PlanRequest base;      // devices, gpu, memory limit, p2_concat; schedule/backward/chunks ignored
  int global_batch = 0;  // samples per step; 0: keep base.mbs and base.microbatches
  std::vector<int> mbs_candidates;  // used with global_batch; each must divide it
  // The profile holding micro-batch size `mbs` (analytic or measured); unset: base.profile.
  std::function<Profile(int mbs)> profile_for;
  bool shift_partition = true;  // also try one block moved at the first and last boundary
  // Only this family (empty: every one) and this backward mode (unset: every one a family
  // takes); base.schedule and base.backward are not read.
  std::string only_schedule;
  std::optional<BackwardMode> only_backward;
};

struct SearchPoint {
  int mbs = 1, microbatches = 0, chunks = 1;
  std::string schedule;
  BackwardMode backward = BackwardMode::fused;
  std::vector<int> layers_per_stage;  // empty: balanced
  double step_time_us = 0, bound_us = 0;
  double span_us = 0;                  // largest stage span (first to last op of one device)
  std::int64_t peak_memory_bytes = 0;  // largest device
  Recompute recompute;                 // what the plan recomputes (auto: what it chose)
};

struct SearchResult {
  Plan best;
  SearchPoint best_point;
  // What the best minimises first (base.objective): the step time, or the largest stage span;
  // the lighter breaks ties, then the other time (pareto_order).
  Objective objective = Objective::step;
  // Non-dominated in (the objective's time, peak memory), by that time, best_point first. Where
  // the stages share one GPU (a profile with contention curves), a point's memory is the sum of
  // its stages' peaks, and a point whose sum is over the GPU's HBM is infeasible.
  bool shared_gpu = false;
  std::vector<SearchPoint> pareto;
  int evaluated = 0;   // candidates tried (a family whose stages cannot be cut counts one)
  int infeasible = 0;  // of them rejected (memory limit, divisibility, a stage split, ...)
};

// The (mbs, m = global batch / mbs) pairs to try: every candidate size that divides the global
// batch with m within limits::kMaxMicrobatches. Throws FieldError naming global_batch when it
// is not positive or above limits::kMaxGlobalBatch, or no candidate qualifies, and naming
// micro_batch_sizes when there are more than limits::kMaxSizeCandidates or one is not positive.
std::vector<std::pair<int, int>> global_batch_splits(int global_batch,
                                                     const std::vector<int>& mbs_candidates);

// Throws Error naming --global-batch when no candidate is feasible or the batch does not
// divide, and the first plan's error when every candidate fails.
SearchResult search_plans(const SearchRequest& request);

// The front of `points` as indices, best first: non-dominated in (the objective's time, peak
// memory), one point per (time, memory), by the time. Times within 1e-9 us of each other are one
// time (grouped from the fastest up, so that the order is a strict weak one); among points of one
// time the lighter comes first, then the one faster in the other time.
std::vector<std::size_t> pareto_order(const std::vector<SearchPoint>& points, Objective objective);

std::string format_pareto(const SearchResult& result);  // the table the CLI prints

}  // namespace pipeplan
