// GPipe (Huang et al., 2019): each device runs every forward, then every backward, both in
// micro-batch order. Peak activation memory is m micro-batches on every stage.
#include "schedules/registry.h"

namespace pipeplan {

Schedule make_gpipe(const ScheduleRequest& request) {
  check_schedule_request(request, "gpipe", false);
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

}  // namespace pipeplan
