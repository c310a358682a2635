// GPipe (Huang et al., 2019): each device runs every forward, then every backward, both in
// micro-batch order. Peak activation memory is m micro-batches on every stage.
#include "schedules/family.h"

namespace pipeplan {

namespace {

Schedule make_gpipe(const ScheduleRequest& request) {
  Schedule schedule = schedule_skeleton(request, "gpipe");
  for (int d = 0; d < request.devices; ++d) {
    std::vector<Action>& actions = schedule.per_device[static_cast<std::size_t>(d)];
    for (int mb = 0; mb < request.microbatches; ++mb)
      actions.push_back({OpType::F, d, {mb}});
    for (int mb = 0; mb < request.microbatches; ++mb)
      actions.push_back({OpType::B, d, {mb}});
  }
  return schedule;
}

const ScheduleFamilyRegistration kGpipe(
    {.name = "gpipe",
     .description = "GPipe (Huang et al. 2019): every forward, then every backward; holds m "
                    "micro-batches of activations per stage",
     .listing_order = 10,
     .memory = {"m", [](int, int, int m) { return double(m); }},
     .bpipe = true},
    make_gpipe);

}  // namespace

}  // namespace pipeplan
