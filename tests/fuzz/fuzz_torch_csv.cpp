// The PyTorch schedule CSV import: the cells, PyTorch's rules, the deadlock check, then the
// imported schedule lowered, validated and simulated as `pipeplan import` does.
#include "planner/plan/make_plan.h"
#include "profiles/analytic.h"
#include "schedules/torch_csv.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipeplan;
  return fuzz::run([&] {
    const bool join = size > 0 && data[0] % 2 == 0;
    TorchCsvReport report;
    const Schedule schedule =
        schedule_from_torch_csv(fuzz::text_of(data, size), "s.csv", {join}, &report);
    if (schedule.stage_count() % schedule.devices != 0) return;
    PlanRequest r;
    r.devices = schedule.devices;
    r.chunks = schedule.stage_count() / schedule.devices;
    r.microbatches = schedule.microbatches;
    r.backward = schedule.backward;
    r.schedule = schedule.family;
    check_plan_request(r);
    r.profile = uniform_profile(parse_uniform("1:2:1:0.1", "1:-0.5:-0.5"), schedule.stage_count(),
                                r.chunks);
    static_cast<void>(make_plan_for_schedule(r, schedule));
  });
}
