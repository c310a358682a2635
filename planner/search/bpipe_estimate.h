// Whether BPipe pays before training (arXiv 2401.02088 §5): the best 1f1b configuration without
// BPipe and the best one that only BPipe makes fit, both simulated, with the transfer volume and
// how much of it the simulation hides behind compute; plus the paper's simpler per-stage-MFU
// estimate, iteration ≈ (m + P − 1)·t_stage(b) (+ the optimizer step, once a step), as a second
// opinion. docs/design/bpipe.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/base/error.h"
#include "planner/plan/make_plan.h"
#include "planner/search/search.h"
#include "profiles/data_parallel.h"

namespace pipeplan {

struct BpipeConfig {
  int mbs = 1, microbatches = 0;
  BackwardMode backward = BackwardMode::fused;
  bool bpipe = false;
  Recompute recompute;                 // activation recomputation (profiles/recompute.h)
  double step_time_us = 0;             // simulated makespan
  double mfu = 0;                      // PaLM model FLOPs
  double bubble_ratio = 0;             // simulated: idle share of the devices' step
  double stage_mfu = 0;                // model FLOPs of one stage's micro-batch / its busy time
  double stage_time_us = 0;            // busiest device's busy time per micro-batch, less its
                                       // optimizer step (once a step)
  double optimizer_us = 0;             // longest device optimizer step (0: none in the plan)
  std::int64_t peak_memory_bytes = 0;  // largest device
};

struct BpipeEstimate {
  int devices = 0;
  int global_batch = 0;           // samples per step of one replica of the pipeline
  DataParallel data_parallel;     // the request's replicas (global batch x replicas in all)
  double memory_limit_bytes = 0;  // per pipeline device, what plans must fit (0 = unlimited)
  // Set by the caller for the report: GPUs per pipeline device and why, and the memory budget.
  int tensor_parallel = 1;
  std::string tensor_parallel_note;    // e.g. "auto: smallest of 1, 2, 4, 8 that fits"
  std::string memory_note;             // e.g. "--memory 80.00 GiB - reserve 4.20 GiB = ..."
  std::optional<BpipeConfig> without;  // best with BPipe off; none: only BPipe makes a plan fit
  std::optional<BpipeConfig> with;     // best among configurations that only fit with BPipe
  bool bpipe_fits = false;             // some configuration fits with BPipe (needed or not)
  std::optional<Plan> with_plan;
  std::int64_t transfer_bytes = 0;  // per step, evict + load
  double transfer_us = 0;           // link time of all transfers, summed over the links
  double busiest_link_us = 0;       // link time of the directed link that carries the most
  double exposed_us = 0;            // step time they add (vs. the same plan with free transfers)
  // 1 - exposed / busiest link (the links run at once: what the step could at least have had to
  // wait for, were nothing hidden); 1 without transfers.
  double hidden_fraction = 1;
  double gain = 0;         // simulated: step time without / with − 1 (0 without both)
  double simple_gain = 0;  // ((m0 + P − 1)·t(b0) + o0) / ((m1 + P − 1)·t(b1) + o1) − 1
  std::string verdict;     // one line with its reason
  std::string second_opinion;
  std::vector<std::string> infeasible;  // "mbs 4 fused bpipe on: --memory: ..."
};

// No candidate fits, with BPipe or without. The message names --global-batch and the first
// rejection.
class NothingFitsError : public Error {
 public:
  using Error::Error;
};

// 1f1b over every micro-batch size of `request` (global batch fixed) and backward fused, 2bp,
// 2bp-fill, with BPipe off and on. With `recomputing` (the same request with full activation
// recomputation), the baseline may also recompute: its candidates without BPipe join the
// others', and a BPipe candidate (always from `request`) counts as needing BPipe when nothing at
// its micro-batch size and backward mode fits without BPipe and without recomputation. Where
// nothing fits without BPipe and something fits with it, `without` is empty and the verdict says
// BPipe is needed. Throws NothingFitsError when nothing fits either way.
BpipeEstimate estimate_bpipe(const SearchRequest& request,
                             const SearchRequest* recomputing = nullptr);
// The gain BPipe must bring to be worth its transfers: at most this (0.5 %) is within what the
// timing model can tell apart, and the verdict says "no benefit" (within it) and `plan --bpipe
// auto` keeps BPipe off.
inline constexpr double kBpipeBenefit = 0.005;
// Whether a step of `with_us` (BPipe on) pays against one of `without_us`: faster by more than
// kBpipeBenefit.
inline bool bpipe_pays(double without_us, double with_us) {
  return without_us / with_us - 1 > kBpipeBenefit;
}

// `plan --bpipe auto`: the fastest of the same candidates (BPipe off included, so never slower
// than the best plan without BPipe), with BPipe on only where it is faster than the fastest
// without by more than kBpipeBenefit.
Plan best_bpipe_plan(const SearchRequest& request, BpipeConfig* chosen = nullptr);

std::string format_estimate(const BpipeEstimate& estimate);
nlohmann::json estimate_to_json(const BpipeEstimate& estimate);

}  // namespace pipeplan
