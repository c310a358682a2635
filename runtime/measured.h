// A measured step in the simulator's result structure (planner/simulator.h), so the one trace
// writer (planner/trace.h) draws it and `pipeplan diff` can set it beside the prediction.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "planner/simulator.h"
#include "planner/taskgraph.h"

namespace pipeplan {

struct MeasuredDevice {
  std::int64_t peak_bytes = 0;
  std::vector<std::pair<double, std::int64_t>> memory_timeline;  // (µs since step start, bytes)
};

// Metrics as simulate() defines them, from measured node times: makespan, per-device busy
// (compute-stream) time, span and bubble, tokens/s over the makespan. MFU stays 0 (no peak
// FLOP/s is known for the host).
SimResult measured_result(const TaskGraph& plan, std::vector<NodeTime> times,
                          std::vector<MeasuredDevice> devices);

}  // namespace pipeplan
