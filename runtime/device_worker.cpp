#include "runtime/device_worker.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "planner/base/error.h"
#include "profiles/recompute.h"

namespace pipeplan {

namespace {

// The one tensor a recomputing block keeps from its forward to its p1 (profiles/recompute.h): its
// input, under this name in the block's stash.
constexpr std::string_view kCheckpoint = "checkpoint";

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27U)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31U);
}

std::string key_name(StageMb key) {
  return "stage " + std::to_string(key.first) + " micro-batch " + std::to_string(key.second);
}

std::int64_t stash_bytes(const std::vector<Stash>& stashes) {
  std::int64_t total = 0;
  for (const Stash& stash : stashes)
    total += stash.bytes();
  return total;
}

std::int64_t retained_bytes(const std::vector<Retained>& sets) {
  std::int64_t total = 0;
  for (const Retained& set : sets)
    total += set.bytes();
  return total;
}

// A stash in transit: one tensor per entry, named "<layer index>/<entry name>".
Message pack_stash(const std::vector<Stash>& stashes, const std::string& tag) {
  Message message;
  message.tag = tag;
  for (const Stash& stash : stashes) {
    for (const auto& [name, tensor] : stash.entries()) {
      message.tensors.emplace_back(std::to_string(stash.layer_index) + "/" + name, tensor);
    }
  }
  message.bytes = message.payload_bytes();
  return message;
}

std::vector<Stash> unpack_stash(const Message& message, const std::vector<int>& layer_indices) {
  std::vector<Stash> stashes(layer_indices.size());
  for (std::size_t l = 0; l < layer_indices.size(); ++l)
    stashes[l].layer_index = layer_indices[l];
  for (const auto& [name, tensor] : message.tensors) {
    const auto slash = name.find('/');
    int layer = -1;
    if (slash != std::string::npos) {
      const char* first = name.data();
      const auto [end, error] = std::from_chars(first, first + slash, layer);
      if (error != std::errc() || end != first + slash) layer = -1;
    }
    const auto it = std::find(layer_indices.begin(), layer_indices.end(), layer);
    if (it == layer_indices.end()) {
      throw Error("stash message '" + message.tag + "' holds '" + name +
                  "' of a layer outside its stage");
    }
    stashes[static_cast<std::size_t>(it - layer_indices.begin())].put(name.substr(slash + 1),
                                                                      tensor);
  }
  return stashes;
}

// A send/recv without a kind (a plan the validator refuses, run with validation off) is an
// error, not a guess from its op or label.
[[noreturn]] void no_payload_kind(const Node& node) {
  throw Error("send/recv '" + node_label(node) + "' on device " + std::to_string(node.device) +
              " has no transfer kind (field 'transfer' is none)");
}

// Activation or input gradient: the payloads of the pipeline's send/recv streams.
bool carries_activation(const Node& node) {
  if (node.transfer == Transfer::none) no_payload_kind(node);
  return node.transfer == Transfer::activation;
}

}  // namespace

std::uint64_t batch_seed(std::uint64_t seed, int microbatch) {
  return splitmix64(splitmix64(seed) ^ static_cast<std::uint64_t>(microbatch));
}

DeviceWorker::DeviceWorker(const TaskGraph& plan, int device, std::unique_ptr<Backend> backend,
                           std::uint64_t seed)
    : plan_(plan), device_(device), backend_(std::move(backend)), seed_(seed) {
  const std::vector<LayerKind> kinds = plan.meta.model.layer_list();
  const Schedule& schedule = plan.schedule;
  for (int stage = 0; stage < schedule.stage_count(); ++stage) {
    if (schedule.stage_device[static_cast<std::size_t>(stage)] != device) continue;
    // With two copies of the model, a stage whose other copy lies on another device also keeps
    // a buffer for that copy's weight gradients (as the plan's static memory counts it).
    const int other = schedule.other_copy(stage);
    const bool receives = schedule.stage_device[static_cast<std::size_t>(other)] != device;
    for (const int index : stage_layers(stage)) {
      LayerParams layer = backend_->init_layer(plan.meta.model,
                                               kinds[static_cast<std::size_t>(index)], index, seed);
      static_bytes_ += layer.param_bytes() + layer.grad_bytes() + backend_->optimizer_bytes(layer);
      if (receives) static_bytes_ += layer.grad_bytes();
      layers_.emplace(index, std::move(layer));
    }
  }
}

