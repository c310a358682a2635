// `auto` needs the stage costs and memory limits, which a ScheduleRequest does not carry:
// make_plan builds it with make_auto_schedule (planner/search/auto_schedule.h).
#include "planner/base/error.h"
#include "schedules/registry.h"

namespace pipeplan {

Schedule make_auto_unplanned(const ScheduleRequest& /*request*/) {
  throw Error(
      "--schedule: 'auto' is built from the stage costs; plan it with make_plan (pipeplan plan)");
}

}  // namespace pipeplan
