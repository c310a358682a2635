// Node times measured on the device. A GPU backend queues work asynchronously, so the host clock
// around a node measures when its kernels were enqueued, not when they ran: a NodeTimer (CUDA
// events in runtime/cuda/step_events.h) brackets every node on the stream that runs it and
// returns the device times after the step. The executor calls it from every stream thread; an
// implementation must be safe for concurrent calls on different nodes.
#pragma once

#include <chrono>
#include <vector>

#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"

namespace pipeplan {

class NodeTimer {
 public:
  virtual ~NodeTimer() = default;
  // Before any node of the step runs and before the workers queue any work for it (the
  // executor's thread).
  virtual void begin_step(const TaskGraph& plan) = 0;
  // Around node `id` on its stream thread: begin before its work is queued, end after.
  virtual void begin_node(const TaskGraph& plan, int id) = 0;
  virtual void end_node(const TaskGraph& plan, int id) = 0;
  // After every node and the optimizer were queued and the backends synchronised: overwrites
  // `times` (µs since the step began) with the device times of the nodes it measured.
  virtual void end_step(const TaskGraph& plan, std::vector<NodeTime>& times) = 0;
  // Puts `host_times` (µs since `start`, the host's step start, by node) on each device's clock
  // as end_step puts the device times: its zero is when the device's timing began, which comes
  // some time after `start` (recording a start event per device, each in its own context).
  // Without this a host time reads that much later than the device time of the same instant.
  virtual void align_host_times(const TaskGraph& plan, std::chrono::steady_clock::time_point start,
                                std::vector<NodeTime>& host_times) const = 0;
};

}  // namespace pipeplan
