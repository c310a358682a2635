// ZB-H2 (Qi et al., ICLR 2024, arXiv 2401.10241, figure 3): 2(P - i - 1) + 1 warm-up forwards
// fill the time until device i's first p1 arrives, and the p2 of device i runs 2i micro-batches
// behind its p1 so that the tail becomes a parallelogram. Uniform stages, comm = 0, m >= P: the
// span of every device (first op to last op, the steady-state step of Zero Bubble) exceeds its
// work by (P - 1)(T_F + T_B - 2T_W), zero when T_F = T_B = T_W, with (2P - 1)·M_B on every device.
#include "schedules/families/zb_handcrafted.h"

namespace pipeplan {

Schedule make_zb_h2(const ScheduleRequest& request) {
  const int p = request.devices;
  return make_handcrafted_zero_bubble(
      request, "zb-h2",
      {[p](int d) { return 2 * (p - d - 1) + 1; }, [](int d) { return 2 * d; },
       /*forward_first=*/false});
}

}  // namespace pipeplan
