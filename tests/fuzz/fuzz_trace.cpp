// `pipeplan diff`: a measured trace read back against a fixed plan (uniform costs, 2 devices, 2
// micro-batches, 1F1B: the plan tests/fuzz/seed_corpus.sh traces), then the diff and its report.
#include "planner/base/io.h"
#include "planner/plan/make_plan.h"
#include "profiles/analytic.h"
#include "runtime/measured.h"
#include "runtime/trace_diff.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipeplan;
  static const Plan plan = [] {
    PlanRequest r;
    r.profile = uniform_profile(parse_uniform("1:1:1:0.1", ""), 2, 1);
    r.gpu = "h100-sxm";
    r.devices = 2;
    r.microbatches = 2;
    return make_plan(r);
  }();
  return fuzz::run([&] {
    std::vector<NodeTime> times = node_times_from_trace(
        plan.graph, parse_json_text(fuzz::text_of(data, size), "t.json"), "t.json");
    const SimResult measured = measured_result(plan.graph, std::move(times), {});
    const TraceDiff diff = diff_trace(plan.graph, plan.sim, measured);
    static_cast<void>(format_diff(diff, 10));
    static_cast<void>(diff_to_json(diff, -1).dump());
  });
}
