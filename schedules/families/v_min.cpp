// V-Min (Qi et al., "Pipeline Parallelism with Controllable Memory", arXiv 2405.15362): the
// building block with minimal offsets, every pass one slot after the pass it depends on (2 slots
// of slack at the top of the V when 3 divides P, where minimal offsets would collide), repeated
// every 6 unit slots (v_shape.cpp): floor((P + 4) / 3)·M_B of activations, about a third of
// 1F1B's, and a bubble of about 2P/3 of (F + B + W).
#include "schedules/families/v_shape.h"

namespace pipeplan {

namespace {

Schedule make_v_min(const ScheduleRequest& request) {
  const int p = request.devices;
  const VBlockOffsets offsets{.top_gap = p % 3 == 0 ? 2 : 0};
  return make_v_from_block(request, "v-min", v_building_block(p, offsets),
                           v_chunk_stash_cap(VFamily::v_min, p));
}

const ScheduleFamilyRegistration kVMin(
    {.name = "v-min",
     .description = "V-Min (Qi et al. 2405.15362): the paper's building block with minimal "
                    "offsets repeated every 6 passes; (P+4)/3*M_B of activations, bubble about "
                    "2P/3 of (F+B+W) at F=B=W (fixed unit slots); --chunks 2; needs --backward 2bp",
     .listing_order = 90,
     .p2 = P2Placement::by_family,
     .chunks = {.min = 2, .max = 2, .preferred = 2},
     .memory = {"min(floor((P + 4) / 3), m)",
                [](int p, int, int m) { return v_peak_stashes(VFamily::v_min, p, m); }},
     .folded_stages = true},
    make_v_min);

}  // namespace

}  // namespace pipeplan
