// Schedule families by name. Each family (one file in schedules/) produces the per-device order
// of forwards and fused backwards (op B); schedules/backward.h then splits B into p1/p2 as the
// backward mode asks.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "schedules/schedule.h"

namespace pipeplan {

struct ScheduleRequest {
  int devices = 0;
  int chunks = 1;  // virtual stages per device
  int microbatches = 0;
};

struct ScheduleFamily {
  std::string name;
  std::string description;
  bool uses_chunks = false;  // accepts --chunks > 1
  // Throws Error naming the field when the request does not suit the family (e.g. micro-batches
  // not divisible by the number of devices).
  std::function<Schedule(const ScheduleRequest&)> generate;
  // The family emits P1/P2 itself (Zero Bubble style) instead of fused B: make_plan uses its
  // output as-is and accepts only --backward 2bp (see docs/schedules.md).
  bool places_p2 = false;
};

const std::vector<ScheduleFamily>& schedule_families();
const ScheduleFamily& find_schedule_family(std::string_view name);  // throws Error

// Families, one file each.
Schedule make_gpipe(const ScheduleRequest& request);
Schedule make_1f1b(const ScheduleRequest& request);
Schedule make_interleaved(const ScheduleRequest& request);
Schedule make_looped_bfs(const ScheduleRequest& request);
Schedule make_zb_h1(const ScheduleRequest& request);
Schedule make_zb_h2(const ScheduleRequest& request);
Schedule make_zb_v(const ScheduleRequest& request);
Schedule make_v_half(const ScheduleRequest& request);
Schedule make_v_min(const ScheduleRequest& request);
// `auto` is built by make_plan from the stage costs (planner/search/auto_schedule.h); called
// without them it throws Error naming --schedule.
Schedule make_auto_unplanned(const ScheduleRequest& request);
// Peak activation memory of the V families in chunk stashes (M_B / 2 each, counted from a forward
// to its p2), clamped to [2, 2P]: the list scheduler's cap for zb-v and v-half, the building
// block's own peak 2 * floor((P + 4) / 3) for v-min.
int v_shape_cap(std::string_view family, int devices);

// Shared by the generators. Throws Error naming --stages, --microbatches or --chunks (chunks > 1
// only when `uses_chunks`).
void check_schedule_request(const ScheduleRequest& request, std::string_view family,
                            bool uses_chunks);
// A fused schedule with no actions yet: devices × chunks virtual stages, v on device v mod P.
Schedule schedule_skeleton(const ScheduleRequest& request, std::string_view family);

}  // namespace pipeplan
