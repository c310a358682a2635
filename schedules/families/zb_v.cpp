// ZB-V (Qi et al., ICLR 2024, arXiv 2401.10241): two chunks per device in a V, the published
// order (v_shape.cpp, PublishedZbv): zero bubble per stage span at T_F = T_B = T_W, comm 0 and
// m >= 2P, at 1F1B's peak P·M_B.
#include "schedules/families/v_shape.h"

namespace pipeplan {

namespace {

const ScheduleFamilyRegistration kZbV(
    {.name = "zb-v",
     .description = "ZB-V (Qi et al. 2024): --chunks 2 in a V (virtual stage v on device v, then "
                    "2P-1-v), the published order: zero bubble per stage span at F=B=W with "
                    "m >= 2P, at 1F1B's memory P*M_B (m < P: memory-capped greedy); needs "
                    "--backward 2bp",
     .listing_order = 70,
     .p2 = P2Placement::by_family,
     .chunks = {.min = 2, .max = 2, .preferred = 2},
     .memory = {"min(P, m)",
                [](int p, int, int m) { return v_peak_stashes(VFamily::zb_v, p, m); }}},
    make_published_zb_v);

}  // namespace

}  // namespace pipeplan