std::vector<int> DeviceWorker::stage_layers(int stage) const {
  const StageLayers& range = plan_.meta.stage_layers.at(static_cast<std::size_t>(stage));
  std::vector<int> indices;
  indices.reserve(static_cast<std::size_t>(std::max(range.layer_count, 0)));
  for (int l = 0; l < range.layer_count; ++l)
    indices.push_back(range.first_layer + l);
  return indices;
}

bool DeviceWorker::stage_has_head(int stage) const {
  const std::vector<int> indices = stage_layers(stage);
  return !indices.empty() && layers_.at(indices.back()).kind == LayerKind::head;
}

std::vector<bool> DeviceWorker::recomputing(const std::vector<int>& indices) const {
  std::vector<LayerKind> kinds;
  kinds.reserve(indices.size());
  for (const int index : indices)
    kinds.push_back(layers_.at(index).kind);
  return recomputed_layers(plan_.meta.recompute, kinds);
}

void DeviceWorker::begin_step(Clock::time_point start) {
  const std::lock_guard lock(mutex_);
  start_ = start;
  if (grads_written_.exchange(false)) {
    for (auto& entry : layers_)
      backend_->zero_grads(entry.second);
  }
  activations_.clear();
  input_grads_.clear();
  stashes_.clear();
  retained_.clear();
  held_.clear();
  evicted_bytes_.clear();
  received_grads_.clear();
  losses_.clear();
  loss_tensors_.clear();
  bpipe_ = BpipeBytes{};
  live_bytes_ = static_bytes_;
  peak_bytes_ = static_bytes_;
  memory_timeline_.assign(1, {0.0, static_bytes_});
}

void DeviceWorker::prepare_step() {
  const auto holds = [&](LayerKind kind) {
    return std::any_of(layers_.begin(), layers_.end(),
                       [&](const auto& entry) { return entry.second.kind == kind; });
  };
  const bool head = holds(LayerKind::head);
  if (head && !loss_gradient_.defined()) {
    loss_gradient_ = backend_->upload_loss_gradient(1.0 / plan_.meta.microbatches);
  }
  if (!batches_.empty() || !(head || holds(LayerKind::embedding))) return;
  // Every step trains on the same m batches (batch_seed): made once, before the first step.
  std::map<int, TokenBatch> made;
  for (int mb = 0; mb < plan_.meta.microbatches; ++mb) {
    made.emplace(mb, backend_->synthetic_batch(plan_.meta.mbs, plan_.meta.seq,
                                               plan_.meta.model.vocab, batch_seed(seed_, mb)));
  }
  const std::lock_guard lock(mutex_);
  batches_ = std::move(made);
}

void DeviceWorker::collect_losses() {
  const std::lock_guard lock(mutex_);
  for (const auto& [mb, loss] : loss_tensors_)
    losses_[mb] = backend_->download(loss).at(0);
  loss_tensors_.clear();
}

void DeviceWorker::account(std::int64_t delta) {
  live_bytes_ += delta;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  const double now_us = std::chrono::duration<double, std::micro>(Clock::now() - start_).count();
  memory_timeline_.emplace_back(now_us, live_bytes_);
}

Tensor DeviceWorker::take_tensor(std::map<StageMb, Tensor>& table, StageMb key, const char* what) {
  const std::lock_guard lock(mutex_);
  const auto it = table.find(key);
  if (it == table.end()) {
    throw Error("device " + std::to_string(device_) + " has no " + what + " of " + key_name(key));
  }
  Tensor tensor = std::move(it->second);
  table.erase(it);
  return tensor;
}

