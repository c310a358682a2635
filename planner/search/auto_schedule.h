// `--schedule auto`: the best per-device action order, and the layout of the model's stages on
// the devices, from the real per-stage costs and the per-device memory limits
// (docs/design/auto-schedule.md).
//
// Layouts: one chunk per device; with P even, DualPipe's two copies of the model cut into P
// stages (copy 1 from the last device back; only the dualpipe family's order runs on it); and,
// when the model can be cut into 2P stages, a V (stage v on device v, then 2P - 1 - v) and
// interleaved (v mod P), each on the cut that balances each device's stages as a whole and, where
// it differs, on the cut that balances each stage alone ("V stage-cut": the warm-up and
// cool-down wait on the largest stage). For each one-copy layout the candidates are
// the list scheduler's variants (planner/search/auto_list.h) and every fixed family of that
// layout in every backward mode it takes; all are evaluated on compact arrays
// (planner/graph/schedule_sim.h) under the memory limits. Unless the best one already meets the
// lower bounds of both objectives, a budgeted local search moves actions into the idle gaps of
// its timeline (planner/search/auto_moves.h). Candidates are ranked by the objective (step time
// or largest stage span), the other breaking ties. Deterministic: no randomness, no clock; ties
// resolve by candidate order.
//
// Unlike Zero Bubble's automatic scheduler no figure is collapsed to a median: each stage keeps its
// own F/P1/P2 times, p2 concatenation table, memory deltas and boundary transfer time, and each
// device its own memory limit.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "planner/graph/taskgraph.h"
#include "profiles/partition.h"
#include "schedules/family.h"
#include "schedules/schedule.h"

namespace pipeplan {

inline constexpr const char* kAutoScheduleName = "auto";

struct AutoRequest {
  int devices = 0;
  int microbatches = 0;
  // fused keeps B whole; 2bp and 2bp-fill split it (the scheduler places every P2).
  BackwardMode mode = BackwardMode::twobp;
  int p2_concat = 0;  // the largest P2 group (0 = any)
  Objective objective = Objective::step;
  int max_copies = 2;  // 2: DualPipe's two copies of the model among the layouts; 1: one copy
  std::vector<StageCost> costs;            // the request's cut: one stage per device
  std::vector<std::int64_t> static_bytes;  // per device, for `costs`
  std::vector<double> memory_limit_bytes;  // per device; 0 = unlimited
  P2pLink link;
  OverlapModel overlap;  // an overlapped pair's time: the dualpipe-v seed's
  // The profile's contention model. A sustained-load term on separate GPUs is part of every
  // compact evaluation; a shared GPU's curves are not, so with curves the finalists (every fixed
  // family's order and the search's best) are ranked by the simulator itself.
  Contention contention;
  // The HBM of the GPU the stages share under `contention`'s curves (0: unknown): a finalist
  // whose stages together take more is chosen only where every finalist does.
  double gpu_hbm_bytes = 0;
  // Other cuts of the model (StageCostContext::cut); unset: one chunk per device on `costs` only.
  std::function<StageCut(int stage_count, const std::vector<int>& blocks, CutBalance balance,
                         int replicas)>
      cut;
  // StageCostContext::evaluate_first: handed the first candidate and its evaluation.
  std::function<void(const Schedule&, const std::vector<StageCost>&, const std::function<void()>&)>
      evaluate_first;
};

struct AutoResult {
  Schedule schedule;
  std::string variant;  // the winner, e.g. "V seed=zb-v" or "one chunk depth=2.0x fill=fit"
  double makespan_us = 0;
  double max_stage_span_us = 0;
  int variants_tried = 0;
  int chunks = 1;
  std::vector<int> blocks;       // blocks per stage of the chosen cut (empty: the request's)
  std::vector<StageCost> costs;  // per stage of the chosen layout
  // The smallest lower bounds over the one-copy layouts considered (a two-copy order's own are
  // its plan's).
  double bound_step_us = 0;
  double bound_span_us = 0;
  bool first_candidate = false;  // `schedule` is the first candidate evaluated, unchanged
};

// Throws FieldError naming memory_limit_bytes when no order fits a device's limit, chunks when
// `costs` does not hold one stage per device.
AutoResult make_auto_schedule(const AutoRequest& request);

// One chunk per device on `costs`; `meta` supplies devices, micro-batches, the link, the
// per-device memory limits and static bytes.
AutoResult make_auto_schedule(const std::vector<StageCost>& costs, const PlanMeta& meta,
                              BackwardMode mode, int p2_concat,
                              Objective objective = Objective::step);

// Boundary transfer time of stage s -> s+1 (and of the gradient back): latency + bytes/bandwidth.
double boundary_transfer_us(const P2pLink& link, const StageCost& sender);

}  // namespace pipeplan
