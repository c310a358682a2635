#include "planner/taskgraph.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "planner/error.h"

namespace pipeplan {

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
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    const Stream& s = streams_[i];
    if (s.device == device && s.role == role && s.peer == peer) return static_cast<int>(i);
  }
  streams_.push_back(Stream{device, role, peer});
  stream_order_.emplace_back();
  return static_cast<int>(streams_.size() - 1);
}

int TaskGraph::add_node(const Node& node) {
  if (node.stream < 0 || node.stream >= static_cast<int>(streams_.size())) {
    throw Error("task graph: node '" + node.label + "' refers to unknown stream " +
                std::to_string(node.stream));
  }
  const auto stream_index = static_cast<std::size_t>(node.stream);
  const int id = static_cast<int>(boost::add_vertex(node, graph_));
  auto& order = stream_order_[stream_index];
  if (!order.empty()) boost::add_edge(order.back(), id, EdgeKind::order, graph_);
  order.push_back(id);
  return id;
}

void TaskGraph::add_data_edge(int from, int to) {
  boost::add_edge(static_cast<std::size_t>(from), static_cast<std::size_t>(to), EdgeKind::data,
                  graph_);
}

void TaskGraph::set_stream_order(int stream_index, std::vector<int> order) {
  auto& current = stream_order_.at(static_cast<std::size_t>(stream_index));
  for (const int id : current) {
    boost::remove_out_edge_if(
        static_cast<std::size_t>(id),
        [this](const Graph::edge_descriptor& e) { return graph_[e] == EdgeKind::order; }, graph_);
  }
  current = std::move(order);
  for (std::size_t i = 1; i < current.size(); ++i) {
    boost::add_edge(current[i - 1], current[i], EdgeKind::order, graph_);
  }
}

std::string TaskGraph::node_name(int id) const {
  const Node& n = node(id);
  std::string where = "device " + std::to_string(n.device);
  if (n.stream >= 0 && n.stream < static_cast<int>(streams_.size())) {
    where += " " + streams_[static_cast<std::size_t>(n.stream)].name();
  }
  std::string what = n.label;
  if (n.kind != NodeKind::compute) what = std::string(to_string(n.kind)) + " " + n.label;
  return "node " + std::to_string(id) + " (" + what + " on " + where + ")";
}

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

Node compute_node(const Action& action, const StageCost& cost, int device, int stream) {
  Node n;
  n.kind = NodeKind::compute;
  n.op = action.op;
  n.device = device;
  n.stream = stream;
  n.stage = action.stage;
  n.microbatches = action.microbatches;
  n.label = format_action(action);
  const auto k = static_cast<std::int64_t>(action.microbatches.size());
  switch (action.op) {
    case OpType::F:
      n.duration_us = cost.forward_us;
      n.alloc_bytes = cost.stash_bytes;
      break;
    case OpType::B:
      n.duration_us = cost.p1_us + cost.p2_us;
      n.free_bytes = cost.stash_bytes;
      break;
    case OpType::P1:
      n.duration_us = cost.p1_us;
      n.alloc_bytes = cost.retained_bytes;
      n.free_bytes = cost.stash_bytes;
      break;
    case OpType::P2:
      n.duration_us = cost.p2_time_us(static_cast<int>(k));
      n.free_bytes = k * cost.retained_bytes;
      break;
  }
  return n;
}

double transfer_time_us(const P2pLink& link, std::int64_t bytes) {
  double t = link.latency_us;
  if (link.bandwidth_GBps > 0) t += static_cast<double>(bytes) / (link.bandwidth_GBps * 1e3);
  return t;
}

}  // namespace

TaskGraph lower(const Schedule& schedule, const std::vector<StageCost>& costs, PlanMeta meta) {
  check_schedule(schedule);
  const int stages = schedule.stage_count();
  if (static_cast<int>(costs.size()) != stages) {
    throw Error("lower: " + std::to_string(costs.size()) + " stage costs for " +
                std::to_string(stages) + " stages");
  }
  TaskGraph g;
  g.meta = std::move(meta);
  g.schedule = schedule;
  ComputeIndex index(stages, schedule.microbatches);

  for (int d = 0; d < schedule.devices; ++d) {
    const int cs = g.stream(d, StreamRole::compute);
    for (const Action& a : schedule.per_device[static_cast<std::size_t>(d)]) {
      const int id = g.add_node(compute_node(a, costs[static_cast<std::size_t>(a.stage)], d, cs));
      for (const int mb : a.microbatches) {
        auto& table = a.op == OpType::F    ? index.forward
                      : a.op == OpType::P2 ? index.p2
                                           : index.backward;
        ComputeIndex::at(table, a.stage, mb) = id;
      }
    }
  }

  // Messages in the producer's device order, so each peer pair's sends and receives share one
  // order (what NCCL point-to-point needs to be deadlock-free).
  auto connect = [&](int producer, int consumer, std::int64_t bytes) {
    const Node& p = g.node(producer);
    const int src = p.device;
    const int dst = g.node(consumer).device;
    if (src == dst) {
      g.add_data_edge(producer, consumer);
      return;
    }
    Node send;
    send.kind = NodeKind::send;
    send.op = p.op;
    send.device = src;
    send.stream = g.stream(src, StreamRole::send, dst);
    send.stage = p.stage;
    send.microbatches = p.microbatches;
    send.duration_us = transfer_time_us(g.meta.link, bytes);
    send.bytes = bytes;
    send.peer = dst;
    send.label = p.label;
    Node recv = send;
    recv.kind = NodeKind::recv;
    recv.device = dst;
    recv.stream = g.stream(dst, StreamRole::recv, src);
    recv.peer = src;
    const int s = g.add_node(send);
    const int r = g.add_node(recv);
    g.node(s).match = r;
    g.node(r).match = s;
    g.add_data_edge(producer, s);
    g.add_data_edge(s, r);
    g.add_data_edge(r, consumer);
  };

  for (int d = 0; d < schedule.devices; ++d) {
    for (const Action& a : schedule.per_device[static_cast<std::size_t>(d)]) {
      const int s = a.stage;
      const int mb = a.microbatches.front();
      const StageCost& cost = costs[static_cast<std::size_t>(s)];
      if (a.op == OpType::F && s + 1 < stages) {
        connect(ComputeIndex::at(index.forward, s, mb), ComputeIndex::at(index.forward, s + 1, mb),
                cost.send_bytes);
      } else if ((a.op == OpType::B || a.op == OpType::P1) && s > 0) {
        // The gradient w.r.t. this stage's input has the size of the previous stage's output.
        connect(ComputeIndex::at(index.backward, s, mb),
                ComputeIndex::at(index.backward, s - 1, mb),
                costs[static_cast<std::size_t>(s - 1)].send_bytes);
      }
    }
  }

  // Local dependencies: backward after forward, p2 after p1 (also implied by stream order, but
  // explicit edges let the validator and the runtime check inputs without knowing the schedule).
  for (int s = 0; s < stages; ++s) {
    for (int mb = 0; mb < schedule.microbatches; ++mb) {
      const int f = ComputeIndex::at(index.forward, s, mb);
      const int b = ComputeIndex::at(index.backward, s, mb);
      const int w = ComputeIndex::at(index.p2, s, mb);
      g.add_data_edge(f, b);
      if (w >= 0) g.add_data_edge(b, w);
    }
  }
  return g;
}

}  // namespace pipeplan
