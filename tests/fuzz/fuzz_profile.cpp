// The profile loader, then a plan from what it loaded (stage costs, lowering, simulation).
#include "planner/base/io.h"
#include "planner/plan/make_plan.h"
#include "profiles/profile.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipeplan;
  return fuzz::run([&] {
    Profile profile =
        profile_from_json(parse_json_text(fuzz::text_of(data, size), "p.json"), "p.json");
    static_cast<void>(profile_from_json(profile_to_json(profile), "round trip"));
    const std::vector<int> sizes = profile.micro_batch_sizes();
    if (sizes.empty()) return;
    PlanRequest r;
    r.profile = std::move(profile);
    r.devices = 2;
    r.microbatches = 3;
    r.mbs = sizes.front();
    r.backward = BackwardMode::twobp;
    static_cast<void>(make_plan(r));
  });
}
