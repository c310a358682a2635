#include "planner/graph/taskgraph.h"

#include <algorithm>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <utility>

#include <boost/iterator/transform_iterator.hpp>

#include "planner/base/concurrent.h"
#include "planner/base/error.h"
#include "profiles/link.h"

namespace pipeplan {

bool PlanMeta::memory_limited() const {
  return std::any_of(memory_limit_bytes.begin(), memory_limit_bytes.end(),
                     [](double limit) { return limit > 0; });
}

std::string_view to_string(NodeKind kind) {
  switch (kind) {
    case NodeKind::compute:
      return "compute";
    case NodeKind::send:
      return "send";
    case NodeKind::recv:
      return "recv";
  }
  return "?";
}

std::string_view to_string(StreamRole role) {
  switch (role) {
    case StreamRole::compute:
      return "compute";
    case StreamRole::send:
      return "send";
    case StreamRole::recv:
      return "recv";
    case StreamRole::transfer:
      return "transfer";
  }
  return "?";
}

std::string_view to_string(Transfer transfer) {
  switch (transfer) {
    case Transfer::none:
      return "none";
    case Transfer::activation:
      return "activation";
    case Transfer::gradient:
      return "gradient";
    case Transfer::evict:
      return "evict";
    case Transfer::load:
      return "load";
    case Transfer::grads:
      return "grads";
  }
  return "?";
}

std::string Stream::name() const {
  switch (role) {
    case StreamRole::compute:
      return "compute";
    case StreamRole::send:
      return "send>" + std::to_string(peer);
    case StreamRole::recv:
      return "recv<" + std::to_string(peer);
    case StreamRole::transfer:
      return "transfer:" + std::to_string(peer);
  }
  return "?";
}

int TaskGraph::stream(int device, StreamRole role, int peer) {
  const std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(device)) << 32) |
                            (static_cast<std::uint64_t>(role) << 24) |
                            static_cast<std::uint64_t>(static_cast<std::uint32_t>(peer + 1));
  const auto [it, inserted] = stream_index_.try_emplace(key, static_cast<int>(streams_.size()));
  if (inserted) {
    streams_.push_back(Stream{device, role, peer});
    stream_order_.emplace_back();
  }
  return it->second;
}

int TaskGraph::add_node(const Node& node) {
  return add_node(Node(node));
}

int TaskGraph::add_node(Node&& node) {
  const auto stream_index = static_cast<std::size_t>(node.stream);
  const int id = add_node_unordered(std::move(node));
  auto& order = stream_order_[stream_index];
  if (!order.empty()) add_edge(order.back(), id, EdgeKind::order);
  order.push_back(id);
  return id;
}

void TaskGraph::add_data_edge(int from, int to) {
  add_edge(from, to, EdgeKind::data);
}

std::pair<int, int> TaskGraph::add_message(Node&& send, Node&& recv) {
  const int s = add_node(std::move(send));
  const int r = add_node(std::move(recv));
  nodes_[static_cast<std::size_t>(s)].match = r;
  nodes_[static_cast<std::size_t>(r)].match = s;
  add_edge(s, r, EdgeKind::data);
  return {s, r};
}

void TaskGraph::add_edge(int from, int to, EdgeKind kind) {
  if (from < 0 || to < 0 || from >= node_count() || to >= node_count()) {
    throw Error("task graph: edge " + std::to_string(from) + " -> " + std::to_string(to) +
                " names an unknown node");
  }
  edges_.push_back({from, to, kind});
  changed();
}

void TaskGraph::reserve(std::size_t nodes, std::size_t edges) {
  nodes_.reserve(nodes);
  edges_.reserve(edges);
}

int TaskGraph::add_node_unordered(const Node& node) {
  return add_node_unordered(Node(node));
}

int TaskGraph::add_node_unordered(Node&& node) {
  if (node.stream < 0 || node.stream >= static_cast<int>(streams_.size())) {
    throw Error("task graph: node '" + node_label(node) + "' refers to unknown stream " +
                std::to_string(node.stream));
  }
  nodes_.push_back(std::move(node));
  changed();
  return static_cast<int>(nodes_.size() - 1);
}

