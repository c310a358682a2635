// The end of a step in a multi-process run (ExecutorOptions::group): every rank sends rank 0 its
// share — whether its part of the step failed and why, the losses of the micro-batches whose
// head it holds, its nodes' measured times (and host times, on GPUs), its memory peak and
// timeline, its BPipe bytes, its wall time — and rank 0 tells every rank the outcome: the
// micro-batch losses and step time, or one error for the whole step. So every rank ends a failed
// step with the same error (rank 0 prints it), and rank 0 assembles the same measured step as a
// single-process run.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "planner/graph/simulator.h"
#include "runtime/device_worker.h"
#include "runtime/process_group.h"

namespace pipeplan {

// One rank's share of a step.
struct RankStep {
  bool ok = true;
  std::string error;             // the rank's first error
  bool consequence = false;      // that error was a Cancelled: another rank's failure ended it
  std::map<int, double> losses;  // by micro-batch
  std::vector<std::pair<int, NodeTime>> times;  // (node id, µs since this rank's step start)
  // With a node timer (GPUs): when the host queued each of those nodes, on the device's clock
  // (NodeTimer::align_host_times), as (node id, times); empty without one.
  std::vector<std::pair<int, NodeTime>> host_times;
  std::int64_t peak_bytes = 0;
  std::vector<std::pair<double, std::int64_t>> memory_timeline;
  BpipeBytes bpipe;
  double step_time_us = 0;
};

std::string encode_rank_step(const RankStep& step);
RankStep decode_rank_step(const std::string& bytes);

struct StepOutcome {
  std::vector<double> microbatch_losses;  // every rank
  double step_time_us = 0;                // every rank: the slowest rank's
  std::vector<RankStep> ranks;            // rank 0 only: every rank's share, by rank
};

// Collective: call on every rank after its part of step `step` ended. Throws AgreedError on
// every rank that hears the outcome when some rank failed or did not arrive within `timeout`
// ("step 3: rank 2: <its error>", a cause before its consequences; "rank 2 left the run during
// the step (...)" for a rank that went to the end of the run on an error of its own); rank 0's
// group is then broken() when a rank was missing. A rank that hears nothing from rank 0 throws
// GroupTimeout.
StepOutcome exchange_step(ProcessGroup& group, const RankStep& local, int step, int microbatches,
                          std::chrono::milliseconds timeout);

}  // namespace pipeplan
