// The state of one device during a step and the work of each task-graph node on it: the layers
// of the device's virtual stages (meta.stage_layers, indices into ModelConfig::layer_list()),
// the activations, gradients, stashes and retained sets in flight, the BPipe stashes it holds
// for a peer, and a live-memory account. The executor's stream threads call in; the maps are
// guarded by one mutex, held only around map access, never across a layer call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "planner/graph/taskgraph.h"
#include "runtime/backend.h"
#include "runtime/transport.h"

namespace pipeplan {

// (virtual stage, micro-batch)
using StageMb = std::pair<int, int>;

// The synthetic batch seed of micro-batch `microbatch` (splitmix64 of both). Every step trains on
// the same m micro-batches, so a working run overfits them and the loss falls.
std::uint64_t batch_seed(std::uint64_t seed, int microbatch);

// BPipe stash traffic of one device in one step (bytes).
struct BpipeBytes {
  std::int64_t evicted = 0;   // stashes this device sent away (evictor)
  std::int64_t accepted = 0;  // stashes of a peer it received and held (acceptor)
  std::int64_t returned = 0;  // held stashes it sent back
  std::int64_t loaded = 0;    // own stashes it received back
};

class DeviceWorker {
 public:
  using Clock = std::chrono::steady_clock;

  // Initialises the layers of every stage on `device` from `seed` (Backend::init_layer).
  DeviceWorker(const TaskGraph& plan, int device, std::unique_ptr<Backend> backend,
               std::uint64_t seed);

  // Before the step's clock starts: uploads the step's synthetic batches where the device holds
  // the embedding or the head, and the head's dy = 1/m, so no pass waits on a host-to-device
  // copy (an asynchronous backend's upload synchronises its stream). Once: every step reuses them.
  void prepare_step();
  // Zeroes the gradients where a weight-gradient pass wrote them since they were last zeroed (the
  // first step, after a gradients-only or failed step; after a training step the optimizer has
  // zeroed them, so no work is queued here), drops anything left from a failed step, restarts
  // the memory timeline.
  void begin_step(Clock::time_point start);
  // Reads the head's per-micro-batch losses back (kept on the device during the step, so no
  // forward waits for its GPU work to finish); call once the step's work is done.
  void collect_losses();
  void run_compute(const Node& node);
  // Takes the payload of a send node out of this device (its memory leaves with it).
  Message take_payload(const Node& node);
  // Bytes the receiver knows to expect for a recv node; -1 when only the declared size is known.
  std::int64_t expected_bytes(const Node& node) const;
  void store_payload(const Node& node, Message message);
  void optimizer_step(const AdamWConfig& config, int step);
  // Adds the weight gradients received from the devices holding the other copy of this device's
  // stages (grads messages, two copies of the model) into its own; a no-op when none came. The
  // optimizer node does it first; without one, the executor calls it after the step's graph.
  void add_received_grads();
  // What the plan's optimizer node (OpType::O) does this step: AdamW with `config` at `step`
  // and the gradients zeroed (optimizer_step) when `train`, nothing when only the gradients
  // are wanted. Set before the step's threads start.
  void set_optimizer_node(bool train, const AdamWConfig& config, int step) {
    train_ = train;
    adamw_ = config;
    step_ = step;
  }

  int device() const { return device_; }
  Backend& backend() { return *backend_; }
  const std::map<int, double>& losses() const { return losses_; }  // by micro-batch
  const std::map<int, LayerParams>& layers() const { return layers_; }
  std::int64_t static_bytes() const { return static_bytes_; }
  std::int64_t peak_bytes() const { return peak_bytes_; }
  const BpipeBytes& bpipe_bytes() const { return bpipe_; }
  const std::vector<std::pair<double, std::int64_t>>& memory_timeline() const {
    return memory_timeline_;
  }

 private:
  bool train_ = false;  // set_optimizer_node
  AdamWConfig adamw_;
  int step_ = 0;
  void forward(const Node& node);
  void backward_p1(const Node& node, bool with_p2);
  void backward_p2(int stage, const std::vector<int>& microbatches);
  std::vector<int> stage_layers(int stage) const;
  bool stage_has_head(int stage) const;
  // Which of a stage's layers (its stage_layers) recompute under the plan's meta.recompute
  // (recomputed_layers, the rule the planner's stage costs follow).
  std::vector<bool> recomputing(const std::vector<int>& indices) const;
  Tensor take_tensor(std::map<StageMb, Tensor>& table, StageMb key, const char* what);
  void account(std::int64_t delta);  // caller holds mutex_

  const TaskGraph& plan_;
  int device_;
  std::unique_ptr<Backend> backend_;
  std::uint64_t seed_;
  Clock::time_point start_;
  std::map<int, LayerParams> layers_;  // by layer index
  // Set before any weight-gradient pass writes the gradients, cleared where they are zeroed.
  std::atomic<bool> grads_written_{true};  // unknown at first: zeroed before the first step

  mutable std::mutex mutex_;
  std::map<StageMb, Tensor> activations_;                // output of stage s, input of s + 1
  std::map<StageMb, Tensor> input_grads_;                // dX of stage s, dY of s - 1
  std::map<StageMb, std::vector<Stash>> stashes_;        // one per layer of the stage
  std::map<StageMb, std::vector<Retained>> retained_;    // one per layer of the stage
  std::map<StageMb, Message> held_;                      // BPipe: a peer's stash, in transit form
  std::map<StageMb, std::int64_t> evicted_bytes_;        // BPipe: what must come back
  std::vector<std::pair<int, Message>> received_grads_;  // by stage: the other copy's, not added
  std::map<int, double> losses_;
  std::map<int, Tensor> loss_tensors_;  // the head's losses until collect_losses
  std::map<int, TokenBatch> batches_;   // by micro-batch, where a stage takes tokens
  Tensor loss_gradient_;                // the head's dy = 1/m, uploaded once by prepare_step
  std::int64_t static_bytes_ = 0;
  std::int64_t live_bytes_ = 0;
  std::int64_t peak_bytes_ = 0;
  BpipeBytes bpipe_;
  std::vector<std::pair<double, std::int64_t>> memory_timeline_;
};

}  // namespace pipeplan
