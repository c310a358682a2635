// V-Half (Qi et al., "Pipeline Parallelism with Controllable Memory", arXiv 2405.15362): the
// building block whose chunk-0 forwards and chunk-1 input gradients advance 2 slots per device
// and the others 1 (with 3 slots of slack at the top of the V when P is even, where the passes
// would otherwise collide), repeated every 6 unit slots (v_shape.cpp), then the paper's second
// squeeze of the cool-down with the p2s taken out (make_v_from_block's squeeze_cool_down). Its
// lifespans add up to about 6P slots per device, so a device holds floor((P + 2) / 2)·M_B of
// activations, half of 1F1B's P·M_B, and at F = B = W the largest stage span's bubble is
// floor((P - 1) / 2)(F + B + W) - F/2 from P = 3 on: within the paper's P/2 of (F + B + W),
// below 1F1B's (P - 1)(F + B + W) and its 2bp form's (P - 1)(F + B)
// (tests/schedules/zero_bubble_test.cpp).
#include "schedules/families/v_shape.h"

namespace pipeplan {

namespace {

Schedule make_v_half(const ScheduleRequest& request) {
  const int p = request.devices;
  const VBlockOffsets offsets{
      .f0_step = 2, .f1_step = 1, .b1_step = 2, .b0_step = 1, .top_gap = p % 2 == 0 ? 3 : 0};
  const int cap = v_chunk_stash_cap(VFamily::v_half, p);
  return make_v_from_block(request, "v-half", v_building_block(p, offsets), cap,
                           {.squeeze_cool_down = true});
}

const ScheduleFamilyRegistration kVHalf(
    {.name = "v-half",
     .description = "V-Half (Qi et al. 2405.15362): the paper's building block at half of 1F1B's "
                    "memory, (P+2)/2*M_B, bubble below P/2 of (F+B+W) at F=B=W (fixed unit "
                    "slots); --chunks 2; needs --backward 2bp",
     .listing_order = 80,
     .p2 = P2Placement::by_family,
     .chunks = {.min = 2, .max = 2, .preferred = 2},
     .memory = {"min(floor((P + 2) / 2), m)",
                [](int p, int, int m) { return v_peak_stashes(VFamily::v_half, p, m); }},
     .folded_stages = true},
    make_v_half);

}  // namespace

}  // namespace pipeplan