void DeviceWorker::run_compute(const Node& node) {
  switch (node.op) {
    case OpType::F:
      forward(node);
      break;
    case OpType::B:
      backward_p1(node, true);
      break;
    case OpType::P1:
      backward_p1(node, false);
      break;
    case OpType::P2:
      backward_p2(node.stage, node.microbatches);
      break;
    case OpType::O:
      add_received_grads();
      if (train_) optimizer_step(adamw_, step_);
      break;
  }
}

void DeviceWorker::forward(const Node& node) {
  const int stage = node.stage;
  const int mb = node.microbatches.front();
  const std::vector<int> indices = stage_layers(stage);
  const bool first = layers_.at(indices.front()).kind == LayerKind::embedding;
  const bool head = stage_has_head(stage);
  TokenBatch batch;
  if (first || head) {
    const std::lock_guard lock(mutex_);
    const auto it = batches_.find(mb);
    if (it == batches_.end()) {
      throw Error("device " + std::to_string(device_) + " has no batch for micro-batch " +
                  std::to_string(mb) + " (outside the plan's " +
                  std::to_string(plan_.meta.microbatches) + ")");
    }
    batch = it->second;
  }
  Tensor x = first ? batch.inputs : take_tensor(activations_, {stage - 1, mb}, "activation");
  const std::vector<bool> rebuilds = recomputing(indices);
  const bool layer_by_layer = std::find(rebuilds.begin(), rebuilds.end(), true) != rebuilds.end();
  std::vector<Stash> stashes;
  for (std::size_t l = 0; l < indices.size(); ++l) {
    ForwardResult result = backend_->forward(layers_.at(indices[l]), x, batch.targets);
    if (layer_by_layer) {
      // The stash exists until a recomputing block trades it for its checkpoint.
      const std::lock_guard lock(mutex_);
      account(result.stash.bytes());
    }
    if (rebuilds[l]) {
      Stash checkpoint;
      checkpoint.layer_index = result.stash.layer_index;
      checkpoint.put(std::string(kCheckpoint), x);
      const std::lock_guard lock(mutex_);
      account(checkpoint.bytes() - result.stash.bytes());
      result.stash = std::move(checkpoint);
    }
    x = std::move(result.output);
    stashes.push_back(std::move(result.stash));
  }
  const std::int64_t bytes = stash_bytes(stashes);
  const std::lock_guard lock(mutex_);
  if (head) {
    loss_tensors_[mb] = std::move(x);  // read back by collect_losses, after the step
  } else {
    activations_[{stage, mb}] = std::move(x);
  }
  stashes_[{stage, mb}] = std::move(stashes);
  if (!layer_by_layer) account(bytes);
}

