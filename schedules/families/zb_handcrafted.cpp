#include "schedules/families/zb_handcrafted.h"

#include <algorithm>

namespace pipeplan {

Schedule make_handcrafted_zero_bubble(const ScheduleRequest& request, std::string_view family,
                                      const HandcraftedShape& shape) {
  Schedule schedule = schedule_skeleton(request, family);
  schedule.backward = BackwardMode::twobp;
  const int m = request.microbatches;
  for (int d = 0; d < request.devices; ++d) {
    std::vector<Action>& actions = schedule.per_device[static_cast<std::size_t>(d)];
    const int warmup = std::clamp(shape.warmup(d), 0, m);
    const int lag = std::max(shape.lag(d), 0);
    for (int mb = 0; mb < warmup; ++mb)
      actions.push_back({OpType::F, d, {mb}});
    int next_p2 = 0;
    for (int mb = 0; mb < m; ++mb) {
      const int next_forward = mb + warmup;
      if (shape.forward_first && next_forward < m)
        actions.push_back({OpType::F, d, {next_forward}});
      actions.push_back({OpType::P1, d, {mb}});
      if (mb >= lag) actions.push_back({OpType::P2, d, {next_p2++}});
      if (!shape.forward_first && next_forward < m)
        actions.push_back({OpType::F, d, {next_forward}});
    }
    while (next_p2 < m)
      actions.push_back({OpType::P2, d, {next_p2++}});
  }
  return schedule;
}

}  // namespace pipeplan
