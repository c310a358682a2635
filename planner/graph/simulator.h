// Discrete-event simulation of a task graph: in-order streams, compute/communication overlap,
// send/recv rendezvous with per-link latency and bandwidth (transfers on one directed link are
// serialised); the step's metrics (a memory timeline per device among them) from its times.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/graph/metrics.h"
#include "planner/graph/taskgraph.h"

namespace pipeplan {

// Node times (by node id) and the step metrics computed from them (planner/graph/metrics.h).
struct SimResult : StepMetrics {
  std::vector<NodeTime> times;
  // A measured step only (runtime/measured.h), else empty: per node, when its host thread began
  // and finished queuing it (µs since the step began on the host clock). Against `times` (the
  // device's), it tells a stall the host caused (the op queued late) from one the GPU did.
  std::vector<NodeTime> host_times;
};

// Throws Error naming a stuck node if the graph cannot complete (a cycle or a send/recv order
// that deadlocks).
SimResult simulate(const TaskGraph& graph);

// The order in which the event loop takes ready nodes. `automatic` takes them by ready time only
// where it matters (two streams sending over one directed link); `by_ready_time` always does.
// Both give the same result; the second is there for tests that check so.
enum class SimOrder : std::uint8_t { automatic, by_ready_time };
SimResult simulate(const TaskGraph& graph, SimOrder order);

// The sustained-load model's H (meta.contention.sustained, profiles/contention.h) at a step's
// start: one per device where the devices are separate GPUs (no curve: each its own clock), one
// for a shared GPU, none without the term. Steps repeat, so these are the loads a step's own end
// leaves; simulate() starts every step there.
std::vector<double> periodic_start_loads(const TaskGraph& graph,
                                         SimOrder order = SimOrder::automatic);
// One step started at `loads` (periodic_start_loads' sizes, else Error); on return `loads` holds
// the loads the step leaves at its end (its last node's end).
SimResult simulate_from(const TaskGraph& graph, std::vector<double>& loads,
                        SimOrder order = SimOrder::automatic);

}  // namespace pipeplan
