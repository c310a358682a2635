#include "planner/plan/make_plan.h"

#include <algorithm>
#include <utility>

#include "planner/base/error.h"
#include "planner/base/limits.h"
#include "planner/graph/evaluate.h"
#include "planner/plan/backward_fill.h"
#include "profiles/partition.h"
#include "schedules/backward.h"

namespace pipeplan {

namespace {

// Everything the plan could hold at once, summed without overflow: every stage's stash and
// retained bytes for every micro-batch, plus every stage's static bytes. Beyond
// limits::kMaxPlanBytes running memory totals could leave int64; no real profile comes near.
void check_plan_bytes(const std::vector<StageCost>& costs, int microbatches) {
  double total = 0;
  for (const StageCost& c : costs) {
    total += static_cast<double>(c.static_bytes) +
             static_cast<double>(c.stash_bytes + c.retained_bytes) * microbatches;
  }
  if (total > static_cast<double>(limits::kMaxPlanBytes)) {
    throw FieldError(
        "microbatches",
        limits::above_limit("the profile's memory for " + std::to_string(microbatches) +
                                " micro-batches (" + std::to_string(total) + " bytes)",
                            static_cast<double>(limits::kMaxPlanBytes)));
  }
}

PlanMeta make_meta(const PlanRequest& r, const Partition& partition,
                   const std::vector<StageCost>& costs, const Schedule& schedule) {
  PlanMeta m;
  m.model = r.profile.model;
  m.gpu = r.gpu.empty() ? r.profile.gpu : r.gpu;
  m.devices = r.devices;
  m.chunks = r.chunks;
  m.microbatches = r.microbatches;
  m.mbs = r.mbs;
  m.seq = r.profile.seq;
  m.schedule = r.schedule;
  m.backward = r.backward;
  m.p2_concat = r.p2_concat;
  m.attention = r.profile.attention;
  m.stage_layers = partition.stages;
  m.memory_limit_bytes.assign(static_cast<std::size_t>(r.devices), r.memory_limit_bytes);
  m.static_bytes.assign(static_cast<std::size_t>(r.devices), 0);
  for (int s = 0; s < schedule.stage_count(); ++s) {
    const auto d = static_cast<std::size_t>(schedule.stage_device[static_cast<std::size_t>(s)]);
    m.static_bytes[d] += costs[static_cast<std::size_t>(s)].static_bytes;
  }
  m.flops_per_token = r.profile.model.flops_per_token(r.profile.seq);
  m.peak_flops_per_device = r.peak_flops_per_device;
  m.link = r.profile.p2p;
  const Provenance& p = r.profile.provenance;
  m.profile_source =
      p.source + (p.gpu.empty() ? "" : " on " + p.gpu) + (p.date.empty() ? "" : " " + p.date);
  return m;
}

struct StageInputs {
  Partition partition;
  std::vector<StageCost> costs;
};

StageInputs stage_inputs(const PlanRequest& request) {
  const int stage_count = request.devices * request.chunks;
  const ModelConfig& model = request.profile.model;
  Partition partition;
  if (request.layers_per_stage.empty()) {
    partition = partition_balanced(model, request.profile, request.mbs, stage_count);
  } else {
    if (static_cast<int>(request.layers_per_stage.size()) != stage_count) {
      throw FieldError("layers_per_stage", std::to_string(request.layers_per_stage.size()) +
                                               " counts for " + std::to_string(stage_count) +
                                               " stages");
    }
    partition = partition_fixed(model, request.layers_per_stage);
  }
  const int max_concat = request.p2_concat == 0 ? request.microbatches : request.p2_concat;
  auto costs = stage_costs(model, request.profile, request.mbs, partition,
                           std::min(max_concat, request.microbatches));
  check_plan_bytes(costs, request.microbatches);
  return {std::move(partition), std::move(costs)};
}

Plan lower_and_simulate(const Schedule& schedule, const std::vector<StageCost>& costs,
                        PlanMeta meta, BpipeMode bpipe = BpipeMode::off, bool given = false) {
  Plan plan{lower(schedule, costs, std::move(meta)), {}, {}};
  if (bpipe == BpipeMode::on) add_bpipe_transfers(plan.graph, plan_bpipe(plan.graph, costs));
  plan.bound = step_time_lower_bound(costs, schedule.stage_device, plan.graph.meta.link,
                                     schedule.microbatches);
  CheckedSimulation checked = validate_and_simulate(plan.graph);
  if (const auto& v = checked.violation) {
    if (v->rule == "memory-limit") throw FieldError("memory_limit_bytes", v->message);
    // A schedule given as data (an imported CSV) is input: its faults are the input's.
    if (given) throw Error("schedule: the plan it lowers to is invalid: " + v->message);
    throw InternalError("generated plan is invalid: " + v->message);
  }
  plan.sim = std::move(checked.sim);
  return plan;
}

}  // namespace

void check_plan_request(const PlanRequest& r) {
  using limits::check_limit;
  if (r.devices < 1) throw FieldError("devices", "must be at least 1");
  check_limit("devices", r.devices, limits::kMaxDevices);
  if (r.chunks < 1) throw FieldError("chunks", "must be at least 1");
  check_limit("chunks", r.chunks, limits::kMaxChunks);
  const std::int64_t stages = std::int64_t{r.devices} * r.chunks;
  if (stages > limits::kMaxStages) {
    throw FieldError("chunks", limits::above_limit(std::to_string(r.devices) + " devices x " +
                                                       std::to_string(r.chunks) + " chunks = " +
                                                       std::to_string(stages) + " stages",
                                                   limits::kMaxStages));
  }
  if (r.microbatches < 1) throw FieldError("microbatches", "must be at least 1");
  check_limit("microbatches", r.microbatches, limits::kMaxMicrobatches);
  const std::int64_t pairs = stages * r.microbatches;
  if (pairs > limits::kMaxStageMicrobatches) {
    throw FieldError("microbatches",
                     limits::above_limit(
                         std::to_string(stages) + " stages x " + std::to_string(r.microbatches) +
                             " micro-batches = " + std::to_string(pairs) + " stage micro-batches",
                         static_cast<double>(limits::kMaxStageMicrobatches)));
  }
  if (r.mbs < 1) throw FieldError("mbs", "must be at least 1");
  check_limit("mbs", r.mbs, limits::kMaxMicroBatchSize);
  if (r.p2_concat < 0) throw FieldError("p2_concat", "must be 0 (all) or a positive count");
  check_limit("p2_concat", r.p2_concat, limits::kMaxMicrobatches);
  if (!(r.memory_limit_bytes >= 0)) throw FieldError("memory_limit_bytes", "must not be negative");
  if (r.memory_limit_bytes > limits::kMaxMemoryBytes) {
    throw FieldError("memory_limit_bytes",
                     limits::above_limit(std::to_string(r.memory_limit_bytes) + " bytes",
                                         limits::kMaxMemoryBytes));
  }
  check_limit("layers_per_stage", static_cast<std::int64_t>(r.layers_per_stage.size()),
              limits::kMaxStages);
}

Schedule with_backward_mode(const ScheduleFamily& family, Schedule generated,
                            const ScheduleRequest& request, const std::vector<StageCost>& costs,
                            const PlanMeta& meta) {
  if (family.places_p2()) return generated;
  const BackwardMode mode = request.backward.value_or(family.default_backward());
  if (mode == BackwardMode::twobp_fill)
    return fill_p2_into_gaps(generated, costs, meta, request.p2_concat);
  return apply_backward_mode(generated, mode, request.p2_concat);
}

Plan make_plan(const PlanRequest& request) {
  check_plan_request(request);
  const ScheduleFamily& family = find_schedule_family(request.schedule);
  ScheduleRequest schedule_request{request.devices,  request.chunks,    request.microbatches,
                                   request.backward, request.p2_concat, nullptr};
  family.check(schedule_request);
  if (request.bpipe == BpipeMode::automatic)
    throw FieldError("bpipe", "auto searches micro-batch sizes and needs a global batch");
  if (request.bpipe == BpipeMode::on && !family.traits().bpipe) {
    throw FieldError("bpipe", "schedule '" + family.name() +
                                  "' is not supported; BPipe pairs the stages of 1f1b (one "
                                  "stage per device)");
  }
  const StageInputs inputs = stage_inputs(request);
  const StageCostContext context{
      inputs.costs,
      std::vector<double>(static_cast<std::size_t>(request.devices), request.memory_limit_bytes),
      request.profile.p2p};
  schedule_request.costs = &context;
  Schedule generated = family.generate(schedule_request);
  check_schedule(generated);
  // The metadata needs the family's stage-to-device map (V shapes differ from v mod P).
  PlanMeta meta = make_meta(request, inputs.partition, inputs.costs, generated);
  const Schedule schedule =
      with_backward_mode(family, std::move(generated), schedule_request, inputs.costs, meta);
  return lower_and_simulate(schedule, inputs.costs, std::move(meta), request.bpipe);
}

Plan make_plan_for_schedule(const PlanRequest& request, const Schedule& schedule) {
  check_plan_request(request);
  check_schedule(schedule);
  if (schedule.devices != request.devices || schedule.microbatches != request.microbatches ||
      schedule.stage_count() != request.devices * request.chunks) {
    throw Error("schedule: " + std::to_string(schedule.devices) + " devices, " +
                std::to_string(schedule.stage_count()) + " stages, " +
                std::to_string(schedule.microbatches) + " micro-batches do not match " +
                field_name("devices") + " " + std::to_string(request.devices) + ", " +
                field_name("chunks") + " " + std::to_string(request.chunks) + ", " +
                field_name("microbatches") + " " + std::to_string(request.microbatches));
  }
  const StageInputs inputs = stage_inputs(request);
  PlanMeta meta = make_meta(request, inputs.partition, inputs.costs, schedule);
  return lower_and_simulate(schedule, inputs.costs, std::move(meta), BpipeMode::off, true);
}

}  // namespace pipeplan
