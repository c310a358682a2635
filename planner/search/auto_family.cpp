// `auto` as a schedule family: registered like every fixed family, but built from the stage
// costs, the per-device memory limits and the model's other cuts that make_plan hands over
// (ScheduleRequest::costs), which is why it lives in the search layer, above the simulator it
// evaluates candidates with. It reports the cut it chose back through the same context.
#include <cstddef>

#include "planner/search/auto_schedule.h"
#include "schedules/family.h"

namespace pipeplan {

namespace {

Schedule make_auto(const ScheduleRequest& request) {
  StageCostContext& context = *request.costs;
  AutoRequest r;
  r.devices = request.devices;
  r.microbatches = request.microbatches;
  r.mode = request.backward.value();  // decided by ScheduleFamily::generate
  r.p2_concat = request.p2_concat;
  r.objective = request.objective;
  r.max_copies = request.max_copies;
  r.costs = context.costs;
  for (const StageCost& c : context.costs)
    r.static_bytes.push_back(c.static_bytes);
  r.memory_limit_bytes = context.memory_limit_bytes;
  r.link = context.link;
  r.overlap = context.overlap;
  r.contention = context.contention;
  r.gpu_hbm_bytes = context.gpu_hbm_bytes;
  r.cut = context.cut;
  r.evaluate_first = context.evaluate_first;
  AutoResult result = make_auto_schedule(r);
  context.chosen_blocks = std::move(result.blocks);
  // A two-copy order is held to its own layout's bounds (the plan's), not the one-copy ones.
  if (result.schedule.replicas == 1) {
    context.bound_step_us = result.bound_step_us;
    context.bound_span_us = result.bound_span_us;
  }
  context.returned_first = result.first_candidate;
  context.chosen = std::move(result.variant);
  return std::move(result.schedule);
}

const ScheduleFamilyRegistration kAuto(
    {.name = kAutoScheduleName,
     .description =
         "Automatic (pipeplan, docs/design/auto-schedule.md): one chunk per device, a V or "
         "interleaved (the cut into 2P stages chosen too), list-scheduled over the real "
         "per-stage F/p1/p2 times and per-device memory limits, against every fixed "
         "family of each layout (dualpipe's two copies of the model included), improved by "
         "a local search; --objective step or steady; needs --backward 2bp",
     .listing_order = 1000,
     .p2 = P2Placement::by_family,
     .memory = {"fits --memory", {}},
     .needs_costs = true},
    make_auto);

}  // namespace

}  // namespace pipeplan
