// docs/design/architecture.md's example: a new schedule family is this one file and nothing else.
// It registers itself; every generic test over schedule_families() (validity, deadlock freedom,
// round trips, the declared memory model against the simulator, the property test over
// make_plan) then covers it, and make_plan, the search and `compare` offer it.
//
// Eager 1F1B: one warm-up forward more than 1F1B on every device (room to overlap the next
// receive with compute), at the price of one more micro-batch of activations.
#include <algorithm>

#include "schedules/family.h"

namespace pipeplan {
namespace {

Schedule make_eager_1f1b(const ScheduleRequest& request) {
  Schedule schedule = schedule_skeleton(request, "1f1b-eager");
  const int m = request.microbatches;
  for (int d = 0; d < request.devices; ++d) {
    std::vector<Action>& actions = schedule.per_device[static_cast<std::size_t>(d)];
    const int warmup = std::min(request.devices - d, m);
    for (int mb = 0; mb < warmup; ++mb)
      actions.push_back({OpType::F, d, {mb}});
    for (int mb = 0; mb < m; ++mb) {
      if (mb + warmup < m) actions.push_back({OpType::F, d, {mb + warmup}});
      actions.push_back({OpType::B, d, {mb}});
    }
  }
  return schedule;
}

const ScheduleFamilyRegistration kEager1f1b(
    {.name = "1f1b-eager",
     .description = "Eager 1F1B (example): P-i warm-up forwards on device i; min(P+1, m)*M_B",
     .listing_order = 500,
     .memory = {"min(P + 1, m)", [](int p, int, int m) { return double(std::min(p + 1, m)); }}},
    make_eager_1f1b);

}  // namespace
}  // namespace pipeplan
