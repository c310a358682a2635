#include "planner/graph/validator.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/graph/bpipe_check.h"

namespace pipeplan {

namespace {

using Result = std::optional<Violation>;

// What the structural checks read of each node, packed (24 bytes) so that the graph walks touch
// one small record per node instead of the whole Node (~110 bytes with its label).
struct PackedNode {
  int match;
  int device;
  int stream;
  int peer;
  int stage;
  NodeKind kind;
  OpType op;
  Transfer transfer;
};

// Shared by the checks of one validation: the packed nodes, built in one sequential pass.
struct Context {
  explicit Context(const TaskGraph& graph) : g(graph), nodes(graph_nodes(graph, any_overlap)) {}
  const TaskGraph& g;
  bool any_overlap = false;  // a node flagged overlaps_next (before `nodes`: set while it is made)
  std::vector<PackedNode> nodes;
  const PackedNode& node(std::size_t id) const { return nodes[id]; }
  bool paired(std::size_t id) const {
    const PackedNode& n = nodes[id];
    return n.kind != NodeKind::compute && n.match >= 0;
  }

 private:
  static std::vector<PackedNode> graph_nodes(const TaskGraph& graph, bool& any_overlap) {
    std::vector<PackedNode> out(static_cast<std::size_t>(graph.node_count()));
    for (int id = 0; id < graph.node_count(); ++id) {
      const Node& n = graph.node(id);
      any_overlap = any_overlap || n.overlaps_next;
      out[static_cast<std::size_t>(id)] = {n.match, n.device, n.stream, n.peer,
                                           n.stage, n.kind,   n.op,     n.transfer};
    }
    return out;
  }
};

// The stream role a transfer kind belongs on, and the ops that make its payload.
bool transfer_fits(const PackedNode& n, StreamRole role) {
  switch (n.transfer) {
    case Transfer::none:
      return role == StreamRole::compute;
    case Transfer::activation:
      return (role == StreamRole::send || role == StreamRole::recv) && n.op == OpType::F;
    case Transfer::gradient:
      return (role == StreamRole::send || role == StreamRole::recv) &&
             (n.op == OpType::B || n.op == OpType::P1);
    case Transfer::evict:
    case Transfer::load:
      return role == StreamRole::transfer && n.op == OpType::F;
    case Transfer::grads:
      return (role == StreamRole::send || role == StreamRole::recv) &&
             (n.op == OpType::B || n.op == OpType::P2);
  }
  return false;
}

// Every node sits in exactly one stream, its own; the stream's role fits the node's kind and
// transfer kind, and the transfer kind fits the op that made the payload.
Result check_streams(const Context& c) {
  const TaskGraph& g = c.g;
  const int count = g.node_count();
  std::vector<int> seen(static_cast<std::size_t>(count), 0);
  std::size_t listed = 0;
  for (std::size_t s = 0; s < g.streams().size(); ++s) {
    const Stream& stream = g.streams()[s];
    listed += g.stream_order(static_cast<int>(s)).size();
    // The stream's fields in locals: the stores to `seen` could otherwise alias them, and every
    // node would reload them.
    const int index = static_cast<int>(s), device = stream.device, peer = stream.peer;
    const StreamRole role = stream.role;
    const bool any_transfer = role == StreamRole::transfer;  // BPipe: both directions, one stream
    const NodeKind kind = role == StreamRole::compute ? NodeKind::compute
                          : role == StreamRole::send  ? NodeKind::send
                                                      : NodeKind::recv;
    for (const int id : g.stream_order(index)) {
      if (id < 0 || id >= count) {
        return make_violation(g, -1, "stream",
                              "stream " + stream.name() + " on device " +
                                  std::to_string(stream.device) + " lists unknown node " +
                                  std::to_string(id));
      }
      const PackedNode& n = c.node(static_cast<std::size_t>(id));
      if (++seen[static_cast<std::size_t>(id)] > 1) {
        return make_violation(g, id, "stream", "appears twice in stream orders");
      }
      if (n.stream != index || n.device != device) {
        return make_violation(g, id, "stream", "is listed in the order of another stream");
      }
      const bool role_ok = any_transfer
                               ? n.kind != NodeKind::compute && n.peer == peer
                               : n.kind == kind && (kind == NodeKind::compute || n.peer == peer);
      if (!role_ok) return make_violation(g, id, "stream", "runs on a stream of the wrong role");
      if (!transfer_fits(n, role)) {
        return make_violation(g, id, "stream",
                              "carries transfer kind '" + std::string(to_string(n.transfer)) +
                                  "', which does not fit a " + std::string(to_string(role)) +
                                  " stream and op " + std::string(to_string(n.op)));
      }
    }
  }
  // No node is listed twice, so as many listings as nodes means every node is listed.
  if (listed == static_cast<std::size_t>(count)) return std::nullopt;
  for (int id = 0; id < count; ++id) {
    if (seen[static_cast<std::size_t>(id)] == 0) {
      return make_violation(g, id, "stream", "is in no stream order");
    }
  }
  return std::nullopt;
}

// Whether `graph` has a data edge from `from` to `to`.
bool has_data_edge(const TaskGraph::Graph& graph, int from, int to) {
  for (auto [it, end] = boost::out_edges(static_cast<std::size_t>(from), graph); it != end; ++it) {
    if (boost::target(*it, graph) == static_cast<std::size_t>(to) && graph[*it] == EdgeKind::data)
      return true;
  }
  return false;
}

// Overlapped pairs: a flagged node is a forward followed in its compute stream by a B or P1 that
// is not flagged itself and takes no data from it, and the pairs are the schedule's.
Result check_overlap(const Context& c) {
  const TaskGraph& g = c.g;
  // The schedule's pairs, by the forward's (stage, micro-batch).
  std::map<std::pair<int, int>, Action> planned;
  for (const std::vector<Action>& actions : g.schedule.per_device) {
    for (std::size_t i = 0; i + 1 < actions.size(); ++i) {
      if (actions[i].overlaps_next)
        planned[{actions[i].stage, actions[i].microbatches.front()}] = actions[i + 1];
    }
  }
  std::size_t pairs = 0;
  // Without a flagged node no stream holds a pair (only the count against the schedule's is left).
  for (std::size_t s = 0; c.any_overlap && s < g.streams().size(); ++s) {
    const std::vector<int>& order = g.stream_order(static_cast<int>(s));
    for (std::size_t i = 0; i < order.size(); ++i) {
      const int id = order[i];
      const Node& first = g.node(id);
      if (!first.overlaps_next) continue;
      const auto fail = [&](const std::string& what) {
        return make_violation(g, id, "overlap", what);
      };
      if (first.kind != NodeKind::compute) return fail("is overlapped but not a compute node");
      if (i + 1 == order.size()) return fail("overlaps the next node but ends its stream");
      const int next = order[i + 1];
      const Node& second = g.node(next);
      if (first.op != OpType::F || (second.op != OpType::B && second.op != OpType::P1)) {
        return fail("an overlapped pair is a forward then a B or P1, got " + node_label(second));
      }
      if (second.overlaps_next) return fail("is followed by a node that overlaps further");
      if (has_data_edge(g.graph(), id, next)) {
        return fail("feeds " + node_label(second) + ", the node it overlaps");
      }
      const auto it = planned.find({first.stage, first.microbatches.front()});
      if (it == planned.end() || it->second.op != second.op || it->second.stage != second.stage ||
          it->second.microbatches != second.microbatches) {
        return fail("overlaps " + node_label(second) + ", a pair the schedule does not have");
      }
      ++pairs;
      ++i;
    }
  }
  if (pairs != planned.size()) {
    return make_violation(g, -1, "overlap",
                          "the schedule has " + std::to_string(planned.size()) +
                              " overlapped pairs, the graph " + std::to_string(pairs));
  }
  return std::nullopt;
}

// The optimizer step: on a compute stream, the last node there (after every weight gradient of
// its device), at most one per device.
Result check_optimizer(const Context& c) {
  const TaskGraph& g = c.g;
  for (std::size_t s = 0; s < g.streams().size(); ++s) {
    const std::vector<int>& order = g.stream_order(static_cast<int>(s));
    for (std::size_t i = 0; i < order.size(); ++i) {
      const PackedNode& n = c.node(static_cast<std::size_t>(order[i]));
      if (n.op != OpType::O || n.kind != NodeKind::compute) continue;
      if (i + 1 != order.size()) {
        return make_violation(g, order[i], "optimizer",
                              "runs before " + node_label(g.node(order[i + 1])) +
                                  " on its stream: the optimizer step is a device's last op");
      }
    }
  }
  return std::nullopt;
}

// Each send/recv names a match of the other kind that names it back, on the device it names as
// its peer, with the same transfer kind, size and tag. Every test is symmetric, so a node whose
// match comes before it, is a send or recv and names it back passed them all when that match was
// checked (the walk returns at the first failure): only the first of each pair is read in full.
Result check_matches(const Context& c) {
  const TaskGraph& g = c.g;
  for (int id = 0; id < g.node_count(); ++id) {
    const PackedNode& packed = c.node(static_cast<std::size_t>(id));
    if (packed.kind == NodeKind::compute) continue;
    if (packed.match >= 0 && packed.match < id) {
      const PackedNode& earlier = c.node(static_cast<std::size_t>(packed.match));
      if (earlier.kind != NodeKind::compute && earlier.match == id) continue;
    }
    const Node& n = g.node(id);
    const char* other_kind = n.kind == NodeKind::send ? "recv" : "send";
    if (n.match < 0 || n.match >= g.node_count()) {
      return make_violation(g, id, "send-recv-match", std::string("has no matching ") + other_kind);
    }
    const Node& m = g.node(n.match);
    if (m.kind == n.kind || m.kind == NodeKind::compute || m.match != id) {
      return make_violation(
          g, id, "send-recv-match",
          std::string("is not paired with a ") + other_kind + " that names it back");
    }
    if (m.device != n.peer || m.peer != n.device) {
      return make_violation(g, id, "send-recv-match", "its peer and its match's device disagree");
    }
    if (m.transfer != n.transfer) {
      return make_violation(g, id, "send-recv-match",
                            "its transfer kind '" + std::string(to_string(n.transfer)) +
                                "' differs from its match's '" +
                                std::string(to_string(m.transfer)) + "'");
    }
    if (m.bytes != n.bytes) {
      return make_violation(g, id, "send-recv-match",
                            "size differs from its match's (" + std::to_string(n.bytes) + " vs " +
                                std::to_string(m.bytes) + " bytes)");
    }
    if (!same_label(m, n)) {
      return make_violation(g, id, "send-recv-match",
                            "tag " + node_label(g.node(id)) + " differs from its match's, " +
                                node_label(g.node(n.match)));
    }
  }
  return std::nullopt;
}

// Per peer pair, the k-th send must meet the k-th receive, or point-to-point deadlocks.
Result check_pair_order(const Context& c) {
  const TaskGraph& g = c.g;
  for (std::size_t s = 0; s < g.streams().size(); ++s) {
    const Stream& stream = g.streams()[s];
    if (stream.role != StreamRole::send) continue;
    const auto& sends = g.stream_order(static_cast<int>(s));
    int recv_stream = -1;
    for (std::size_t r = 0; r < g.streams().size(); ++r) {
      const Stream& other = g.streams()[r];
      if (other.role == StreamRole::recv && other.device == stream.peer &&
          other.peer == stream.device) {
        recv_stream = static_cast<int>(r);
      }
    }
    if (recv_stream < 0) {
      return make_violation(g, sends.empty() ? -1 : sends.front(), "send-recv-order",
                            "no receive stream on device " + std::to_string(stream.peer));
    }
    const auto& recvs = g.stream_order(recv_stream);
    for (std::size_t k = 0; k < sends.size() && k < recvs.size(); ++k) {
      if (c.node(static_cast<std::size_t>(sends[k])).match != recvs[k]) {
        return make_violation(g, sends[k], "send-recv-order",
                              "is send #" + std::to_string(k) + " to device " +
                                  std::to_string(stream.peer) + " but receive #" +
                                  std::to_string(k) + " there is " + g.node_name(recvs[k]));
      }
    }
    if (sends.size() != recvs.size()) {
      return make_violation(g, sends.empty() ? -1 : sends.front(), "send-recv-order",
                            std::to_string(sends.size()) + " sends but " +
                                std::to_string(recvs.size()) + " receives on the pair");
    }
  }
  return std::nullopt;
}

// Acyclic once each send/recv pair is one event (a rendezvous waits on both sides' inputs) and
// each overlapped pair is one (the simulator and the runtime start its two ops together, once
// both are ready: a path from the first to the second through other nodes is a cycle).
Result check_acyclic(const Context& c) {
  const TaskGraph& g = c.g;
  const auto& graph = g.graph();
  const auto n = static_cast<std::size_t>(g.node_count());
  // An overlapped pair's other member (check_overlap has checked the pairs), else -1.
  std::vector<int> partner(c.any_overlap ? n : 0, -1);
  if (c.any_overlap) {
    for (const OverlapPair& pair : overlap_pairs(g)) {
      partner[static_cast<std::size_t>(pair.first)] = pair.second;
      partner[static_cast<std::size_t>(pair.second)] = pair.first;
    }
  }
  const auto other_half = [&](std::size_t v) -> int {
    if (c.paired(v)) return c.node(v).match;
    return c.any_overlap ? partner[v] : -1;
  };
  std::vector<std::size_t> rep(n);
  for (std::size_t v = 0; v < n; ++v) {
    const int other = other_half(v);
    rep[v] = other >= 0 ? std::min(v, static_cast<std::size_t>(other)) : v;
  }
  std::vector<int> indegree(n, 0);
  for (auto [it, end] = boost::edges(graph); it != end; ++it) {
    // A node waiting on itself never runs (an edge inside one send/recv event is the pair's own).
    if (boost::source(*it, graph) == boost::target(*it, graph)) {
      return make_violation(g, static_cast<int>(boost::source(*it, graph)), "acyclic",
                            "depends on itself");
    }
    const auto a = rep[boost::source(*it, graph)];
    const auto b = rep[boost::target(*it, graph)];
    if (a != b) {
      ++indegree[b];
    } else if (c.node(boost::source(*it, graph)).kind == NodeKind::recv) {
      // Inside one event only the send's edge to its recv is the pair's own: a recv that its
      // own send waits for never arrives.
      return make_violation(g, static_cast<int>(boost::source(*it, graph)), "acyclic",
                            "its matched send waits for it (an edge from the recv to its send)");
    } else if (c.node(boost::source(*it, graph)).kind == NodeKind::compute &&
               !g.node(static_cast<int>(boost::source(*it, graph))).overlaps_next) {
      // Inside an overlapped pair only the first's (stream) edge to the second is its own.
      return make_violation(g, static_cast<int>(boost::target(*it, graph)), "acyclic",
                            "waits for the op it overlaps (an edge from the pair's second op "
                            "to its first)");
    }
  }
  std::vector<std::size_t> stack;
  for (std::size_t v = 0; v < n; ++v) {
    if (rep[v] == v && indegree[v] == 0) stack.push_back(v);
  }
  // The members of an event: the node, and for a send/recv or an overlapped pair its other half.
  auto members = [&](std::size_t v) {
    const int other = other_half(v);
    return std::pair<std::array<std::size_t, 2>, int>{
        {v, other >= 0 ? static_cast<std::size_t>(other) : v}, other >= 0 ? 2 : 1};
  };
  std::vector<char> done(n, 0);
  while (!stack.empty()) {
    const auto v = stack.back();
    stack.pop_back();
    done[v] = 1;
    const auto [list, count] = members(v);
    for (int k = 0; k < count; ++k) {
      const auto member = list[static_cast<std::size_t>(k)];
      for (auto [it, end] = boost::out_edges(member, graph); it != end; ++it) {
        const auto b = rep[boost::target(*it, graph)];
        if (b != v && --indegree[b] == 0) stack.push_back(b);
      }
    }
  }
  for (std::size_t v = 0; v < n; ++v) {
    if (rep[v] != v || done[v]) continue;
    // Walk back along unfinished predecessors until an event repeats: it lies on a cycle.
    const auto preds = predecessors(g);
    std::vector<char> visited(n, 0);
    std::size_t cur = v;
    while (!visited[cur]) {
      visited[cur] = 1;
      std::size_t next = cur;
      const auto [list, count] = members(cur);
      for (int k = 0; k < count && next == cur; ++k) {
        const auto member = list[static_cast<std::size_t>(k)];
        for (const auto& [from, kind] : preds[member]) {
          const auto p = rep[static_cast<std::size_t>(from)];
          if (p != cur && !done[p]) {
            next = p;
            break;
          }
        }
      }
      if (next == cur) break;
      cur = next;
    }
    return make_violation(g, static_cast<int>(cur), "acyclic", "lies on a dependency cycle");
  }
  return std::nullopt;
}

// Compute nodes by (op, stage, micro-batch) in a flat table; -1 where absent.
class ComputeTable {
 public:
  ComputeTable(int stages, int microbatches)
      : stages_(stages),
        microbatches_(microbatches),
        ids_(4 * static_cast<std::size_t>(stages) * static_cast<std::size_t>(microbatches), -1) {}
  int& at(OpType op, int stage, int mb) { return ids_[index(op, stage, mb)]; }
  int find(OpType op, int stage, int mb) const { return ids_[index(op, stage, mb)]; }
  // P1 and fused B both answer for "the backward".
  int backward(int stage, int mb) const {
    const int b = find(OpType::B, stage, mb);
    return b >= 0 ? b : find(OpType::P1, stage, mb);
  }

