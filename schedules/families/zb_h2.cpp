// ZB-H2 (Qi et al., ICLR 2024, arXiv 2401.10241, figure 3): 2(P - i - 1) + 1 warm-up forwards
// fill the time until device i's first p1 arrives, and the p2 of device i runs 2i micro-batches
// behind its p1 so that the tail becomes a parallelogram. Uniform stages, comm = 0, m >= P: the
// span of every device (first op to last op, the steady-state step of Zero Bubble) exceeds its
// work by (P - 1)(T_F + T_B - 2T_W), zero when T_F = T_B = T_W, with (2P - 1)·M_B on every device.
#include <algorithm>

#include "schedules/families/zb_handcrafted.h"

namespace pipeplan {

namespace {

Schedule make_zb_h2(const ScheduleRequest& request) {
  const int p = request.devices;
  return make_handcrafted_zero_bubble(
      request, "zb-h2",
      {[p](int d) { return 2 * (p - d - 1) + 1; }, [](int d) { return 2 * d; },
       /*forward_first=*/false});
}

const ScheduleFamilyRegistration kZbH2(
    {.name = "zb-h2",
     .description = "ZB-H2 (Qi et al. 2024): 2(P-i-1)+1 warm-up forwards, p2 lags p1 by 2i; "
                    "bubble (P-1)(F+B-2W) per stage span with (2P-1)*M_B; needs --backward 2bp",
     .listing_order = 60,
     .p2 = P2Placement::by_family,
     .memory = {"min(2P - 1, m)",
                [](int p, int, int m) { return double(std::min(2 * p - 1, m)); }}},
    make_zb_h2);

}  // namespace

}  // namespace pipeplan
