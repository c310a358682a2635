// ZB-H1 (Qi et al., ICLR 2024, arXiv 2401.10241, figure 3): 1F1B's warm-up of P - i - 1
// forwards, the p2 of device i running i micro-batches behind its p1, so that the p1 chain of
// the cool-down no longer waits for weight gradients. Uniform stages, comm = 0, m >= P: every
// device idles (P - 1)(T_F + T_B - T_W) (T_B = p1, T_W = p2) and holds at most P micro-batches,
// 1F1B's peak P·M_B.
#include <algorithm>

#include "schedules/families/zb_handcrafted.h"

namespace pipeplan {

namespace {

Schedule make_zb_h1(const ScheduleRequest& request) {
  const int p = request.devices;
  return make_handcrafted_zero_bubble(
      request, "zb-h1",
      {[p](int d) { return p - d - 1; }, [](int d) { return d; }, /*forward_first=*/true});
}

const ScheduleFamilyRegistration kZbH1(
    {.name = "zb-h1",
     .description = "ZB-H1 (Qi et al. 2024): 1F1B warm-up, p2 of device i lags its p1 by i; "
                    "bubble (P-1)(F+B-W) at 1F1B's memory P*M_B; needs --backward 2bp",
     .listing_order = 50,
     .p2 = P2Placement::by_family,
     .memory = {"min(P, m)", [](int p, int, int m) { return double(std::min(p, m)); }}},
    make_zb_h1);

}  // namespace

}  // namespace pipeplan
