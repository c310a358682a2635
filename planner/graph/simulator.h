// Discrete-event simulation of a task graph: in-order streams, compute/communication overlap,
// send/recv rendezvous with per-link latency and bandwidth (transfers on one directed link are
// serialised), and a memory timeline per device.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "planner/graph/taskgraph.h"

namespace pipeplan {

struct NodeTime {
  double start_us = 0;
  double end_us = 0;
};

struct DeviceMetrics {
  double busy_us = 0;  // compute-stream time
  double first_start_us = 0;
  double last_end_us = 0;                                        // of the compute stream
  double span_us = 0;                                            // last_end - first_start
  double bubble_ratio = 0;                                       // (makespan - busy) / makespan
  std::int64_t peak_memory_bytes = 0;                            // static + activations
  std::vector<std::pair<double, std::int64_t>> memory_timeline;  // (time, bytes) after each change
};

struct SimResult {
  std::vector<NodeTime> times;   // by node id
  double makespan_us = 0;        // first op anywhere to last op anywhere
  double max_stage_span_us = 0;  // largest per-device span (steady-state iteration time)
  std::vector<DeviceMetrics> devices;
  double bubble_ratio = 0;       // 1 - Σ busy / (devices · makespan)
  double span_bubble_ratio = 0;  // 1 - Σ busy / (devices · max_stage_span)
  double tokens_per_s = 0;       // tokens per step / makespan
  double mfu = 0;                // PaLM model FLOPs; 0 when the model's FLOPs are unknown
  std::vector<std::int64_t> peak_memory_bytes() const;
};

// Throws Error naming a stuck node if the graph cannot complete (a cycle or a send/recv order
// that deadlocks).
SimResult simulate(const TaskGraph& graph);

// The order in which the event loop takes ready nodes. `automatic` takes them by ready time only
// where it matters (two streams sending over one directed link); `by_ready_time` always does.
// Both give the same result; the second is there for tests that check so.
enum class SimOrder : std::uint8_t { automatic, by_ready_time };
SimResult simulate(const TaskGraph& graph, SimOrder order);

}  // namespace pipeplan
