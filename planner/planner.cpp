#include "planner/planner.h"

#include <algorithm>

#include "planner/backward.h"
#include "planner/error.h"
#include "planner/partition.h"
#include "planner/validator.h"
#include "schedules/registry.h"

namespace pipeplan {

namespace {

void check_request(const PlanRequest& r) {
  if (r.devices < 1) throw Error("--stages: must be at least 1");
  if (r.chunks < 1) throw Error("--chunks: must be at least 1");
  if (r.microbatches < 1) throw Error("--microbatches: must be at least 1");
  if (r.mbs < 1) throw Error("--mbs: must be at least 1");
  if (r.p2_concat < 0) throw Error("--p2-concat: must be 0 (all) or a positive count");
  if (r.memory_limit_bytes < 0) throw Error("--memory: must not be negative");
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

}  // namespace

Plan make_plan(const PlanRequest& request) {
  check_request(request);
  const ScheduleFamily& family = find_schedule_family(request.schedule);
  if (request.chunks > 1 && !family.uses_chunks) {
    throw Error("--chunks: schedule '" + family.name + "' runs one chunk per device");
  }
  const int stage_count = request.devices * request.chunks;
  const ModelConfig& model = request.profile.model;
  Partition partition;
  if (request.layers_per_stage.empty()) {
    partition = partition_balanced(model, request.profile, request.mbs, stage_count);
  } else {
    if (static_cast<int>(request.layers_per_stage.size()) != stage_count) {
      throw Error("--layers-per-stage: " + std::to_string(request.layers_per_stage.size()) +
                  " counts for " + std::to_string(stage_count) + " stages");
    }
    partition = partition_fixed(model, request.layers_per_stage);
  }
  const int max_concat = request.p2_concat == 0 ? request.microbatches : request.p2_concat;
  const auto costs = stage_costs(model, request.profile, request.mbs, partition,
                                 std::min(max_concat, request.microbatches));
  const Schedule fused =
      family.generate(ScheduleRequest{request.devices, request.chunks, request.microbatches});
  check_schedule(fused);
  PlanMeta meta = make_meta(request, partition, costs, fused);
  const Schedule schedule = request.backward == BackwardMode::twobp_fill
                                ? fill_p2_into_gaps(fused, costs, meta, request.p2_concat)
                                : apply_backward_mode(fused, request.backward, request.p2_concat);
  Plan plan{lower(schedule, costs, std::move(meta)), {}};
  if (const auto v = find_violation(plan.graph)) {
    if (v->rule == "memory-limit") throw Error("--memory: " + v->message);
    throw Error("internal: generated plan is invalid: " + v->message);
  }
  plan.sim = simulate(plan.graph);
  return plan;
}

}  // namespace pipeplan
