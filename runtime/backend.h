// What the pipeline executor needs from a device to run one stage's layers with 2-stage
// backpropagation (Rae, Richings, Lee, arXiv 2405.18047): forward (F), backward_p1 (input
// gradient, needed at once by the previous stage) and backward_p2 (weight gradient, deferred and
// concatenated over k micro-batches into one GEMM per weight). The CPU reference (runtime/cpu)
// and a CUDA backend implement the same interface; the executor does not know which it drives.
//
// Memory is explicit: everything a layer keeps from F until p1 lives in a `Stash`, everything it
// keeps from p1 until p2 (X and dY of its parameterised ops) in a `Retained`, and both count
// their bytes, so a run can report the same quantities the planner predicts (LayerCost's
// stash_bytes and retained_bytes). See docs/design/runtime-layers.md for the per-layer contents.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "profiles/model.h"

namespace pipeplan {

enum class DType { f32, f64, bf16, i32 };  // f64: the CPU backend's gradient-check mode
enum class Device { cpu, cuda };

inline std::int64_t dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return 8;
    case DType::bf16:
      return 2;
    case DType::f32:
    case DType::i32:
      return 4;
  }
  return 0;
}

inline std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
  }
  return "?";
}

// The dtype whose elements are stored as T (for typed access to a tensor's storage).
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::i32;
}

using Shape = std::vector<std::int64_t>;

inline std::int64_t shape_numel(const Shape& shape) {
  std::int64_t numel = 1;
  for (const std::int64_t extent : shape)
    numel *= extent;
  return numel;
}

inline std::string shape_string(const Shape& shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  }
  return text + ")";
}

