// The machinery shared by the V-shaped families (zb_v.cpp, v_half.cpp, v_min.cpp): two chunks per
// device, virtual stage v on device v for v < P and on device 2P - 1 - v after (v_shape.cpp says
// how each order is built).
#pragma once

#include <string_view>

#include "schedules/family.h"

namespace pipeplan {

enum class VFamily { zb_v, v_half, v_min };

// The peak activation memory of each V family, in chunk stashes (M_B / 2: one micro-batch on one
// chunk, counted from a forward to its p2), clamped to [2, 2P]: the list scheduler's cap for zb-v
// (m < P) and v-half, the building block's own peak 2 * floor((P + 4) / 3) for v-min.
int v_chunk_stash_cap(VFamily family, int devices);

// The declared peak in M_B (schedules/family.h's MemoryModel): the cap, or every micro-batch's
// two chunks when there are fewer.
inline double v_peak_stashes(VFamily family, int devices, int microbatches) {
  const int cap = v_chunk_stash_cap(family, devices);
  return (cap < 2 * microbatches ? cap : 2 * microbatches) / 2.0;
}

// The deterministic list scheduler on unit times with a cap in chunk stashes.
Schedule make_v_schedule(const ScheduleRequest& request, std::string_view family, int cap);
// Zero Bubble's published ZB-V (m >= P; the list scheduler at 2P below that).
Schedule make_published_zb_v(const ScheduleRequest& request);
// The building block of arXiv 2405.15362 with minimal offsets, repeated every 6 slots.
Schedule make_v_min_building_block(const ScheduleRequest& request);

}  // namespace pipeplan
