// profile + model + request -> validated, simulated task graph.
#pragma once

#include <string>
#include <vector>

#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"
#include "planner/plan/bpipe.h"
#include "planner/plan/lower_bound.h"
#include "profiles/profile.h"
#include "schedules/family.h"

namespace pipeplan {

struct PlanRequest {
  Profile profile;                   // carries the model
  std::string gpu;                   // gpus.json key (for the peak FLOP/s)
  double peak_flops_per_device = 0;  // of all the device's GPUs
  int tensor_parallel = 1;           // GPUs per device (the profile already divided by them)
  DataParallel data_parallel;        // replicas of the pipeline (the profile already holds them)
  // Activation recomputation (profiles/recompute.h): the blocks that recompute take
  // recomputed_block's costs; automatic, the least that fits the memory limit (make_plan).
  Recompute recompute;
  int devices = 0;
  int chunks = 1;
  int microbatches = 0;
  int mbs = 1;
  std::string schedule = "1f1b";
  // Applied as given: a front end decides it with resolve_backward_mode (schedules/family.h).
  BackwardMode backward = BackwardMode::fused;
  int p2_concat = 1;                  // 0: all micro-batches of a stage in one call
  double memory_limit_bytes = 0;      // per device; 0 = unlimited
  std::vector<int> layers_per_stage;  // blocks per virtual stage; empty = balanced
  // BPipe activation transfers (planner/plan/bpipe.h): on adds them to a 1f1b plan; auto is a
  // search over micro-batch size and needs a global batch (planner/search/bpipe_estimate.h),
  // make_plan refuses.
  BpipeMode bpipe = BpipeMode::off;
  // What `auto` minimises first: the step time (a synchronising optimizer step) or the largest
  // stage span (overlapping iterations); the other breaks ties. Fixed families ignore it.
  Objective objective = Objective::step;
  // The copies of the model `auto` may hold: 2, DualPipe's two copies among its layouts; 1, one
  // copy only (a plan PyTorch's schedule CSV and Megatron-LM can take). Fixed families ignore it.
  int auto_copies = 2;
};

struct Plan {
  TaskGraph graph;
  SimResult sim;
  // On step time for these inputs (planner/plan/lower_bound.h); for a family that chooses the
  // layout (auto), the smallest over every layout it considered.
  LowerBound bound;
  // A family that chooses the layout and order (auto): what it chose, in words; else empty.
  std::string chosen;
};

// A family's generated order with the request's backward mode applied: as generated for a
// family that places p2 itself; split into p1/p2 by schedules/backward.h (fused, 2bp) or
// planner/plan/backward_fill.h (2bp-fill, which simulates `meta` to find the gaps) otherwise. The
// one place where the family × backward-mode rule turns into a schedule. `request.backward` is
// the mode already decided (resolve_backward_mode): nothing here chooses one, and an empty one is
// an InternalError.
Schedule with_backward_mode(const ScheduleFamily& family, Schedule generated,
                            const ScheduleRequest& request, const std::vector<StageCost>& costs,
                            const PlanMeta& meta);

// What each of `devices` devices holds for the whole step, stage s running on stage_device[s]
// with costs[s]: its stages' parameters, gradients and optimizer state, and, with two copies of
// the model (Schedule::replicas), the buffer that receives the other copy's weight gradients of
// each of its stages whose other copy lies on another device (a grads message).
std::vector<std::int64_t> static_bytes_per_device(int devices, const std::vector<int>& stage_device,
                                                  int replicas,
                                                  const std::vector<StageCost>& costs);

// Where a device holds several stages, make_plan plans two balanced cuts and keeps the faster:
// each device's sum balanced (the cut a request without --layers-per-stage gets), and this one,
// the virtual stages balanced alone (blocks per stage of the model's cut). Empty where the two
// are the same, where the request fixes the cut or recomputes automatically (each count's plan
// has its own), or where the family chooses it (auto); the search makes it a candidate of its own.
std::vector<int> stage_balanced_cut(const PlanRequest& request);

// The checks of every request field that need no profile: counts at least 1 and within
// planner/base/limits.h (devices, chunks, P·V stages, micro-batches, P·V·m, mbs, p2_concat,
// memory limit). Throws FieldError naming the field. plan_schedule runs it first; a front end runs
// it before building a profile for the request.
void check_plan_request(const PlanRequest& request);

// Everything make_plan does short of the task graph: the checked request, the family's order
// with the backward mode applied, the stage costs (of the cut the family used), the plan's
// metadata and its lower bound. The searches evaluate many of these on compact arrays
// (planner/graph/schedule_sim.h) and lower only the plan they keep. Throws as make_plan does,
// except on a memory limit (which only the simulation finds).
struct PlannedSchedule {
  Schedule schedule;
  std::vector<StageCost> costs;
  PlanMeta meta;
  LowerBound bound;
  std::string chosen;  // Plan::chosen
};
PlannedSchedule plan_schedule(const PlanRequest& request);

// plan_schedule, then lowering (BPipe transfers added when asked for), validation and
// simulation. Throws FieldError naming the field on bad requests, and on a memory limit the plan
// exceeds. Recompute::Method::automatic plans without recomputation if that fits, else with the
// fewest blocks per stage (the first N of each; every block at most) that fit; for a family that
// chooses its order from the costs (auto), the fastest of every N that fits. The plan's
// meta.recompute holds what it chose. (plan_schedule takes a resolved choice only.)
Plan make_plan(const PlanRequest& request);
// The same for a schedule given as data (e.g. imported from a PyTorch CSV): request.schedule and
// request.backward only label the plan; devices, chunks and micro-batches must match the schedule.
Plan make_plan_for_schedule(const PlanRequest& request, const Schedule& schedule);

}  // namespace pipeplan