 private:
  std::size_t index(OpType op, int stage, int mb) const {
    return (static_cast<std::size_t>(op) * static_cast<std::size_t>(stages_) +
            static_cast<std::size_t>(stage)) *
               static_cast<std::size_t>(microbatches_) +
           static_cast<std::size_t>(mb);
  }
  int stages_;
  int microbatches_;
  std::vector<int> ids_;
};

// Fills the table; the first node that is out of range or repeats an op is a violation.
Result index_compute(const Context& c, ComputeTable& table) {
  const TaskGraph& g = c.g;
  const int stages = g.schedule.stage_count();
  for (int id = 0; id < g.node_count(); ++id) {
    if (c.node(static_cast<std::size_t>(id)).kind != NodeKind::compute) continue;
    const Node& n = g.node(id);
    if (n.stage < 0 || n.stage >= stages) {
      return make_violation(g, id, "coverage",
                            "belongs to unknown stage " + std::to_string(n.stage));
    }
    if (g.schedule.stage_device[static_cast<std::size_t>(n.stage)] != n.device) {
      return make_violation(g, id, "coverage", "runs on a device that does not hold its stage");
    }
    if (n.op == OpType::O) continue;  // check_optimizer's
    if (n.op == OpType::P2 && g.meta.p2_concat > 0 &&
        n.microbatches.size() > static_cast<std::size_t>(g.meta.p2_concat)) {
      return make_violation(g, id, "coverage",
                            "groups " + std::to_string(n.microbatches.size()) +
                                " micro-batches, above the plan's p2_concat of " +
                                std::to_string(g.meta.p2_concat));
    }
    for (const int mb : n.microbatches) {
      if (mb < 0 || mb >= g.meta.microbatches) {
        return make_violation(g, id, "coverage", "names unknown micro-batch " + std::to_string(mb));
      }
      if (!g.schedule.passes(n.stage, mb)) {
        return make_violation(g, id, "coverage",
                              "runs micro-batch " + std::to_string(mb) + " on stage " +
                                  std::to_string(n.stage) + ", which it does not pass (stages " +
                                  std::to_string(g.schedule.first_stage_of(mb)) + ".." +
                                  std::to_string(g.schedule.last_stage_of(mb)) + ")");
      }
      const bool backward = n.op == OpType::B || n.op == OpType::P1;
      const bool repeated =
          backward ? table.backward(n.stage, mb) >= 0 : table.find(n.op, n.stage, mb) >= 0;
      if (repeated) {
        return make_violation(
            g, id, "coverage",
            "repeats micro-batch " + std::to_string(mb) + " of stage " + std::to_string(n.stage));
      }
      table.at(n.op, n.stage, mb) = id;
    }
  }
  return std::nullopt;
}

// Runs after check_streams (every stream order names real nodes) and index_compute.
Result check_coverage(const Context& c, const ComputeTable& table) {
  const TaskGraph& g = c.g;
  const int stages = g.schedule.stage_count();
  std::vector<int> position(static_cast<std::size_t>(g.node_count()), -1);
  for (std::size_t s = 0; s < g.streams().size(); ++s) {
    const auto& order = g.stream_order(static_cast<int>(s));
    for (std::size_t i = 0; i < order.size(); ++i) {
      position[static_cast<std::size_t>(order[i])] = static_cast<int>(i);
    }
  }
  const auto pos = [&](int id) { return position[static_cast<std::size_t>(id)]; };
  for (int s = 0; s < stages; ++s) {
    for (int mb = 0; mb < g.meta.microbatches; ++mb) {
      if (!g.schedule.passes(s, mb)) continue;  // another copy of the model's
      const auto what = [&] {
        return "stage " + std::to_string(s) + " micro-batch " + std::to_string(mb);
      };
      const int f = table.find(OpType::F, s, mb);
      const int b = table.find(OpType::B, s, mb);
      const int p1 = table.find(OpType::P1, s, mb);
      const int p2 = table.find(OpType::P2, s, mb);
      if (f < 0) return make_violation(g, -1, "coverage", what() + " has no forward");
      const bool fused = b >= 0;
      if (fused && (p1 >= 0 || p2 >= 0)) {
        return make_violation(g, b, "coverage",
                              "is a fused backward of " + what() + ", which also has a p1 or p2");
      }
      if (!fused && (p1 < 0 || p2 < 0)) {
        return make_violation(g, f, "coverage", what() + " lacks its p1 or p2");
      }
      const int back = fused ? b : p1;
      if (pos(back) < pos(f)) {
        return make_violation(g, back, "f-before-p1", "runs before the forward of " + what());
      }
      if (!fused && pos(p2) < pos(p1)) {
        return make_violation(g, p2, "p1-before-p2", "runs before the p1 of " + what());
      }
    }
  }
  return std::nullopt;
}

// True when `consumer` reads `producer`'s output: a direct data edge on one device, or through a
// message that carries it: an activation or input gradient send on the producer's device with the
// producer's op, stage and micro-batch (what the runtime keys the tensor by; its recv has the same,
// check_matches), whose recv, on the consumer's device, feeds the consumer. A data edge between
// devices moves no tensor: the consumer's device never holds the output.
bool feeds(const Context& c, const TaskGraph::Graph& graph, int producer, int consumer) {
  const PackedNode& from = c.node(static_cast<std::size_t>(producer));
  const int consumer_device = c.node(static_cast<std::size_t>(consumer)).device;
  for (auto [it, end] = boost::out_edges(static_cast<std::size_t>(producer), graph); it != end;
       ++it) {
    if (graph[*it] != EdgeKind::data) continue;
    const int to = static_cast<int>(boost::target(*it, graph));
    if (to == consumer && from.device == consumer_device) return true;
    const PackedNode& s = c.node(static_cast<std::size_t>(to));
    if (s.kind != NodeKind::send || s.match < 0 || s.device != from.device ||
        (s.transfer != Transfer::activation && s.transfer != Transfer::gradient) ||
        s.op != from.op || s.stage != from.stage ||
        c.node(static_cast<std::size_t>(s.match)).device != consumer_device ||
        c.g.node(to).microbatches != c.g.node(producer).microbatches)
      continue;
    for (auto [jt, jend] = boost::out_edges(static_cast<std::size_t>(s.match), graph); jt != jend;
         ++jt) {
      if (graph[*jt] == EdgeKind::data && static_cast<int>(boost::target(*jt, graph)) == consumer) {
        return true;
      }
    }
  }
  return false;
}

// Runs after check_coverage: every (op, stage, micro-batch) the rules need exists.
Result check_inputs(const Context& c, const ComputeTable& table) {
  const TaskGraph& g = c.g;
  const auto& graph = g.graph();
  const int stages = g.schedule.stage_count();
  const auto need = [&](int producer, int consumer, const char* what) -> Result {
    if (producer < 0) {  // check_coverage refuses this first; never index with it
      return make_violation(g, consumer, "inputs", std::string("has nothing to wait for: ") + what);
    }
    if (feeds(c, graph, producer, consumer)) return std::nullopt;
    return make_violation(
        g, consumer, "inputs",
        std::string("does not wait for ") + what + " " + node_label(g.node(producer)));
  };
  for (const OpType op : {OpType::F, OpType::B, OpType::P1, OpType::P2}) {
    for (int s = 0; s < stages; ++s) {
      for (int mb = 0; mb < g.meta.microbatches; ++mb) {
        const int id = table.find(op, s, mb);
        if (id < 0) continue;
        Result r;
        if (op == OpType::F && s > g.schedule.first_stage_of(mb)) {
          r = need(table.find(OpType::F, s - 1, mb), id, "the activation from");
        } else if (op == OpType::B || op == OpType::P1) {
          r = need(table.find(OpType::F, s, mb), id, "its forward");
          if (!r && s < g.schedule.last_stage_of(mb))
            r = need(table.backward(s + 1, mb), id, "the gradient from");
        } else if (op == OpType::P2) {
          r = need(table.find(OpType::P1, s, mb), id, "its p1");
        }
        if (r) return r;
      }
    }
  }
  return std::nullopt;
}

// Two copies of a stage (DualPipe) exchange their weight gradients (Transfer::grads): a send
// waits for the last weight gradient of its stage on its device, and the device's optimizer step,
// where the graph has one, waits for every grads recv into the device (it adds the other copy's
// gradients in) and every grads send from it (whose source it is about to change).
Result check_grads(const Context& c) {
  const TaskGraph& g = c.g;
  const auto& graph = g.graph();
  std::map<int, int> optimizer;                    // device -> its optimizer step
  std::map<std::pair<int, int>, int> last_weight;  // (device, stage) -> its last B or P2
  for (std::size_t s = 0; s < g.streams().size(); ++s) {
    if (g.streams()[s].role != StreamRole::compute) continue;
    for (const int id : g.stream_order(static_cast<int>(s))) {
      const PackedNode& n = c.node(static_cast<std::size_t>(id));
      if (n.op == OpType::O) optimizer[n.device] = id;
      if (n.op == OpType::B || n.op == OpType::P2) last_weight[{n.device, n.stage}] = id;
    }
  }
  // The exchanges the copies need, each once each way (Schedule::gradient_exchanges). One missing
  // leaves the copies' weights apart after the step; one extra adds a copy's gradients twice.
  const std::vector<int>& stage_device = g.schedule.stage_device;
  std::map<std::pair<int, int>, int> expected;  // (stage, to device) -> grads sends seen
  for (const auto& [a, b] : g.schedule.gradient_exchanges()) {
    expected[{a, stage_device[static_cast<std::size_t>(b)]}] = 0;
    expected[{b, stage_device[static_cast<std::size_t>(a)]}] = 0;
  }
  for (int id = 0; id < g.node_count(); ++id) {
    const PackedNode& n = c.node(static_cast<std::size_t>(id));
    if (n.transfer != Transfer::grads) continue;
    if (n.kind == NodeKind::send) {
      const auto want = expected.find({n.stage, n.peer});
      // A key names a stage of the plan: its device is then safe to read.
      if (want == expected.end() || stage_device[static_cast<std::size_t>(n.stage)] != n.device) {
        return make_violation(g, id, "grads",
                              "sends the weight gradients of stage " + std::to_string(n.stage) +
                                  " to device " + std::to_string(n.peer) +
                                  ", which holds no other copy of that stage to add them to");
      }
      if (++want->second > 1) {
        return make_violation(g, id, "grads",
                              "sends the weight gradients of stage " + std::to_string(n.stage) +
                                  " to device " + std::to_string(n.peer) +
                                  " a second time (they would be added in twice)");
      }
      const auto w = last_weight.find({n.device, n.stage});
      if (w == last_weight.end() || !has_data_edge(graph, w->second, id)) {
        return make_violation(g, id, "grads",
                              w == last_weight.end()
                                  ? "sends the weight gradients of stage " +
                                        std::to_string(n.stage) +
                                        ", which no op of its device computes"
                                  : "does not wait for " + node_label(g.node(w->second)) +
                                        ", the last weight gradient of its stage on its device");
      }
    }
    const auto step = optimizer.find(n.device);
    if (step != optimizer.end() && !has_data_edge(graph, id, step->second)) {
      return make_violation(
          g, step->second, "grads",
          "does not wait for " + g.node_name(id) +
              (n.kind == NodeKind::recv ? " (the other copy's gradients it adds in)"
                                        : " (the send reads the gradients it changes)"));
    }
  }
  for (const auto& [key, seen] : expected) {
    if (seen > 0) continue;
    const auto [stage, to] = key;
    return make_violation(g, -1, "grads",
                          "stage " + std::to_string(stage) +
                              "'s weight gradients are never sent to device " + std::to_string(to) +
                              ", which holds another copy of it (its weights would drift apart "
                              "from this copy's)");
  }
  return std::nullopt;
}

// A pipeline send or recv holds no memory of its own: the ops around it do (the simulator and run
// count every node's bytes, so bytes here would be counted where the memory rules do not look).
// BPipe transfers (a transfer stream) do hold the stash they move.
Result check_message_bytes(const TaskGraph& g) {
  for (std::size_t s = 0; s < g.streams().size(); ++s) {
    const StreamRole role = g.streams()[s].role;
    if (role != StreamRole::send && role != StreamRole::recv) continue;
    for (const int id : g.stream_order(static_cast<int>(s))) {
      const Node& n = g.node(id);
      if (n.alloc_bytes != 0 || n.free_bytes != 0 || n.work_bytes != 0) {
        return make_violation(g, id, "memory",
                              "is a transfer with alloc, free or work bytes (only compute nodes "
                              "and BPipe transfers hold memory)");
      }
    }
  }
  return std::nullopt;
}

// Without BPipe transfers: with them, memory moves between devices at times that the stream
// orders do not fix, and check_transfer_memory (planner/graph/bpipe_check.cpp) checks the simulated
// timeline instead.
Result check_memory(const TaskGraph& g) {
  for (std::size_t s = 0; s < g.streams().size(); ++s) {
    const Stream& stream = g.streams()[s];
    if (stream.role != StreamRole::compute) continue;
    const auto d = static_cast<std::size_t>(stream.device);
    const double limit = d < g.meta.memory_limit_bytes.size() ? g.meta.memory_limit_bytes[d] : 0;
    const std::int64_t base = d < g.meta.static_bytes.size() ? g.meta.static_bytes[d] : 0;
    std::int64_t current = base;
    if (auto v = check_static_memory(g, stream.device)) return v;
    // An overlapped pair (Node::overlaps_next and the next node of the stream) starts and ends
    // as one op: both allocations and both working memories are held at once, as the simulator
    // holds them.
    const std::vector<int>& order = g.stream_order(static_cast<int>(s));
    for (std::size_t i = 0; i < order.size(); ++i) {
      const Node& n = g.node(order[i]);
      const bool pair = n.overlaps_next && i + 1 < order.size();
      const Node* second = pair ? &g.node(order[i + 1]) : nullptr;
      current += n.alloc_bytes + (pair ? second->alloc_bytes : 0);
      // Its working memory while it runs.
      const std::int64_t during = current + n.work_bytes + (pair ? second->work_bytes : 0);
      if (limit > 0 && static_cast<double>(during) > limit) {
        const auto [reached, allowed] = gib_texts_apart(static_cast<double>(during), limit);
        return make_violation(
            g, order[i], "memory-limit",
            "device " + std::to_string(d) + " reaches " + reached + ", above its limit " + allowed);
      }
      current -= n.free_bytes + (pair ? second->free_bytes : 0);
      if (current < base) {
        return make_violation(g, order[i], "memory",
                              "frees " + std::to_string(base - current) +
                                  " bytes more than device " + std::to_string(d) +
                                  "'s ops allocated before it");
      }
      if (pair) ++i;
    }
  }
  return std::nullopt;
}

// The schedule text is what the graph runs: per device, its compute stream's nodes (the optimizer
// step aside, which is no action) are the schedule's actions for the device, in order, with the
// same op, stage, micro-batches and overlap. export writes the text; run executes the graph.
Result check_schedule_text(const TaskGraph& g) {
  const Schedule& schedule = g.schedule;
  std::vector<int> compute(static_cast<std::size_t>(schedule.devices), -1);
  for (std::size_t s = 0; s < g.streams().size(); ++s) {
    const Stream& stream = g.streams()[s];
    if (stream.role == StreamRole::compute && stream.device >= 0 &&
        stream.device < schedule.devices) {
      compute[static_cast<std::size_t>(stream.device)] = static_cast<int>(s);
    }
  }
  for (int d = 0; d < schedule.devices; ++d) {
    static const std::vector<Action> kNone;
    const std::vector<Action>& actions = static_cast<std::size_t>(d) < schedule.per_device.size()
                                             ? schedule.per_device[static_cast<std::size_t>(d)]
                                             : kNone;
    static const std::vector<int> kEmpty;
    const int stream = compute[static_cast<std::size_t>(d)];
    const std::vector<int>& order = stream >= 0 ? g.stream_order(stream) : kEmpty;
    std::size_t k = 0;
    for (const int id : order) {
      const Node& n = g.node(id);
      if (n.op == OpType::O) continue;
      if (k == actions.size()) {
        return make_violation(g, id, "schedule",
                              "is in the compute stream of device " + std::to_string(d) +
                                  " after the last of its " + std::to_string(actions.size()) +
                                  " actions in the schedule text");
      }
      const Action& a = actions[k];
      if (n.op != a.op || n.stage != a.stage || n.microbatches != a.microbatches ||
          n.overlaps_next != a.overlaps_next) {
        return make_violation(g, id, "schedule",
                              "is action " + std::to_string(k) + " of device " + std::to_string(d) +
                                  "'s compute stream, but the schedule text " + "has " +
                                  format_action(a) + (a.overlaps_next ? " (overlapped)" : "") +
                                  " there");
      }
      ++k;
    }
    if (k != actions.size()) {
      return make_violation(g, -1, "schedule",
                            "device " + std::to_string(d) + "'s compute stream runs " +
                                std::to_string(k) + " actions, the schedule text lists " +
                                std::to_string(actions.size()) +
                                " (the first missing: " + format_action(actions[k]) + ")");
    }
  }
  return std::nullopt;
}

}  // namespace

Violation make_violation(const TaskGraph& graph, int node, const std::string& rule,
                         const std::string& what) {
  std::string where = node >= 0 ? graph.node_name(node) + ": " : std::string();
  return Violation{node, rule, where + what + " (rule " + rule + ")"};
}

std::optional<Violation> check_static_memory(const TaskGraph& g, int device) {
  const auto d = static_cast<std::size_t>(device);
  const double limit = d < g.meta.memory_limit_bytes.size() ? g.meta.memory_limit_bytes[d] : 0;
  const std::int64_t base = d < g.meta.static_bytes.size() ? g.meta.static_bytes[d] : 0;
  if (limit <= 0 || static_cast<double>(base) <= limit) return std::nullopt;
  const auto [needed, allowed] = gib_texts_apart(static_cast<double>(base), limit);
  return make_violation(g, -1, "memory-limit",
                        "device " + std::to_string(device) + " needs " + needed +
                            " for parameters, gradients and optimizer state, above its limit " +
                            allowed);
}

std::pair<std::string, std::string> gib_texts_apart(double a, double b) {
  std::pair<std::string, std::string> texts{gib_text(a), gib_text(b)};
  if (texts.first == texts.second && a != b) {
    char buffer[40];
    std::snprintf(buffer, sizeof buffer, " (%.0f bytes)", a);
    texts.first += buffer;
    std::snprintf(buffer, sizeof buffer, " (%.0f bytes)", b);
    texts.second += buffer;
  }
  return texts;
}

std::string gib_text(double bytes) {
  constexpr double kKiB = 1024.0;
  constexpr double kMiB = kKiB * 1024;
  constexpr double kGiB = kMiB * 1024;
  char buffer[40];
  // Two decimals of the largest unit that shows them: "0.00 GiB" says nothing of 300 KiB.
  if (bytes == 0 || std::abs(bytes) >= 0.01 * kGiB) {
    std::snprintf(buffer, sizeof buffer, "%.2f GiB", bytes / kGiB);
  } else if (std::abs(bytes) >= 0.01 * kMiB) {
    std::snprintf(buffer, sizeof buffer, "%.2f MiB", bytes / kMiB);
  } else if (std::abs(bytes) >= kKiB) {
    std::snprintf(buffer, sizeof buffer, "%.2f KiB", bytes / kKiB);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.0f bytes", bytes);
  }
  return buffer;
}

TaskGraph load_valid_plan(const std::filesystem::path& path) {
  TaskGraph graph = load_plan(path);
  if (const auto violation = find_violation(graph)) {
    throw Error(input_name(path) + ": invalid plan: " + violation->message);
  }
  return graph;
}

std::optional<Violation> find_violation(const TaskGraph& graph) {
  return find_violation(graph, false);
}

std::optional<Violation> find_violation(const TaskGraph& graph, bool known_acyclic) {
  const Context c(graph);
  const bool transfers = has_transfers(graph);
  for (const auto check :
       {check_streams, check_matches, check_pair_order, check_overlap, check_optimizer}) {
    if (auto v = check(c)) return v;
  }
  if (transfers) {
    if (auto v = check_transfer_order(graph)) return v;
  }
  if (!known_acyclic) {
    if (auto v = check_acyclic(c)) return v;
  }
  ComputeTable table(graph.schedule.stage_count(), graph.meta.microbatches);
  if (auto v = index_compute(c, table)) return v;
  if (auto v = check_coverage(c, table)) return v;
  if (auto v = check_inputs(c, table)) return v;
  if (auto v = check_grads(c)) return v;
  if (auto v = check_message_bytes(graph)) return v;
  if (!transfers) {
    if (auto v = check_memory(graph)) return v;
  } else {
    for (const auto check : {check_transfer_use, check_transfer_memory}) {
      if (auto v = check(graph)) return v;
    }
  }
  return check_schedule_text(graph);
}

void validate(const TaskGraph& graph) {
  if (const auto v = find_violation(graph)) throw Error("invalid plan: " + v->message);
}

void validate(const TaskGraph& graph, std::string_view source) {
  if (const auto v = find_violation(graph)) {
    throw Error(std::string(source) + ": invalid plan: " + v->message);
  }
}

}  // namespace pipeplan
