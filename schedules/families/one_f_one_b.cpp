// 1F1B (PipeDream-Flush, Narayanan et al. 2021): device i runs min(P - i - 1, m) warm-up
// forwards, then alternates one forward and one backward, then drains the remaining backwards.
// Stage i holds at most min(P - i, m) micro-batches of activations (BPipe, Kim et al. 2023).
#include <algorithm>

#include "schedules/family.h"

namespace pipeplan {

namespace {

Schedule make_1f1b(const ScheduleRequest& request) {
  Schedule schedule = schedule_skeleton(request, "1f1b");
  const int m = request.microbatches;
  for (int d = 0; d < request.devices; ++d) {
    std::vector<Action>& actions = schedule.per_device[static_cast<std::size_t>(d)];
    const int warmup = std::min(request.devices - d - 1, m);
    for (int mb = 0; mb < warmup; ++mb)
      actions.push_back({OpType::F, d, {mb}});
    for (int mb = 0; mb + warmup < m; ++mb) {
      actions.push_back({OpType::F, d, {mb + warmup}});
      actions.push_back({OpType::B, d, {mb}});
    }
    for (int mb = m - warmup; mb < m; ++mb)
      actions.push_back({OpType::B, d, {mb}});
  }
  return schedule;
}

const ScheduleFamilyRegistration k1f1b(
    {.name = "1f1b",
     .description = "1F1B (PipeDream-Flush): P-i-1 warm-up forwards on device i, then one "
                    "forward one backward; holds min(P-i, m) micro-batches",
     .listing_order = 20,
     .memory = {"min(P, m)", [](int p, int, int m) { return double(std::min(p, m)); }},
     .bpipe = true},
    make_1f1b);

}  // namespace

}  // namespace pipeplan