void DeviceWorker::backward_p1(const Node& node, bool with_p2) {
  const int stage = node.stage;
  const int mb = node.microbatches.front();
  const std::vector<int> indices = stage_layers(stage);
  // The loss is the mean over the step's micro-batches: d(loss)/d(loss of one) = 1/m, uploaded
  // once by prepare_step (read-only here).
  Tensor dy = stage_has_head(stage) ? loss_gradient_
                                    : take_tensor(input_grads_, {stage + 1, mb}, "input gradient");
  const std::vector<bool> rebuilds = recomputing(indices);
  const bool layer_by_layer = std::find(rebuilds.begin(), rebuilds.end(), true) != rebuilds.end();
  std::vector<Stash> stashes;
  {
    const std::lock_guard lock(mutex_);
    const auto it = stashes_.find({stage, mb});
    if (it == stashes_.end()) {
      throw Error("device " + std::to_string(device_) + " has no stash of " +
                  key_name({stage, mb}) + " (evicted and not loaded back?)");
    }
    stashes = std::move(it->second);
    stashes_.erase(it);
    if (!layer_by_layer) account(-stash_bytes(stashes));
  }
  if (with_p2) grads_written_ = true;
  std::vector<Retained> sets(indices.size());
  for (std::size_t l = indices.size(); l-- > 0;) {
    LayerParams& layer = layers_.at(indices[l]);
    Stash stash = std::move(stashes[l]);
    if (rebuilds[l]) {
      // Its forward again, from the checkpoint, just before its p1 (a block takes no targets).
      const std::int64_t checkpoint = stash.bytes();
      stash = backend_->forward(layer, stash.at(kCheckpoint), Tensor()).stash;
      const std::lock_guard lock(mutex_);
      account(stash.bytes());  // made beside the checkpoint, which goes once it is made
      account(-checkpoint);
    }
    const std::int64_t held = stash.bytes();
    BackwardP1Result result = backend_->backward_p1(layer, std::move(stash), dy);
    dy = std::move(result.input_grad);
    sets[l] = std::move(result.retained);
    if (layer_by_layer) {
      const std::lock_guard lock(mutex_);
      account(sets[l].bytes() - held);
    }
    if (with_p2) {  // a fused backward: this layer's weight gradient at once
      const Retained* one[] = {&sets[l]};
      backend_->backward_p2(layer, one);
      if (layer_by_layer) {
        const std::lock_guard lock(mutex_);
        account(-sets[l].bytes());
      }
      sets[l] = Retained();
    }
  }
  const std::lock_guard lock(mutex_);
  if (dy.defined() && stage > plan_.schedule.first_stage_of(mb))
    input_grads_[{stage, mb}] = std::move(dy);
  if (!with_p2) {
    if (!layer_by_layer) account(retained_bytes(sets));
    retained_[{stage, mb}] = std::move(sets);
  }
}

void DeviceWorker::backward_p2(int stage, const std::vector<int>& microbatches) {
  std::vector<std::vector<Retained>> sets;
  {
    const std::lock_guard lock(mutex_);
    for (const int mb : microbatches) {
      const auto it = retained_.find({stage, mb});
      if (it == retained_.end()) {
        throw Error("device " + std::to_string(device_) + " has no retained set of " +
                    key_name({stage, mb}));
      }
      sets.push_back(std::move(it->second));
      retained_.erase(it);
    }
  }
  // One call per layer over all the micro-batches: one concatenated GEMM per weight.
  const std::vector<int> indices = stage_layers(stage);
  grads_written_ = true;
  std::int64_t freed = 0;
  for (std::size_t l = 0; l < indices.size(); ++l) {
    std::vector<const Retained*> per_mb;
    for (const auto& set : sets) {
      per_mb.push_back(&set[l]);
      freed += set[l].bytes();
    }
    backend_->backward_p2(layers_.at(indices[l]), per_mb);
  }
  const std::lock_guard lock(mutex_);
  account(-freed);
}

Message DeviceWorker::take_payload(const Node& node) {
  const StageMb key{node.stage, node.microbatches.front()};
  if (node.transfer == Transfer::evict) {
    const std::lock_guard lock(mutex_);
    const auto it = stashes_.find(key);
    if (it == stashes_.end()) {
      throw Error("device " + std::to_string(device_) + " has no stash of " + key_name(key) +
                  " to evict");
    }
    Message message = pack_stash(it->second, node_label(node));
    stashes_.erase(it);
    evicted_bytes_[key] = message.bytes;
    bpipe_.evicted += message.bytes;
    account(-message.bytes);
    return message;
  }
  if (node.transfer == Transfer::load) {
    const std::lock_guard lock(mutex_);
    const auto it = held_.find(key);
    if (it == held_.end()) {
      throw Error("device " + std::to_string(device_) + " holds no stash of " + key_name(key) +
                  " to load back");
    }
    Message message = std::move(it->second);
    held_.erase(it);
    message.tag = node_label(node);
    bpipe_.returned += message.bytes;
    account(-message.bytes);
    return message;
  }
  Message message;
  message.tag = node_label(node);
  if (node.transfer == Transfer::grads) {  // this stage's weight gradients, as they stand
    for (const int index : stage_layers(node.stage)) {
      for (const Parameter& param : layers_.at(index).params)
        message.tensors.emplace_back(std::to_string(index) + "/" + param.name, param.grad);
    }
    message.bytes = message.payload_bytes();
    return message;
  }
  const bool activation = carries_activation(node);
  message.tensors.emplace_back(activation ? "activation" : "input_grad",
                               take_tensor(activation ? activations_ : input_grads_, key,
                                           activation ? "activation" : "input gradient"));
  message.bytes = message.payload_bytes();
  return message;
}

