// `auto` as a schedule family: registered like every fixed family, but built from the stage
// costs and the per-device memory limits that make_plan hands over (ScheduleRequest::costs),
// which is why it lives in the search layer, above the simulator it evaluates candidates with.
#include <cstddef>

#include "planner/search/auto_schedule.h"
#include "schedules/family.h"

namespace pipeplan {

namespace {

// The slice of a plan's metadata that lowering and simulating candidates needs: stage s on
// device s (auto runs one chunk per device).
PlanMeta candidate_meta(const ScheduleRequest& request) {
  const StageCostContext& context = *request.costs;
  PlanMeta meta;
  meta.devices = request.devices;
  meta.chunks = request.chunks;
  meta.microbatches = request.microbatches;
  meta.schedule = kAutoScheduleName;
  meta.backward = request.backward.value_or(BackwardMode::twobp);
  meta.p2_concat = request.p2_concat;
  meta.memory_limit_bytes = context.memory_limit_bytes;
  meta.static_bytes.assign(static_cast<std::size_t>(request.devices), 0);
  for (std::size_t s = 0; s < context.costs.size() && s < meta.static_bytes.size(); ++s)
    meta.static_bytes[s] = context.costs[s].static_bytes;
  meta.link = context.link;
  return meta;
}

Schedule make_auto(const ScheduleRequest& request) {
  const PlanMeta meta = candidate_meta(request);
  return make_auto_schedule(request.costs->costs, meta, meta.backward, request.p2_concat).schedule;
}

const ScheduleFamilyRegistration kAuto(
    {.name = kAutoScheduleName,
     .description = "Automatic (pipeplan, docs/auto-schedule.md): list scheduling over the real "
                    "per-stage F/p1/p2 times and per-device memory limits, p2 placed and "
                    "concatenated where it pays; the best of its variants and the fixed families, "
                    "improved by a local search on the order; needs --backward 2bp",
     .listing_order = 1000,
     .p2 = P2Placement::by_family,
     .memory = {"fits --memory", {}},
     .needs_costs = true},
    make_auto);

}  // namespace

}  // namespace pipeplan
