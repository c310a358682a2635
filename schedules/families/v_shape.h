// The machinery shared by the V-shaped families (zb_v.cpp, v_half.cpp, v_min.cpp): two chunks per
// device, virtual stage v on device v for v < P and on device 2P - 1 - v after, so device 0 holds
// the first and the last chunk (v_shape.cpp says how each order is built).
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "schedules/family.h"

namespace pipeplan {

enum class VFamily { zb_v, v_half, v_min };

// The peak activation memory of each V family, in chunk stashes (M_B / 2: one micro-batch on one
// chunk, counted from a forward to its p2), clamped to [2, 2P]: 2P for zb-v (1F1B's P·M_B),
// 2·floor((P + 2) / 2) for v-half and 2·floor((P + 4) / 3) for v-min (their building blocks' own
// peaks, arXiv 2405.15362).
int v_chunk_stash_cap(VFamily family, int devices);

// The declared peak in M_B (schedules/family.h's MemoryModel): the cap, or every micro-batch's
// two chunks when there are fewer.
inline double v_peak_stashes(VFamily family, int devices, int microbatches) {
  const int cap = v_chunk_stash_cap(family, devices);
  return (cap < 2 * microbatches ? cap : 2 * microbatches) / 2.0;
}

// A V schedule with no actions yet: 2P virtual stages in the V, backward 2bp.
Schedule v_skeleton(const ScheduleRequest& request, std::string_view family);

// The deterministic list scheduler on unit times with a cap in chunk stashes (zb-v below m = P).
Schedule make_v_schedule(const ScheduleRequest& request, std::string_view family, int cap);

// A building block (arXiv 2405.15362, section 3): the unit slot, for micro-batch 0, of the four
// passes that cross devices on each device d: the chunk-0 forward f0 (virtual stage d), the
// chunk-1 forward f1 (stage 2P - 1 - d), the chunk-1 input gradient b1 (stage 2P - 1 - d) and the
// chunk-0 input gradient b0 (stage d). Built from the offsets between consecutive passes of one
// micro-batch: each pass starts `step` slots after the same pass on the device it depends on,
// the chunk-1 forward one f1_step after the chunk-0 forward on the last device, the chunk-1 input
// gradient 1 + `top_gap` after the chunk-1 forward on device 0, and the chunk-0 input gradient
// b1_step after the chunk-1 input gradient on the last device.
struct VBlockOffsets {
  int f0_step = 1, f1_step = 1, b1_step = 1, b0_step = 1, top_gap = 0;
};
using VBlock = std::vector<std::array<int, 4>>;  // per device: slots of f0, f1, b1, b0
VBlock v_building_block(int devices, const VBlockOffsets& offsets);

// The paper's construction from a block: repeated every 6 slots (micro-batch k shifted by 6k),
// each p2 in the first free slot after its p1 (oldest first), then the ramps reordered: every
// pass before the first micro-batch's block has ended on device 0, or after the last one's
// chunk-0 forward there, moves to the earliest free slot after its inputs while its device keeps
// at most `cap` chunk stashes alive. Each device runs its passes in slot order (the simulator
// squeezes out the empty slots). Throws Error when the block's passes collide.
//
// With options.squeeze_cool_down (v-half), the paper's second squeeze follows: the slots become
// the unit-time schedule of the reordered ramps, the p2s are taken out, every p1 after device 0's
// last chunk-0 forward moves, in slot order, to the earliest free slot after its inputs where the
// device stays within `cap` (each p1's p2 counted as running in the first free slot after it),
// and the p2s go back into the first free slots after their p1s, oldest first (v_shape.cpp).
struct VFromBlockOptions {
  bool squeeze_cool_down = false;
};
Schedule make_v_from_block(const ScheduleRequest& request, std::string_view family,
                           const VBlock& block, int cap, const VFromBlockOptions& options = {});

}  // namespace pipeplan