void TaskGraph::set_stream_order(int stream_index, std::vector<int> order) {
  auto& current = stream_order_.at(static_cast<std::size_t>(stream_index));
  if (!current.empty()) {
    // Order edges join consecutive nodes of one stream, and a node sits in one stream.
    std::vector<char> in_stream(nodes_.size(), 0);
    for (const int id : current)
      in_stream[static_cast<std::size_t>(id)] = 1;
    std::erase_if(edges_, [&](const EdgeRecord& e) {
      return e.kind == EdgeKind::order && in_stream[static_cast<std::size_t>(e.from)] &&
             in_stream[static_cast<std::size_t>(e.to)];
    });
  }
  current = std::move(order);
  for (std::size_t i = 1; i < current.size(); ++i) {
    add_edge(current[i - 1], current[i], EdgeKind::order);
  }
  changed();
}

const TaskGraph::Graph& TaskGraph::graph() const {
  const std::lock_guard<std::mutex> guard(*cache_.lock);
  if (!cache_.graph) {
    // Read straight from the edge records (no temporary pair and kind arrays: on a 48k-node plan
    // they were 2 MB allocated, first-touched and freed per build).
    const auto endpoints = [](const EdgeRecord& e) {
      return std::pair<std::size_t, std::size_t>(static_cast<std::size_t>(e.from),
                                                 static_cast<std::size_t>(e.to));
    };
    const auto kind = [](const EdgeRecord& e) { return e.kind; };
    cache_.graph = std::make_shared<const Graph>(
        boost::edges_are_unsorted_multi_pass,
        boost::make_transform_iterator(edges_.begin(), endpoints),
        boost::make_transform_iterator(edges_.end(), endpoints),
        boost::make_transform_iterator(edges_.begin(), kind), nodes_.size());
  }
  return *cache_.graph;
}

std::vector<std::vector<std::pair<int, EdgeKind>>> predecessors(const TaskGraph& graph) {
  std::vector<std::vector<std::pair<int, EdgeKind>>> preds(
      static_cast<std::size_t>(graph.node_count()));
  const auto& g = graph.graph();
  for (auto [it, end] = boost::edges(g); it != end; ++it) {
    preds[boost::target(*it, g)].emplace_back(static_cast<int>(boost::source(*it, g)), g[*it]);
  }
  return preds;
}

namespace {

// The part of a label that its transfer kind spells: "evict " or "load " for a stash move,
// "grads " for a stage's weight gradients.
Transfer label_prefix(const Node& n) {
  return n.kind != NodeKind::compute && (is_stash_move(n.transfer) || n.transfer == Transfer::grads)
             ? n.transfer
             : Transfer::none;
}

}  // namespace

std::string node_label(const Node& node) {
  if (const std::string* text = node.custom_label.get()) return *text;
  std::string out;
  if (const Transfer prefix = label_prefix(node); prefix != Transfer::none) {
    out = to_string(prefix);
    out += ' ';
  }
  append_action(out, node.op, node.stage, node.microbatches);
  return out;
}

void set_label(Node& node, std::string label) {
  node.custom_label.reset();
  if (node_label(node) != label) node.custom_label.set(std::move(label));
}

bool same_label(const Node& a, const Node& b) {
  if (a.custom_label.get() != nullptr || b.custom_label.get() != nullptr) {
    return node_label(a) == node_label(b);
  }
  // An action's spelling is one-to-one (parse_action reads it back).
  return a.op == b.op && a.stage == b.stage && a.microbatches == b.microbatches &&
         label_prefix(a) == label_prefix(b);
}

std::string TaskGraph::node_name(int id) const {
  const Node& n = node(id);
  std::string where = "device " + std::to_string(n.device);
  if (n.stream >= 0 && n.stream < static_cast<int>(streams_.size())) {
    where += " " + streams_[static_cast<std::size_t>(n.stream)].name();
  }
  std::string what = node_label(n);
  if (n.kind != NodeKind::compute) what = std::string(to_string(n.kind)) + " " + what;
  return "node " + std::to_string(id) + " (" + what + " on " + where + ")";
}