std::int64_t DeviceWorker::expected_bytes(const Node& node) const {
  const StageMb key{node.stage, node.microbatches.front()};
  if (node.transfer == Transfer::evict) return -1;
  if (node.transfer == Transfer::load) {
    const std::lock_guard lock(mutex_);
    const auto it = evicted_bytes_.find(key);
    return it == evicted_bytes_.end() ? -1 : it->second;
  }
  if (node.transfer == Transfer::none) no_payload_kind(node);
  if (node.transfer == Transfer::grads) {  // the other copy's: the same layers as this one's
    std::int64_t bytes = 0;
    for (const int index : stage_layers(node.stage))
      bytes += layers_.at(index).grad_bytes();
    return bytes;
  }
  const PlanMeta& meta = plan_.meta;
  return std::int64_t{meta.mbs} * meta.seq * meta.model.hidden *
         dtype_bytes(backend_->compute_dtype());
}

void DeviceWorker::store_payload(const Node& node, Message message) {
  const StageMb key{node.stage, node.microbatches.front()};
  if (node.transfer == Transfer::evict) {
    const std::lock_guard lock(mutex_);
    account(message.bytes);
    bpipe_.accepted += message.bytes;
    held_[key] = std::move(message);
    return;
  }
  if (node.transfer == Transfer::load) {
    const std::int64_t bytes = message.bytes;
    std::vector<Stash> stashes = unpack_stash(message, stage_layers(node.stage));
    const std::lock_guard lock(mutex_);
    bpipe_.loaded += bytes;
    account(stash_bytes(stashes));
    stashes_[key] = std::move(stashes);
    return;
  }
  if (node.transfer == Transfer::grads) {  // added in by add_received_grads
    const std::lock_guard lock(mutex_);
    received_grads_.emplace_back(node.stage, std::move(message));
    return;
  }
  if (message.tensors.size() != 1) {
    throw Error("message '" + message.tag + "' holds " + std::to_string(message.tensors.size()) +
                " tensors, expected 1");
  }
  const bool activation = carries_activation(node);
  const std::lock_guard lock(mutex_);
  auto& table = activation ? activations_ : input_grads_;
  table[key] = std::move(message.tensors.front().second);
}

void DeviceWorker::add_received_grads() {
  std::vector<std::pair<int, Message>> received;
  {
    const std::lock_guard lock(mutex_);
    received.swap(received_grads_);
  }
  for (auto& [stage, message] : received) {
    // A payload still in flight (a stream-ordered receive): the additions queue behind it.
    if (message.arrival) message.arrival->order_reader();
    std::size_t next = 0;
    for (const int index : stage_layers(stage)) {
      LayerParams& layer = layers_.at(index);
      std::vector<Tensor> grads;
      for (const Parameter& param : layer.params) {
        const std::string name = std::to_string(index) + "/" + param.name;
        if (next >= message.tensors.size() || message.tensors[next].first != name) {
          throw Error("gradient message '" + message.tag + "' lacks '" + name +
                      "' where it is due");
        }
        grads.push_back(message.tensors[next++].second);
      }
      backend_->add_grads(layer, grads);
    }
    if (next != message.tensors.size()) {
      throw Error("gradient message '" + message.tag + "' holds " +
                  std::to_string(message.tensors.size() - next) + " tensors beyond its stage's");
    }
    grads_written_ = true;
  }
}

void DeviceWorker::optimizer_step(const AdamWConfig& config, int step) {
  for (auto& entry : layers_) {
    backend_->adamw_step(entry.second, config, step);
    backend_->zero_grads(entry.second);
  }
  grads_written_ = false;
}

}  // namespace pipeplan