// A handle to a dense row-major tensor in one backend's memory. Copies share the storage (as a
// shared_ptr does); the storage is freed by its deleter (free, cudaFree, ...) when the last
// handle goes. Tensors handed to a backend call are treated as immutable from then on: a backend
// may keep them (e.g. dY in a Retained) without copying.
class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<void> storage, Shape shape, DType dtype, Device device)
      : storage_(std::move(storage)), shape_(std::move(shape)), dtype_(dtype), device_(device) {}

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  std::int64_t numel() const { return shape_numel(shape_); }
  std::int64_t bytes() const { return numel() * dtype_bytes(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  // Address in the owning device's memory (a device pointer for a GPU backend).
  void* data() const { return storage_.get(); }

  template <typename T>
  T* data_as() const {
    if (dtype_of<T>() != dtype_) {
      throw Error("tensor " + shape_string(shape_) + " holds " + std::string(to_string(dtype_)) +
                  ", accessed as " + std::string(to_string(dtype_of<T>())));
    }
    return static_cast<T*>(storage_.get());
  }

 private:
  std::shared_ptr<void> storage_;
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
};

// Named tensors that one layer keeps for one micro-batch between two of its passes. Bytes count
// each distinct storage once, so a tensor kept under two names is not counted twice.
class TensorSet {
 public:
  int layer_index = -1;  // the layer that made it; checked by the pass that consumes it

  void put(std::string name, Tensor tensor) {
    if (contains(name)) throw Error("tensor set already holds '" + name + "'");
    entries_.emplace_back(std::move(name), std::move(tensor));
  }
  bool contains(std::string_view name) const { return find(name) != entries_.end(); }
  const Tensor& at(std::string_view name) const {
    const auto it = find(name);
    if (it == entries_.end()) throw Error("tensor set lacks '" + std::string(name) + "'");
    return it->second;
  }
  // Removes and returns the tensor (moving it on from a stash to a retained set).
  Tensor take(std::string_view name) {
    const auto it = find(name);
    if (it == entries_.end()) throw Error("tensor set lacks '" + std::string(name) + "'");
    Tensor tensor = std::move(it->second);
    entries_.erase(it);
    return tensor;
  }
  const std::vector<std::pair<std::string, Tensor>>& entries() const { return entries_; }
  std::int64_t bytes() const {
    std::vector<const void*> seen;
    std::int64_t total = 0;
    for (const auto& [name, tensor] : entries_) {
      if (std::find(seen.begin(), seen.end(), tensor.data()) != seen.end()) continue;
      seen.push_back(tensor.data());
      total += tensor.bytes();
    }
    return total;
  }

 private:
  using Entries = std::vector<std::pair<std::string, Tensor>>;
  Entries::const_iterator find(std::string_view name) const {
    return std::find_if(entries_.begin(), entries_.end(),
                        [&](const auto& entry) { return entry.first == name; });
  }
  Entries::iterator find(std::string_view name) {
    return std::find_if(entries_.begin(), entries_.end(),
                        [&](const auto& entry) { return entry.first == name; });
  }
  Entries entries_;
};

// Made by forward, consumed by backward_p1 (Zero Bubble's "activation memory needed" by B).
struct Stash : TensorSet {};
// Made by backward_p1, consumed by backward_p2: X and dY of the layer's parameterised ops.
struct Retained : TensorSet {};

// One weight with its fp32 gradient accumulator and AdamW moments (all in the compute dtype).
struct Parameter {
  std::string name;  // e.g. "attn.wqkv"
  Tensor weight;
  Tensor grad;  // accumulated by backward_p2, cleared by zero_grads
  Tensor adam_m;
  Tensor adam_v;
  bool weight_decay = true;  // false for norm gains
};

// The weights of one pipeline layer (embedding, one transformer block, or the head).
struct LayerParams {
  LayerKind kind = LayerKind::block;
  int layer_index = 0;  // position in ModelConfig::layer_list(); seeds the init
  ModelConfig model;
  std::vector<Parameter> params;

  const Parameter& at(std::string_view name) const {
    for (const Parameter& param : params) {
      if (param.name == name) return param;
    }
    throw Error("layer " + std::to_string(layer_index) + " has no parameter '" + std::string(name) +
                "'");
  }
  Parameter& at(std::string_view name) {
    return const_cast<Parameter&>(std::as_const(*this).at(name));
  }
  std::int64_t param_bytes() const {
    std::int64_t total = 0;
    for (const Parameter& param : params)
      total += param.weight.bytes();
    return total;
  }
  std::int64_t grad_bytes() const {
    std::int64_t total = 0;
    for (const Parameter& param : params)
      total += param.grad.bytes();
    return total;
  }
  std::int64_t optimizer_bytes() const {
    std::int64_t total = 0;
    for (const Parameter& param : params)
      total += param.adam_m.bytes() + param.adam_v.bytes();
    return total;
  }
};

// Throws Error naming the layer and parameter unless `grads` has one tensor per parameter of
// `layer`, each of its gradient's shape and dtype and in this backend's memory (`device`).
inline void check_grads_match(const LayerParams& layer, std::span<const Tensor> grads,
                              Device device) {
  if (grads.size() != layer.params.size()) {
    throw Error("layer " + std::to_string(layer.layer_index) + ": " + std::to_string(grads.size()) +
                " gradients for " + std::to_string(layer.params.size()) + " parameters");
  }
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const Tensor& mine = layer.params[i].grad;
    if (grads[i].shape() != mine.shape() || grads[i].dtype() != mine.dtype() ||
        grads[i].device() != device) {
      throw Error("layer " + std::to_string(layer.layer_index) + " parameter '" +
                  layer.params[i].name + "': a gradient of " + shape_string(grads[i].shape()) +
                  " " + std::string(to_string(grads[i].dtype())) + " to add to one of " +
                  shape_string(mine.shape()) + " " + std::string(to_string(mine.dtype())));
    }
  }
}

struct TokenBatch {
  Tensor inputs;   // (B, T) i32
  Tensor targets;  // (B, T) i32: the next token of each input
};

struct AdamWConfig {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // decoupled (Loshchilov & Hutter); only for weight_decay params
};

struct ForwardResult {
  Tensor output;  // (B, T, C); the head's is the loss, shape (1)
  Stash stash;
};

struct BackwardP1Result {
  Tensor input_grad;  // (B, T, C); undefined for the embedding (its input is tokens)
  Retained retained;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // e.g. "cpu-f32"
  virtual DType compute_dtype() const = 0;