// Lowering's access to the graph it builds: nodes made in place at the end of their stream (no
// Node temporaries moved in), edges appended without the public checks (every id passed is one
// just made, and no Boost.Graph view exists yet to drop). Node references are valid until the
// next node is added.
class GraphBuilder {
 public:
  explicit GraphBuilder(TaskGraph& graph) : g_(graph) {}
  // A default node on `stream`, appended to its order as add_node does.
  int append(int stream) {
    const int id = static_cast<int>(g_.nodes_.size());
    g_.nodes_.emplace_back().stream = stream;
    place(stream, id);
    return id;
  }
  // A copy of node `of` on `stream`, appended to its order.
  int append_copy(int of, int stream) {
    const int id = static_cast<int>(g_.nodes_.size());
    g_.nodes_.push_back(g_.nodes_[static_cast<std::size_t>(of)]);  // safe if it reallocates
    g_.nodes_.back().stream = stream;
    place(stream, id);
    return id;
  }
  Node& node(int id) { return g_.nodes_[static_cast<std::size_t>(id)]; }
  void edge(int from, int to, EdgeKind kind) { g_.edges_.push_back({from, to, kind}); }
  void reserve_order(int stream, std::size_t nodes) {
    g_.stream_order_[static_cast<std::size_t>(stream)].reserve(nodes);
  }

 private:
  void place(int stream, int id) {
    auto& order = g_.stream_order_[static_cast<std::size_t>(stream)];
    if (!order.empty()) edge(order.back(), id, EdgeKind::order);
    order.push_back(id);
  }
  TaskGraph& g_;
};

namespace {

// Node ids of the compute ops, by (stage, micro-batch).
struct ComputeIndex {
  std::vector<std::vector<int>> forward;   // [stage][mb]
  std::vector<std::vector<int>> backward;  // B or P1
  std::vector<std::vector<int>> p2;
  ComputeIndex(int stages, int microbatches)
      : forward(static_cast<std::size_t>(stages),
                std::vector<int>(static_cast<std::size_t>(microbatches), -1)),
        backward(forward),
        p2(forward) {}
  static int& at(std::vector<std::vector<int>>& table, int stage, int mb) {
    return table[static_cast<std::size_t>(stage)][static_cast<std::size_t>(mb)];
  }
};

void fill_compute(Node& n, const Action& action, const StageCost& cost, int device) {
  n.work_bytes = op_work_bytes(cost, action.op, static_cast<int>(action.microbatches.size()));
  n.kind = NodeKind::compute;
  n.op = action.op;
  n.overlaps_next = action.overlaps_next;
  n.device = device;
  n.stage = action.stage;
  n.microbatches = action.microbatches;
  const int k = static_cast<int>(action.microbatches.size());
  switch (action.op) {
    case OpType::F:
      n.duration_us = cost.forward_us;
      break;
    case OpType::B:
      n.duration_us = cost.p1_us + cost.p2_us;
      break;
    case OpType::P1:
      n.duration_us = cost.p1_us;
      break;
    case OpType::P2:
      n.duration_us = cost.p2_time_us(k);
      break;
    case OpType::O:  // appended by lowering itself, never from an action
      throw InternalError("lower: an optimizer step in the schedule");
  }
  const OpMemory memory = op_memory(cost, action.op, k);
  n.alloc_bytes = memory.alloc;
  n.free_bytes = memory.release;
}

}  // namespace

std::int64_t op_work_bytes(const StageCost& cost, OpType op, int k) {
  switch (op) {
    case OpType::F:
      return cost.forward_work_bytes;
    case OpType::B:
      return cost.fused_work_bytes;
    case OpType::P1:
      return cost.p1_work_bytes;
    case OpType::P2:
      return cost.p2_work(k);
    case OpType::O:
      return 0;
  }
  return 0;
}

