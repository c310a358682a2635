// The executor: runs a plan's task graph for real, one training step at a time. Each device is
// a worker (runtime/device_worker.h) with its own Backend; each stream of the plan runs on its
// own thread in its planned order, so a device's compute, send, receive and transfer streams
// overlap. A node starts once the nodes it has data edges from on the same device are done;
// cross-device edges are the Transport's send/recv, matched per link in planned order. Every
// wait has a timeout, and the first failure cancels the step and is what step() throws.
// docs/design/runtime.md describes the mapping, the transport contract and the measured trace.
//
// In a multi-process run (ExecutorOptions::group, one rank per plan device) the executor of rank
// r runs only plan device r's worker and streams; the transport reaches the other ranks. A step
// starts with a barrier (the ranks' clocks start together) and ends with runtime/step_exchange.h:
// rank 0 gets every rank's times, memory and losses and returns the whole step, as one process
// would; a failure anywhere ends the step on every rank with the same AgreedError.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"
#include "runtime/backend.h"
#include "runtime/device_worker.h"
#include "runtime/measured.h"
#include "runtime/node_timer.h"
#include "runtime/process_group.h"
#include "runtime/transport.h"

namespace pipeplan {

using BackendFactory = std::function<std::unique_ptr<Backend>(int device)>;

struct ExecutorOptions {
  std::uint64_t seed = 1;                    // weights (init_layer) and synthetic data (batch_seed)
  std::chrono::milliseconds timeout{60000};  // every wait: on a dependency or a message
  AdamWConfig adamw;
  // Called on the worker thread before every node (fault injection: random delays in ops).
  std::function<void(int node)> before_node;
  // Off only in tests of plan shapes the validator does not know yet.
  bool validate = true;
  // Device-side node times (CUDA events) for asynchronous backends; null: the host clock.
  std::shared_ptr<NodeTimer> node_timer;
  // One process per plan device: this one runs plan device group->rank() (the plan's device
  // count must equal group->size()). Null: this process runs every device.
  std::shared_ptr<ProcessGroup> group;
};

// With ExecutorOptions::group, rank 0 gets the whole step; the other ranks get the loss, the
// micro-batch losses and the step time (the slowest rank's), and `measured` and `bpipe` of their
// own device only.
struct StepResult {
  int step = 0;
  double loss = 0;                        // mean over the micro-batches
  std::vector<double> microbatch_losses;  // by micro-batch
  double step_time_us = 0;                // wall time: task graph and optimizer
  double tokens_per_s = 0;                // tokens of the step / step_time
  // Measured start/end of every node (µs since the step began), per-device busy time, span,
  // peak memory and memory timeline: the same structure the simulator predicts, so
  // perfetto_trace() writes the measured trace and diff lines the two up.
  SimResult measured;
  std::vector<BpipeBytes> bpipe;  // by device
};

// gradients_only: no AdamW, grads kept; AdamW's step count (its bias correction) counts only
// training steps.
enum class StepMode { train, gradients_only };

class Executor {
 public:
  // Validates the plan (Error with the validator's message, before any worker starts), checks
  // that the backends can run its model and stage layers, and initialises every device.
  Executor(TaskGraph plan, const BackendFactory& make_backend, ExecutorOptions options = {},
           std::unique_ptr<Transport> transport = nullptr);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  StepResult step(StepMode mode = StepMode::train);

  const TaskGraph& plan() const { return plan_; }
  int steps_done() const { return steps_; }
  // The device holding `layer_index` (ModelConfig::layer_list() position) and its weights (in a
  // multi-process run: only layers of this rank's device).
  const LayerParams& layer(int layer_index) const;
  // Every copy of the layer this process holds: one, or two with two copies of the model
  // (Schedule::replicas) on two of its devices; the first is layer()'s.
  std::vector<const LayerParams*> layer_copies(int layer_index) const;
  // This process's plan device in a multi-process run; -1 when it runs every device.
  int local_device() const { return local_device_; }
  Transport& transport() { return *transport_; }

 private:
  void run_stream(int stream);
  // `order_inputs`: queue the node's in-flight inputs ahead of it (run_pair does it for both).
  void run_node(DeviceWorker& worker, int id, bool order_inputs = true);
  // An overlapped pair (Node::overlaps_next), both inputs ready: the two ops between the
  // backend's begin_pair and end_pair. `running` names the op under way, for errors.
  void run_pair(DeviceWorker& worker, int first, int second, int& running);
  void order_inputs(int id);
  void wait_for_inputs(int node);
  void mark_done(int node);
  void fail(const std::exception& error, bool consequence = false);
  bool runs(int device) const { return local_device_ < 0 || device == local_device_; }
  // The measured step from every node's times and every device's memory (by device).
  SimResult measure(std::vector<NodeTime> times, std::vector<MeasuredDevice> devices) const;
  std::vector<MeasuredDevice> local_memory() const;
  // A multi-process step's end (runtime/executor_ranks.cpp): the exchange with the other ranks.
  // `host_times`: this rank's aligned host times (by node; empty without a node timer).
  // `error`: this rank's first failure in the step, if any (`consequence`: a Cancelled).
  StepResult finish_ranked_step(int step_number, double step_time_us,
                                std::vector<NodeTime> host_times,
                                const std::optional<std::string>& error, bool consequence);

  struct Sync;
  TaskGraph plan_;
  ExecutorOptions options_;
  std::unique_ptr<Transport> transport_;
  std::vector<std::unique_ptr<DeviceWorker>> workers_;
  std::vector<char> optimizer_node_;  // per device: its plan has an optimizer node (OpType::O)
  // The grads sends (two copies of the model) of this process's devices without an optimizer
  // node, as (device, peer): flushed after the step's graph, before the received gradients are
  // added in.
  std::vector<std::pair<int, int>> grads_flushes_;
  std::vector<std::vector<int>> local_inputs_;  // per node: same-device data-edge sources
  // Per node: a send that a node of its own device waits for (a BPipe eviction, whose memory the
  // op after next reuses): done only once the transport gave its tensors back (flush).
  std::vector<char> flush_after_;
  std::unique_ptr<Sync> sync_;
  // Per recv node this step: its message's arrival (Message::arrival), null once landed. Written
  // by the recv's thread before the node is marked done, read by its readers' threads after.
  std::vector<std::shared_ptr<const Arrival>> arrivals_;
  std::vector<NodeTime> times_;
  DeviceWorker::Clock::time_point start_;
  int steps_ = 0;
  int optimizer_steps_ = 0;  // training steps done: AdamW's t is one more
  int local_device_ = -1;
};

// An estimate of the host memory a CPU run of the plan needs: fp32 weights, gradients and both
// AdamW moments (16 bytes per parameter) of every layer each device holds (both copies of the
// model where the schedule has two, and a gradient buffer for a twin on another device), plus
// the planned activation peaks of every device, doubled for fp32 (the plan counts 2-byte
// activations). Not an upper bound: the CPU backend keeps the attention probabilities, (B, H,
// T, T) per block and micro-batch, which a plan from a flash or recompute profile does not count.
// With `device` >= 0, that plan device's share only (one process per device: what one rank
// holds).
std::int64_t estimate_cpu_host_bytes(const TaskGraph& plan, int device = -1);

}  // namespace pipeplan
