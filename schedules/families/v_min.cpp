// V-Min (Qi et al., "Pipeline Parallelism with Controllable Memory", arXiv 2405.15362): the
// paper's building block with minimal offsets (v_shape.cpp, make_building_block) repeated every
// 6 unit slots: floor((P + 4) / 3)·M_B of activations, a bubble of about 2P/3 of (F + B + W).
#include "schedules/families/v_shape.h"

namespace pipeplan {

namespace {

const ScheduleFamilyRegistration kVMin(
    {.name = "v-min",
     .description = "V-Min (Qi et al. 2405.15362): the paper's building block with minimal "
                    "offsets repeated every 6 passes; (P+4)/3*M_B of activations, bubble about "
                    "2P/3 of (F+B+W); --chunks 2; needs --backward 2bp",
     .listing_order = 90,
     .p2 = P2Placement::by_family,
     .chunks = {.min = 2, .max = 2, .preferred = 2},
     .memory = {"min(2 floor((P + 4) / 3), 2P, 2m) / 2",
                [](int p, int, int m) { return v_peak_stashes(VFamily::v_min, p, m); }}},
    make_v_min_building_block);

}  // namespace

}  // namespace pipeplan
