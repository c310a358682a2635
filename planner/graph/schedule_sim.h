// A schedule's step on compact arrays, without building its task graph (each device's optimizer
// step, StageCost::optimizer_us, after its last action): the times, spans, busy
// time and peak memory that lower() + validate() + simulate() would give, for the planner's
// searches (auto, 2bp-fill, --search), which evaluate many candidate orders and keep one.
//
// It is the simulator's model specialised to a lowered schedule without BPipe transfers: each
// device runs its actions in order; an action that crosses devices sends one message, and the
// messages of one directed device pair run one after another in the sender's order (the
// lowering's send and receive streams), so a message starts when its producer has ended and the
// pair's previous message has arrived, and lasts latency + bytes / bandwidth; memory follows the
// validator's order semantics (an op's allocation at its start, its release at its end). Under
// a sustained-load term on separate GPUs (meta.contention: `sustained` without a curve) each
// device follows its own load as the simulator does (DeviceLoad, profiles/contention.h), and the
// step starts at the loads its end leaves (the same passes); a shared GPU's contention curves are
// not modelled. The chosen plan is still lowered, validated and simulated for real; property
// tests (tests/planner/graph/schedule_sim_test.cpp) hold this to the simulator on every family
// and backward mode with random costs and links, with and without a sustained term.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/graph/metrics.h"
#include "planner/graph/taskgraph.h"
#include "profiles/partition.h"
#include "schedules/schedule.h"

namespace pipeplan {

struct ScheduleSim {
  // False when the order cannot run (an action before its input, a deadlock, an overlapped pair
  // that check_schedule refuses) or breaks a device's memory limit; `error` then says which, in
  // check_schedule's words for a pair and the validator's for memory.
  bool ok = false;
  bool memory_ok = true;
  std::string error;
  double makespan_us = 0;        // first op anywhere to last op anywhere
  double max_stage_span_us = 0;  // largest first-to-last span of one device
  double bubble_ratio = 0, span_bubble_ratio = 0;
  double sum_last_end_us = 0;  // Σ over devices of their last end (a tie-breaker for searches)
  std::vector<double> busy_us, first_start_us, last_end_us;  // per device
  std::vector<std::int64_t> peak_memory_bytes;               // per device, static included
  // Per device, per action in order: its start and end, then its optimizer step's where the
  // costs give one (the compute stream's order; filled when asked for).
  std::vector<std::vector<NodeTime>> times;
};

struct ScheduleSimOptions {
  bool keep_times = false;   // fill ScheduleSim::times
  bool check_memory = true;  // stop at the first memory-limit violation (meta.memory_limit_bytes)
};

// `meta` supplies the link, static bytes and memory limits per device (as lowering reads them).
ScheduleSim simulate_schedule(const Schedule& schedule, const std::vector<StageCost>& costs,
                              const PlanMeta& meta, const ScheduleSimOptions& options = {});

// Each device's peak memory under the order alone (its static bytes, then each action's
// allocation and working memory at its start and its release at its end, an overlapped pair's
// together): what simulate_schedule reports for an order that runs, without running it, since
// the times do not enter. For a search that rules out an order by its memory before timing it.
std::vector<std::int64_t> schedule_peak_memory(const Schedule& schedule,
                                               const std::vector<StageCost>& costs,
                                               const PlanMeta& meta);

}  // namespace pipeplan