  // Host transfers (tests, loss read-back). upload converts to the compute dtype.
  virtual Tensor upload(std::span<const double> values, const Shape& shape) = 0;
  virtual Tensor upload_tokens(std::span<const std::int32_t> tokens, const Shape& shape) = 0;
  // The head's dy for backward_p1: one element holding `value` in at least f32, not the compute
  // dtype (bf16 would round a mean's 1/m, e.g. 1/3 to 0.33398, scaling every gradient by +0.2 %).
  virtual Tensor upload_loss_gradient(double value) = 0;
  virtual std::vector<double> download(const Tensor& tensor) = 0;
  virtual std::vector<std::int32_t> download_tokens(const Tensor& tensor) = 0;

  // Deterministic: the same (model, kind, layer_index, seed) gives the same bytes on every call.
  // Throws Error for a model the backend cannot run (e.g. GELU MLP, LayerNorm, tied embeddings).
  virtual LayerParams init_layer(const ModelConfig& model, LayerKind kind, int layer_index,
                                 std::uint64_t seed) = 0;
  // Uniform random tokens in [0, vocab); targets are the inputs shifted by one.
  virtual TokenBatch synthetic_batch(int batch, int seq, int vocab, std::uint64_t seed) = 0;

  // embedding: input = tokens (B, T) i32               -> output (B, T, C)
  // block:     input (B, T, C)                         -> output (B, T, C)
  // head:      input (B, T, C), targets (B, T) i32     -> output = loss (1), mean over B·T
  // `targets` is ignored (may be undefined) except by the head.
  virtual ForwardResult forward(const LayerParams& layer, const Tensor& input,
                                const Tensor& targets) = 0;
  // Consumes the stash. dy: gradient of the forward output, (B, T, C); for the head (1) holding
  // d(total loss)/d(this micro-batch's loss), e.g. 1/m for a mean over m micro-batches.
  virtual BackwardP1Result backward_p1(const LayerParams& layer, Stash stash, const Tensor& dy) = 0;
  // Adds the weight gradients of all the given micro-batches into the layer's grads with one
  // concatenated GEMM per weight: dW += [dY_1; ...; dY_k]^T · [X_1; ...; X_k].
  virtual void backward_p2(LayerParams& layer, std::span<const Retained* const> retained) = 0;
  virtual void zero_grads(LayerParams& layer) = 0;
  // Adds another copy of the layer's weight gradients into its own: `grads` holds one tensor per
  // parameter, in the layer's order, each of its parameter's gradient shape and dtype (checked by
  // check_grads_match). The two copies of a stage in a bidirectional pipeline (DualPipe) sum
  // their gradients this way before the optimizer step.
  virtual void add_grads(LayerParams& layer, std::span<const Tensor> grads) = 0;
  // step counts from 1 (bias correction).
  virtual void adamw_step(LayerParams& layer, const AdamWConfig& config, int step) = 0;
  // Waits for queued work (a no-op where every call is synchronous).
  virtual void synchronize() {}
  // An overlapped pair (Node::overlaps_next: a forward beside another micro-batch's backward).
  // The executor, on the thread that runs both ops, calls begin_pair() once the inputs of both
  // are ready and before the first op is queued, begin_second() between the two ops, and
  // end_pair() after the second (also when either failed). An asynchronous backend may then run
  // the second op beside the first (CUDA: on a side stream of the stage, forked at begin_pair and
  // joined at end_pair); by default the two run one after the other, as they are called.
  virtual void begin_pair() {}
  virtual void begin_second() {}
  virtual void end_pair() {}
  // The optimizer state this backend keeps for `layer`, in bytes: the AdamW moments, plus
  // whatever else it holds beside them (the CUDA backend's fp32 master weights). A stage's static
  // memory is parameters + gradients + this, as the planner counts it (profiles/partition.cpp).
  virtual std::int64_t optimizer_bytes(const LayerParams& layer) const {
    return layer.optimizer_bytes();
  }
};

}  // namespace pipeplan
