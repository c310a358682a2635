// Shared by the executor tests: tiny-model plans of every schedule family, a hand-built BPipe
// variant, and the single-device unpipelined reference step.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/plan/make_plan.h"
#include "profiles/analytic.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/device_worker.h"
#include "runtime/executor.h"
#include "schedules/family.h"

namespace pipeplan::testing {

constexpr int kDevices = 4;
constexpr int kMicrobatches = 8;
constexpr int kSeq = 16;  // half the preset's 32: the same code paths at half the cost

// The `tiny` preset; chunked families (2 virtual stages per device) get 8 blocks so that every
// virtual stage holds one.
inline ModelConfig tiny_for(const ScheduleFamily& family) {
  ModelConfig model = model_preset("tiny");
  if (family.traits().chunks.preferred > 1) model.layers = 2 * kDevices;
  return model;
}

inline BackendFactory cpu_backends() {
  return [](int) { return std::make_unique<cpu::CpuBackend>(); };
}

// The request of a tiny-model plan on kDevices devices with kMicrobatches micro-batches, all of a
// stage's micro-batches in one p2 call where the mode defers.
// `optimizer_nodes` false: a profile without the optimizer's time, whose plan has no optimizer
// node (the executor then steps, and adds two copies' gradients, after the graph).
// `layers`: the model's blocks, when not tiny_for's.
inline PlanRequest tiny_request(const ScheduleFamily& family, BackwardMode mode,
                                bool optimizer_nodes = true, Attention attention = Attention::flash,
                                int layers = 0) {
  ModelConfig model = tiny_for(family);
  if (layers > 0) model.layers = layers;
  AnalyticOptions analytic;
  analytic.seq = kSeq;
  analytic.attention = attention;
  analytic.max_p2_concat = kMicrobatches;
  PlanRequest request;
  request.profile = analytic_profile(model, find_gpu("h100"), analytic);
  if (!optimizer_nodes) {
    for (auto& [kind, by_mbs] : request.profile.layers) {
      for (auto& [mbs, cost] : by_mbs)
        cost.optimizer_us = 0;
    }
  }
  request.gpu = "h100";
  request.devices = kDevices;
  request.chunks = family.traits().chunks.preferred;
  request.microbatches = kMicrobatches;
  request.schedule = family.name();
  request.backward = mode;
  request.p2_concat = 0;
  return request;
}

// A planner-made plan of tiny_request, or nullopt (with the planner's reason) when the family
// does not take this backward mode.
inline std::optional<TaskGraph> tiny_plan(const ScheduleFamily& family, BackwardMode mode,
                                          std::string* why = nullptr, bool optimizer_nodes = true,
                                          Attention attention = Attention::flash) {
  try {
    return make_plan(tiny_request(family, mode, optimizer_nodes, attention)).graph;
  } catch (const Error& e) {
    if (why != nullptr) *why = e.what();
    return std::nullopt;
  }
}

// BPipe by hand (the planner's BPipe pass is not needed to test the runtime side): every even
// micro-batch's stash of every stage on `evictor` goes to `acceptor` right after its forward
// and comes back before its backward: evict and load pairs on the pair's transfer streams.
// The load waits for the compute op before that backward, so the stash is away meanwhile.
inline TaskGraph with_bpipe_transfers(TaskGraph g, int evictor, int acceptor) {
  const int ev_stream = g.stream(evictor, StreamRole::transfer, acceptor);
  const int acc_stream = g.stream(acceptor, StreamRole::transfer, evictor);
  const int compute = g.stream(evictor, StreamRole::compute);
  std::map<std::pair<int, int>, int> evict_recv;  // (stage, mb) -> acceptor's recv
  auto add_pair = [&](const Node& f, const std::string& label, bool evict) {
    Node send;
    send.kind = NodeKind::send;
    send.op = OpType::F;
    send.transfer = evict ? Transfer::evict : Transfer::load;
    send.stage = f.stage;
    send.microbatches = f.microbatches;
    send.bytes = f.alloc_bytes;
    set_label(send, label);
    send.duration_us = 1;
    send.device = evict ? evictor : acceptor;
    send.stream = evict ? ev_stream : acc_stream;
    send.peer = evict ? acceptor : evictor;
    send.free_bytes = f.alloc_bytes;
    Node recv = send;
    recv.kind = NodeKind::recv;
    recv.device = send.peer;
    recv.stream = evict ? acc_stream : ev_stream;
    recv.peer = send.device;
    recv.free_bytes = 0;
    recv.alloc_bytes = f.alloc_bytes;
    const int s = g.add_node(send);
    const int r = g.add_node(recv);
    g.node(s).match = r;
    g.node(r).match = s;
    g.add_data_edge(s, r);
    return std::pair{s, r};
  };
  std::map<std::pair<int, int>, Node> forwards;
  const auto visit = [&](int id, int before) {
    const Node node = g.node(id);
    const std::pair key{node.stage, node.microbatches.front()};
    if (node.microbatches.front() % 2 != 0) return;
    if (node.op == OpType::F) {
      const auto [s, r] = add_pair(node, "evict " + node_label(node), true);
      g.add_data_edge(id, s);
      evict_recv[key] = r;
      forwards[key] = node;
    } else if ((node.op == OpType::B || node.op == OpType::P1) && forwards.count(key) != 0) {
      const auto [s, r] = add_pair(forwards[key], "load " + node_label(forwards[key]), false);
      g.add_data_edge(evict_recv[key], s);
      if (before >= 0) g.add_data_edge(before, r);
      g.add_data_edge(r, id);
    }
  };
  const std::vector<int> order = g.stream_order(compute);
  for (std::size_t i = 0; i < order.size(); ++i) {
    const int before = i > 0 ? order[i - 1] : -1;  // the compute op before this one (or pair)
    // An overlapped pair starts its two ops together: its backward's load comes first (before
    // the pair), then its forward's eviction (after the pair), in the in-order transfer stream.
    if (g.node(order[i]).overlaps_next && i + 1 < order.size()) {
      visit(order[i + 1], before);
      visit(order[i], before);
      ++i;
    } else {
      visit(order[i], before);
    }
  }
  return g;
}

struct Reference {
  double loss = 0;
  std::map<int, LayerParams> layers;  // by layer index, with the step's gradients
};

// One step on one device, no pipeline: per micro-batch in order, forward through every layer,
// p1 back down (dy of the head = 1/m), p2 of each layer for that micro-batch alone.
inline Reference reference_step(const ModelConfig& model, int microbatches, int mbs, int seq,
                                std::uint64_t seed) {
  cpu::CpuBackend backend;
  Reference ref;
  const std::vector<LayerKind> kinds = model.layer_list();
  for (int l = 0; l < static_cast<int>(kinds.size()); ++l) {
    ref.layers.emplace(l, backend.init_layer(model, kinds[static_cast<std::size_t>(l)], l, seed));
  }
  for (int mb = 0; mb < microbatches; ++mb) {
    const TokenBatch batch = backend.synthetic_batch(mbs, seq, model.vocab, batch_seed(seed, mb));
    std::vector<Stash> stashes;
    Tensor x = batch.inputs;
    for (auto& [index, layer] : ref.layers) {
      ForwardResult result = backend.forward(layer, x, batch.targets);
      x = result.output;
      stashes.push_back(std::move(result.stash));
    }
    ref.loss += backend.download(x)[0] / microbatches;
    Tensor dy = backend.upload(std::vector<double>{1.0 / microbatches}, {1});
    for (int l = static_cast<int>(kinds.size()); l-- > 0;) {
      LayerParams& layer = ref.layers.at(l);
      BackwardP1Result p1 =
          backend.backward_p1(layer, std::move(stashes[static_cast<std::size_t>(l)]), dy);
      dy = p1.input_grad;
      const Retained* sets[] = {&p1.retained};
      backend.backward_p2(layer, sets);
    }
  }
  return ref;
}

// max |a - b| / max |b|: the error relative to the tensor's scale (elementwise relative error is
// meaningless for entries that are zero up to rounding).
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  if (a.size() != b.size()) return 1e300;
  return scale > 0 ? diff / scale : diff;
}

}  // namespace pipeplan::testing
