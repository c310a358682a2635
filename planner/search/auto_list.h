// `auto`'s list scheduler (docs/design/auto-schedule.md): an event simulation of the pipeline that
// builds each device's action order as it goes, for any layout of virtual stages on devices (one
// chunk per device, a V, interleaved). The device that can act earliest decides next (ties: the
// lower device); it takes
//   1. the P1 of a gradient that has arrived (the stage furthest down the model first: its
//      gradient still has the longest way back), a P2 first when memory forces it;
//   2. the F of the next micro-batch of a stage whose input has arrived (the stage furthest down
//      the model first), within the warm-up depth cap and the memory limit (a micro-batch that
//      enters the device reserves the stashes of its later stages there and the growth of one
//      P1, so a full device can always go on);
//   3. a P2 when nothing else remains (in groups of the most efficient size), when memory blocks
//      the next F, or to fill an idle gap up to the next input (the group that fits it; with
//      fill `always`, one P2 even where none fits);
//   4. otherwise it waits for its next input.
// Decisions are kept per device in a heap and recomputed only for the devices an action can
// change (its own and the devices that exchange data with it), so a run costs O(actions log P).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiles/link.h"
#include "profiles/partition.h"
#include "schedules/schedule.h"

namespace pipeplan {

// When a P2 may fill an idle gap before the next input: only when it fits (`fit`), always
// (delaying the next op), or when at least half of it fits (`overshoot`).
enum class P2Fill : std::uint8_t { fit, always, overshoot };

// One heuristic variant: the warm-up depth cap of device d is ceil(depth_factor · (S − s_d) / k_d)
// micro-batches in flight, where s_d is d's first virtual stage, k_d its stage count and S the
// stage count (one chunk: ceil(depth_factor · (P − d)), 1F1B's depth at 1); 0: memory alone caps
// it. `split` false keeps B whole (fused), the least memory.
struct ListVariant {
  double depth_factor = 0;
  P2Fill fill = P2Fill::fit;
  bool split = true;
  // Keep P2s back for the end of the step (the steady objective's ramp-down): device d runs a
  // P2 early only while more than ceil(p2_lag · (h_d + t_d) / w_d) are pending, where h_d is when
  // its first stage can start at the earliest, t_d how long a gradient from there takes to finish
  // on stage 0 and w_d its cheapest P2; memory and the final drain still run them. 0: no lag.
  double p2_lag = 0;
  // After a P1, a ready forward goes before the next P1 (rounds of one P1 and one F, as ZB-V's
  // steady state); otherwise a waiting gradient always goes first.
  bool alternate = false;
  std::string name() const;  // e.g. "depth=2.0x fill=fit"
};

// The layout and costs the scheduler reads: stage s runs on device stage_device[s] with
// costs[s]; boundary s -> s + 1 costs comm_us[s] (0 on one device).
struct ListInputs {
  int devices = 0;
  int microbatches = 0;
  std::vector<int> stage_device;
  const std::vector<StageCost>* costs = nullptr;
  P2pLink link;
  std::vector<std::int64_t> static_bytes;  // per device
  std::vector<double> memory_limit_bytes;  // per device; 0 = unlimited
};

// Throws FieldError("memory_limit_bytes") when a device cannot hold one micro-batch or one P1.
// `max_group`: the largest P2 group (micro-batches of one stage in one call).
Schedule list_schedule(const ListInputs& inputs, const ListVariant& variant, int max_group);

}  // namespace pipeplan
