// Schedule families by name. Each family (one file in schedules/) produces the per-device order
// of forwards and fused backwards (op B); planner/backward.h then splits B into p1/p2 as the
// backward mode asks.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/schedule.h"

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
};

const std::vector<ScheduleFamily>& schedule_families();
const ScheduleFamily& find_schedule_family(std::string_view name);  // throws Error

// Families, one file each.
Schedule make_gpipe(const ScheduleRequest& request);
Schedule make_1f1b(const ScheduleRequest& request);
Schedule make_interleaved(const ScheduleRequest& request);

// Shared by the generators. Throws Error naming --stages, --microbatches or --chunks (chunks > 1
// only when `uses_chunks`).
void check_schedule_request(const ScheduleRequest& request, std::string_view family,
                            bool uses_chunks);
// A fused schedule with no actions yet: devices × chunks virtual stages, v on device v mod P.
Schedule schedule_skeleton(const ScheduleRequest& request, std::string_view family);

}  // namespace pipeplan