OpMemory op_memory(const StageCost& cost, OpType op, int k) {
  OpMemory out;
  switch (op) {
    case OpType::F:
      out.alloc = cost.stash_bytes;
      break;
    case OpType::B:
      out.release = cost.stash_bytes;
      break;
    case OpType::P1:
      out.alloc = std::max<std::int64_t>(cost.retained_bytes - cost.stash_bytes, 0);
      out.release = std::max<std::int64_t>(cost.stash_bytes - cost.retained_bytes, 0);
      break;
    case OpType::P2:
      out.release = static_cast<std::int64_t>(k) * cost.retained_bytes;
      break;
    case OpType::O:
      return out;
  }
  out.work = op_work_bytes(cost, op, k);
  return out;
}

namespace {

void check_bounds(const Schedule& schedule) {
  const int stages = schedule.stage_count();
  if (static_cast<int>(schedule.per_device.size()) != schedule.devices) {
    throw Error("lower: schedule lists " + std::to_string(schedule.per_device.size()) +
                " devices, expected " + std::to_string(schedule.devices));
  }
  for (const int d : schedule.stage_device) {
    if (d < 0 || d >= schedule.devices) throw Error("lower: stage mapped to unknown device");
  }
  if (!schedule.copies_divide()) {
    throw Error("lower: " + std::to_string(stages) + " stages and " +
                std::to_string(schedule.microbatches) + " micro-batches do not hold " +
                std::to_string(schedule.replicas) + " copies of the model");
  }
  for (int d = 0; d < schedule.devices; ++d) {
    for (const Action& a : schedule.per_device[static_cast<std::size_t>(d)]) {
      const bool ok = a.stage >= 0 && a.stage < stages && !a.microbatches.empty() &&
                      schedule.stage_device[static_cast<std::size_t>(a.stage)] == d;
      if (!ok)
        throw Error("lower: action " + format_action(a) + " out of place on device " +
                    std::to_string(d));
      for (const int mb : a.microbatches) {
        if (mb < 0 || mb >= schedule.microbatches) {
          throw Error("lower: action " + format_action(a) + " names an unknown micro-batch");
        }
      }
    }
  }
}

}  // namespace

