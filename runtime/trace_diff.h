// Predicted versus measured: reads the per-node times back from a Perfetto trace written by
// `pipeplan run --trace` (planner/graph/trace.h format; args.node is the node id) and lines them up
// with the simulation of the same plan, op by op, per device and overall.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"

namespace pipeplan {

// One time per node of `plan`, from the slices that name a node (args.node; other slices are
// skipped). Throws Error naming `source` and the node when a slice is missing or does not match
// the plan's node (stage, micro-batches, category, track), naming the field. `host_times`, when
// given, gets each node's args.host_start_us / host_end_us (a measured GPU run's host clock),
// or stays empty when the trace has none; a trace with them on some slices only is refused.
std::vector<NodeTime> node_times_from_trace(const TaskGraph& plan, const nlohmann::json& trace,
                                            std::string_view source,
                                            std::vector<NodeTime>* host_times = nullptr);
// The same from the trace file at `path` ("-": standard input), read event by event: a trace of a
// million nodes is never whole in memory as JSON.
std::vector<NodeTime> read_trace_times(const TaskGraph& plan, const std::filesystem::path& path,
                                       std::vector<NodeTime>* host_times = nullptr);

struct OpDiff {
  int node = -1;
  std::string label;  // "0F3", "send 0F3", "recv 0F3"
  int device = 0;
  std::string stream;  // Stream::name()
  double predicted_us = 0;
  double measured_us = 0;
  double error_us() const { return measured_us - predicted_us; }
  double error_pct() const;  // (measured - predicted) / predicted; 0 when both are 0
};

struct DeviceDiff {
  int device = 0;
  double predicted_busy_us = 0, measured_busy_us = 0;  // compute stream
  double predicted_span_us = 0, measured_span_us = 0;  // first to last compute op
  // Stalls: time its compute ops waited with every input ready (all their predecessors, in the
  // graph and in their stream, ended): launch gaps, a host thread held elsewhere, GPU queues
  // shared between streams. The simulator starts an op when it is ready, so predicted is 0.
  double predicted_stall_us = 0, measured_stall_us = 0;
  // The part of the measured stall before the host began queuing the op (its thread was late),
  // where the trace has host times; the rest the op spent queued on the GPU. -1: unknown.
  double measured_host_stall_us = -1;
  // How far its host times were moved back: their clock was ahead of the GPU's, some op seeming
  // to start before its thread queued it (by more than TraceDiff::kHostClockSlackUs; traces
  // measured before the two clocks shared a zero). 0: taken as they are.
  double host_clock_shift_us = 0;
};

// One stalled compute op of a measured step.
struct StallDiff {
  int node = -1;
  std::string label;
  int device = 0;
  double ready_us = 0;       // its last input's end (device clock)
  double stall_us = 0;       // start - ready
  double host_late_us = -1;  // of which its host thread had not begun queuing it; -1: unknown
  std::string last_input;    // the node whose end made it ready
};

// The overlapped pairs of the step (Node::overlaps_next): each pair's time, from the first start
// to the last end of its two ops, predicted and measured; and the overlap efficiency the measured
// step shows. A pair's efficiency is what its measured time gives (overlap_efficiency_from,
// profiles/overlap.h) beside the median times of the same stage's same ops run alone in the
// step (not in a pair); the step's is the median over the pairs whose two ops were also run
// alone, `measured_from` of them.
struct PairsDiff {
  int pairs = 0;
  double predicted_median_us = 0, measured_median_us = 0;
  double planned_efficiency = 0;    // the plan's (meta.overlap)
  double measured_efficiency = -1;  // -1: no pair's two ops were also run alone
  int measured_from = 0;
};

struct TraceDiff {
  std::vector<OpDiff> ops;  // every node, worst |error_us| first
  PairsDiff pairs;          // pairs == 0: the plan has none
  std::vector<DeviceDiff> devices;
  double predicted_makespan_us = 0, measured_makespan_us = 0;
  double makespan_error_pct = 0;
  double compute_mape_pct = 0;    // mean |error_pct| over compute ops
  std::vector<StallDiff> stalls;  // measured stalls of at least kMinListedStallUs, longest first
  static constexpr double kMinListedStallUs = 100;
  // A launch latency and the clocks' agreement: an op seeming to start this much before its
  // thread queued it is taken as it is.
  static constexpr double kHostClockSlackUs = 50;
};

TraceDiff diff_trace(const TaskGraph& plan, const SimResult& predicted, const SimResult& measured);
// `top` worst ops (all when top < 0).
nlohmann::json diff_to_json(const TraceDiff& diff, int top);
std::string format_diff(const TraceDiff& diff, int top);

}  // namespace pipeplan
