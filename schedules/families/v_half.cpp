// V-Half (Qi et al., "Pipeline Parallelism with Controllable Memory", arXiv 2405.15362): the V
// placement with activation memory capped at about half of 1F1B's, (P/2 + 1)·M_B, scheduled by
// the list scheduler of v_shape.cpp (docs/schedules.md says why it is not yet the paper's own
// building block).
#include "schedules/families/v_shape.h"

namespace pipeplan {

namespace {

Schedule make_v_half(const ScheduleRequest& request) {
  return make_v_schedule(request, "v-half", v_chunk_stash_cap(VFamily::v_half, request.devices));
}

const ScheduleFamilyRegistration kVHalf(
    {.name = "v-half",
     .description = "V-Half (Qi et al. 2405.15362): the V placement capped at about half of "
                    "1F1B's memory, (P+2)/2*M_B; --chunks 2; needs --backward 2bp",
     .listing_order = 80,
     .p2 = P2Placement::by_family,
     .chunks = {.min = 2, .max = 2, .preferred = 2},
     .memory = {"min(P + 2, 2P, 2m) / 2",
                [](int p, int, int m) { return v_peak_stashes(VFamily::v_half, p, m); }}},
    make_v_half);

}  // namespace

}  // namespace pipeplan