namespace {

// The graph of `schedule`, which it reads but does not keep (`g.schedule` is the caller's to set).
void lower_into(TaskGraph& g, const Schedule& schedule, const std::vector<StageCost>& costs,
                PlanMeta meta) {
  // Bounds only: lowering must not index out of range. Structural rules (coverage, order) are
  // the validator's, on the graph itself; make_plan and the importers also run check_schedule.
  check_bounds(schedule);
  const int stages = schedule.stage_count();
  if (static_cast<int>(costs.size()) != stages) {
    throw Error("lower: " + std::to_string(costs.size()) + " stage costs for " +
                std::to_string(stages) + " stages");
  }
  g.meta = std::move(meta);
  ComputeIndex index(stages, schedule.microbatches);
  const std::size_t actions = schedule.action_count();
  // At most one message per action (its output crossing a device), two nodes each; edges:
  // stream order, data in and out.
  g.reserve(3 * actions, 8 * actions);

  GraphBuilder build(g);
  // Per stage, its last weight-gradient op (P2 or B) in its device's order: where its weight
  // gradients are complete (read with two copies of the model).
  std::vector<int> last_weight(static_cast<std::size_t>(schedule.replicas > 1 ? stages : 0), -1);
  for (int d = 0; d < schedule.devices; ++d) {
    const int cs = g.stream(d, StreamRole::compute);
    const auto& actions_here = schedule.per_device[static_cast<std::size_t>(d)];
    build.reserve_order(cs, actions_here.size());
    for (const Action& a : actions_here) {
      const int id = build.append(cs);
      if (!last_weight.empty() && (a.op == OpType::P2 || a.op == OpType::B))
        last_weight[static_cast<std::size_t>(a.stage)] = id;
      fill_compute(build.node(id), a, costs[static_cast<std::size_t>(a.stage)], d);
      for (const int mb : a.microbatches) {
        auto& table = a.op == OpType::F    ? index.forward
                      : a.op == OpType::P2 ? index.p2
                                           : index.backward;
        ComputeIndex::at(table, a.stage, mb) = id;
      }
    }
  }

  // The optimizer step of each device whose stages the profile gives one for: last on its
  // compute stream, after every weight gradient (stream order is the dependency).
  std::vector<int> optimizer(static_cast<std::size_t>(schedule.devices), -1);
  const std::vector<double> optimizer_time =
      device_optimizer_us(costs, schedule.stage_device, schedule.devices);
  for (int d = 0; d < schedule.devices; ++d) {
    const double optimizer_us = optimizer_time[static_cast<std::size_t>(d)];
    if (optimizer_us <= 0) continue;
    const auto first = std::find(schedule.stage_device.begin(), schedule.stage_device.end(), d);
    const auto first_stage = static_cast<int>(first - schedule.stage_device.begin());
    optimizer[static_cast<std::size_t>(d)] = build.append(g.stream(d, StreamRole::compute));
    Node& n = build.node(optimizer[static_cast<std::size_t>(d)]);
    n.kind = NodeKind::compute;
    n.op = OpType::O;
    n.device = d;
    n.stage = first_stage;
    n.microbatches = {0};
    n.duration_us = optimizer_us;
  }

  // Messages in the producer's device order, so each peer pair's sends and receives share one
  // order (what NCCL point-to-point needs to be deadlock-free). Streams are created on first use
  // and remembered per (src, dst) to skip the stream map's lookup per message.
  const auto pair_index = [&](int src, int dst) {
    return static_cast<std::size_t>(src) * static_cast<std::size_t>(schedule.devices) +
           static_cast<std::size_t>(dst);
  };
  const std::size_t pairs =
      static_cast<std::size_t>(schedule.devices) * static_cast<std::size_t>(schedule.devices);
  std::vector<int> send_streams(pairs, -1);
  std::vector<int> recv_streams(pairs, -1);
  // A message from `producer` on device src to device dst, in add_message's edge order: send and
  // recv each after their stream's last node, the pair's data edge, then producer -> send.
  // Returns {send, recv}. The devices are the caller's (those of the two stages, where
  // check_bounds put every node), not read from the consumer's node: it lies anywhere in the
  // graph, and reading it was a cache miss per message.
  auto message = [&](int producer, int src, int dst, std::int64_t bytes, Transfer what) {
    int& send_stream = send_streams[pair_index(src, dst)];
    if (send_stream < 0) send_stream = g.stream(src, StreamRole::send, dst);
    int& recv_stream = recv_streams[pair_index(src, dst)];
    if (recv_stream < 0) recv_stream = g.stream(dst, StreamRole::recv, src);
    const int s = build.append(send_stream);
    {
      const Node& p = build.node(producer);
      Node& send = build.node(s);
      send.kind = NodeKind::send;
      send.op = p.op;
      send.transfer = what;
      send.device = src;
      send.stage = p.stage;
      send.microbatches = p.microbatches;
      send.duration_us = transfer_time_us(g.meta.link, bytes);
      send.bytes = bytes;
      send.peer = dst;
    }
    const int r = build.append_copy(s, recv_stream);
    Node& recv = build.node(r);
    recv.kind = NodeKind::recv;
    recv.device = dst;
    recv.peer = src;
    recv.match = s;
    build.node(s).match = r;
    build.edge(s, r, EdgeKind::data);
    build.edge(producer, s, EdgeKind::data);
    return std::pair{s, r};
  };
  // An activation or input gradient: a message, then recv -> consumer, unless the two stages
  // share a device (a data edge then).
  auto connect = [&](int producer, int consumer, int from_stage, int to_stage, std::int64_t bytes,
                     Transfer what) {
    if (producer < 0 || consumer < 0) return;  // a missing op: the validator names it
    const int src = schedule.stage_device[static_cast<std::size_t>(from_stage)];
    const int dst = schedule.stage_device[static_cast<std::size_t>(to_stage)];
    if (src == dst) {
      build.edge(producer, consumer, EdgeKind::data);
      return;
    }
    build.edge(message(producer, src, dst, bytes, what).second, consumer, EdgeKind::data);
  };

  for (int d = 0; d < schedule.devices; ++d) {
    for (const Action& a : schedule.per_device[static_cast<std::size_t>(d)]) {
      const int s = a.stage;
      const int mb = a.microbatches.front();
      const StageCost& cost = costs[static_cast<std::size_t>(s)];
      // A micro-batch flows between its first and last stage (one copy of the model).
      if (a.op == OpType::F && s < schedule.last_stage_of(mb)) {
        connect(ComputeIndex::at(index.forward, s, mb), ComputeIndex::at(index.forward, s + 1, mb),
                s, s + 1, cost.send_bytes, Transfer::activation);
      } else if ((a.op == OpType::B || a.op == OpType::P1) && s > schedule.first_stage_of(mb)) {
        // The gradient w.r.t. this stage's input has the size of the previous stage's output.
        connect(ComputeIndex::at(index.backward, s, mb),
                ComputeIndex::at(index.backward, s - 1, mb), s, s - 1,
                costs[static_cast<std::size_t>(s - 1)].send_bytes, Transfer::gradient);
      }
    }
  }

  // Two copies of a stage on two devices exchange their weight gradients: each device sends its
  // own once its last weight gradient of the stage has run and receives the other's into a buffer
  // of its own; its optimizer step adds them in and so waits for both the recv and its own send
  // (whose source it is about to change). No recv waits for its own device's send: with a
  // rendezvous transport each end's send would then wait for the other's. A link's messages keep
  // one order on both ends: stage by stage of the first copy, each way. Two copies on one device
  // share their layers' gradients and exchange nothing.
  for (const auto& [first, second] : schedule.gradient_exchanges()) {
    const auto a = static_cast<std::size_t>(first);
    const auto b = static_cast<std::size_t>(second);
    const int w0 = last_weight[a];
    const int w1 = last_weight[b];
    const int d0 = schedule.stage_device[a];
    const int d1 = schedule.stage_device[b];
    if (w0 < 0 || w1 < 0) continue;  // a missing op: the validator names it
    const auto there = message(w0, d0, d1, costs[a].grad_bytes, Transfer::grads);
    const auto back = message(w1, d1, d0, costs[b].grad_bytes, Transfer::grads);
    for (const auto& [in, out, device] :
         {std::tuple{there.second, back.first, d1}, std::tuple{back.second, there.first, d0}}) {
      const int step = optimizer[static_cast<std::size_t>(device)];
      if (step < 0) continue;  // the runtime adds them in after the step's graph
      build.edge(in, step, EdgeKind::data);
      build.edge(out, step, EdgeKind::data);
    }
  }

  // Local dependencies: backward after forward, p2 after p1 (also implied by stream order, but
  // explicit edges let the validator and the runtime check inputs without knowing the schedule).
  for (int s = 0; s < stages; ++s) {
    for (int mb = 0; mb < schedule.microbatches; ++mb) {
      const int f = ComputeIndex::at(index.forward, s, mb);
      const int b = ComputeIndex::at(index.backward, s, mb);
      const int w = ComputeIndex::at(index.p2, s, mb);
      if (f >= 0 && b >= 0) build.edge(f, b, EdgeKind::data);
      if (b >= 0 && w >= 0) build.edge(b, w, EdgeKind::data);
    }
  }
}

}  // namespace

std::vector<OverlapPair> overlap_pairs(const TaskGraph& graph) {
  const std::span<const Node> nodes = graph.nodes();
  std::vector<OverlapPair> pairs;
  if (std::none_of(nodes.begin(), nodes.end(), [](const Node& n) { return n.overlaps_next; }))
    return pairs;
  for (std::size_t s = 0; s < graph.streams().size(); ++s) {
    const std::vector<int>& order = graph.stream_order(static_cast<int>(s));
    for (std::size_t i = 0; i + 1 < order.size(); ++i) {
      if (!nodes[static_cast<std::size_t>(order[i])].overlaps_next) continue;
      pairs.push_back({order[i], order[i + 1]});
      ++i;  // the second member starts no pair
    }
  }
  return pairs;
}

TaskGraph lower(const Schedule& schedule, const std::vector<StageCost>& costs, PlanMeta meta) {
  return lower(Schedule(schedule), costs, std::move(meta));
}

TaskGraph lower(Schedule&& taken, const std::vector<StageCost>& costs, PlanMeta meta) {
  TaskGraph g;
  lower_into(g, taken, costs, std::move(meta));
  g.schedule = std::move(taken);
  return g;
}

TaskGraph lower_detached(const Schedule& schedule, const std::vector<StageCost>& costs,
                         PlanMeta meta) {
  TaskGraph g;
  lower_into(g, schedule, costs, std::move(meta));
  return g;
}

TaskGraph lower_and_check(Schedule&& taken, const std::vector<StageCost>& costs, PlanMeta meta) {
  TaskGraph g;
  if (taken.action_count() < kConcurrentActions) {
    check_schedule(taken);
    lower_into(g, taken, costs, std::move(meta));
  } else {
    run_beside([&taken] { check_schedule(taken); },
               [&] { lower_into(g, taken, costs, std::move(meta)); });
  }
  g.schedule = std::move(taken);
  return g;
}

void check_stage_layers(const TaskGraph& plan, std::string_view source_view) {
  const std::string source(source_view);
  const PlanMeta& meta = plan.meta;
  const int stages = plan.schedule.stage_count();
  if (static_cast<int>(meta.stage_layers.size()) != stages) {
    throw Error(source + ": field 'meta.stage_layers' has " +
                std::to_string(meta.stage_layers.size()) + " entries for " +
                std::to_string(stages) + " stages");
  }
  // With two copies of the model (Schedule::replicas) the first copy's stages tile the layer
  // list and every other copy repeats that cut.
  const int copy = plan.schedule.model_stage_count();
  int next = 0;
  for (int s = 0; s < stages; ++s) {
    const StageLayers& range = meta.stage_layers[static_cast<std::size_t>(s)];
    if (s >= copy) {
      const int model_stage = plan.schedule.model_stage(s);
      const StageLayers& first = meta.stage_layers[static_cast<std::size_t>(model_stage)];
      if (range.first_layer != first.first_layer || range.layer_count != first.layer_count) {
        throw Error(source + ": field 'meta.stage_layers[" + std::to_string(s) +
                    "]' is not the same layers as stage " + std::to_string(model_stage) +
                    ", whose copy it runs");
      }
      continue;
    }
    if (range.first_layer != next || range.layer_count <= 0) {
      throw Error(source + ": field 'meta.stage_layers[" + std::to_string(s) +
                  "]' does not continue the layer list at layer " + std::to_string(next));
    }
    next += range.layer_count;
  }
  const std::vector<LayerKind> list = meta.model.layer_list();
  const auto layers = static_cast<int>(list.size());
  if (next != layers) {
    throw Error(source + ": field 'meta.stage_layers' covers " + std::to_string(next) + " of the " +
                std::to_string(layers) + " layers of model '" + meta.model.name + "'");
  }
  // Every stage runs at least one block, as every cut pipeplan makes (and --layout, import's
  // side file and Megatron's own split) has it: a stage of the embedding or head alone.
  for (int s = 0; s < copy; ++s) {
    const StageLayers& range = meta.stage_layers[static_cast<std::size_t>(s)];
    bool block = false;
    for (int l = range.first_layer; l < range.first_layer + range.layer_count && !block; ++l)
      block = list[static_cast<std::size_t>(l)] == LayerKind::block;
    if (!block) {
      throw Error(source + ": field 'meta.stage_layers[" + std::to_string(s) +
                  "]' holds no transformer block (every stage holds at least one)");
    }
  }
  for (const auto& [field, value] :
       {std::pair{"mbs", meta.mbs}, {"seq", meta.seq}, {"microbatches", meta.microbatches}}) {
    if (value <= 0) {
      throw Error(source + ": field 'meta." + field + "' must be positive (is " +
                  std::to_string(value) + ")");
    }
  }
}

}  // namespace pipeplan
