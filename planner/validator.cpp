#include "planner/validator.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "planner/error.h"

namespace pipeplan {

namespace {

using Result = std::optional<Violation>;

Violation violation(const TaskGraph& g, int node, const std::string& rule,
                    const std::string& what) {
  std::string where = node >= 0 ? g.node_name(node) + ": " : std::string();
  return Violation{node, rule, where + what + " (rule " + rule + ")"};
}

std::string gib(double bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buffer;
}

// Every node sits in exactly one stream, its own, and the stream's role fits the node's kind.
Result check_streams(const TaskGraph& g) {
  std::vector<int> seen(static_cast<std::size_t>(g.node_count()), 0);
  for (std::size_t s = 0; s < g.streams().size(); ++s) {
    const Stream& stream = g.streams()[s];
    for (const int id : g.stream_order(static_cast<int>(s))) {
      const Node& n = g.node(id);
      if (++seen[static_cast<std::size_t>(id)] > 1) {
        return violation(g, id, "stream", "appears twice in stream orders");
      }
      if (n.stream != static_cast<int>(s) || n.device != stream.device) {
        return violation(g, id, "stream", "is listed in the order of another stream");
      }
      const bool role_ok =
          (n.kind == NodeKind::compute && stream.role == StreamRole::compute) ||
          (n.kind == NodeKind::send && stream.role == StreamRole::send && n.peer == stream.peer) ||
          (n.kind == NodeKind::recv && stream.role == StreamRole::recv && n.peer == stream.peer);
      if (!role_ok) return violation(g, id, "stream", "runs on a stream of the wrong role");
    }
  }
  for (int id = 0; id < g.node_count(); ++id) {
    if (seen[static_cast<std::size_t>(id)] == 0) {
      return violation(g, id, "stream", "is in no stream order");
    }
  }
  return std::nullopt;
}

Result check_matches(const TaskGraph& g) {
  for (int id = 0; id < g.node_count(); ++id) {
    const Node& n = g.node(id);
    if (n.kind == NodeKind::compute) continue;
    const char* other_kind = n.kind == NodeKind::send ? "recv" : "send";
    if (n.match < 0 || n.match >= g.node_count()) {
      return violation(g, id, "send-recv-match", std::string("has no matching ") + other_kind);
    }
    const Node& m = g.node(n.match);
    if (m.kind == n.kind || m.kind == NodeKind::compute || m.match != id) {
      return violation(g, id, "send-recv-match",
                       std::string("is not paired with a ") + other_kind + " that names it back");
    }
    if (m.device != n.peer || m.peer != n.device) {
      return violation(g, id, "send-recv-match", "its peer and its match's device disagree");
    }
    if (m.bytes != n.bytes || m.label != n.label) {
      return violation(g, id, "send-recv-match",
                       "size or tag differs from its match (" + std::to_string(n.bytes) + " vs " +
                           std::to_string(m.bytes) + " bytes)");
    }
  }
  return std::nullopt;
}

// Per peer pair, the k-th send must meet the k-th receive, or point-to-point deadlocks.
Result check_pair_order(const TaskGraph& g) {
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
      return violation(g, sends.empty() ? -1 : sends.front(), "send-recv-order",
                       "no receive stream on device " + std::to_string(stream.peer));
    }
    const auto& recvs = g.stream_order(recv_stream);
    for (std::size_t k = 0; k < sends.size() && k < recvs.size(); ++k) {
      if (g.node(sends[k]).match != recvs[k]) {
        return violation(g, sends[k], "send-recv-order",
                         "is send #" + std::to_string(k) + " to device " +
                             std::to_string(stream.peer) + " but receive #" + std::to_string(k) +
                             " there is " + g.node_name(recvs[k]));
      }
    }
    if (sends.size() != recvs.size()) {
      return violation(g, sends.empty() ? -1 : sends.front(), "send-recv-order",
                       std::to_string(sends.size()) + " sends but " + std::to_string(recvs.size()) +
                           " receives on the pair");
    }
  }
  return std::nullopt;
}

// Acyclic once each send/recv pair is one event (a rendezvous waits on both sides' inputs).
Result check_acyclic(const TaskGraph& g) {
  const auto& graph = g.graph();
  const auto n = static_cast<std::size_t>(g.node_count());
  std::vector<std::size_t> rep(n);
  for (std::size_t v = 0; v < n; ++v) {
    const Node& node = graph[v];
    rep[v] = node.kind != NodeKind::compute && node.match >= 0
                 ? std::min(v, static_cast<std::size_t>(node.match))
                 : v;
  }
  std::vector<int> indegree(n, 0);
  for (auto [it, end] = boost::edges(graph); it != end; ++it) {
    const auto a = rep[boost::source(*it, graph)];
    const auto b = rep[boost::target(*it, graph)];
    if (a != b) ++indegree[b];
  }
  std::vector<std::size_t> stack;
  for (std::size_t v = 0; v < n; ++v) {
    if (rep[v] == v && indegree[v] == 0) stack.push_back(v);
  }
  // The members of an event: the node, and for a send/recv its other half.
  auto members = [&](std::size_t v) {
    std::vector<std::size_t> m{v};
    const Node& node = graph[v];
    if (node.kind != NodeKind::compute && node.match >= 0) {
      m.push_back(static_cast<std::size_t>(node.match));
    }
    return m;
  };
  std::vector<char> done(n, 0);
  while (!stack.empty()) {
    const auto v = stack.back();
    stack.pop_back();
    done[v] = 1;
    for (const auto member : members(v)) {
      for (auto [it, end] = boost::out_edges(member, graph); it != end; ++it) {
        const auto b = rep[boost::target(*it, graph)];
        if (b != v && --indegree[b] == 0) stack.push_back(b);
      }
    }
  }
  for (std::size_t v = 0; v < n; ++v) {
    if (rep[v] != v || done[v]) continue;
    // Walk back along unfinished predecessors until an event repeats: it lies on a cycle.
    std::vector<char> visited(n, 0);
    std::size_t cur = v;
    while (!visited[cur]) {
      visited[cur] = 1;
      std::size_t next = cur;
      for (const auto member : members(cur)) {
        for (auto [it, end] = boost::in_edges(member, graph); it != end && next == cur; ++it) {
          const auto p = rep[boost::source(*it, graph)];
          if (p != cur && !done[p]) next = p;
        }
      }
      if (next == cur) break;
      cur = next;
    }
    return violation(g, static_cast<int>(cur), "acyclic", "lies on a dependency cycle");
  }
  return std::nullopt;
}

struct OpKey {
  OpType op;
  int stage;
  int mb;
  bool operator<(const OpKey& other) const {
    return std::tie(op, stage, mb) < std::tie(other.op, other.stage, other.mb);
  }
};

// Compute nodes by (op, stage, micro-batch); P1 and B both answer for "backward".
std::map<OpKey, int> index_compute(const TaskGraph& g) {
  std::map<OpKey, int> index;
  for (int id = 0; id < g.node_count(); ++id) {
    const Node& n = g.node(id);
    if (n.kind != NodeKind::compute) continue;
    for (const int mb : n.microbatches)
      index.emplace(OpKey{n.op, n.stage, mb}, id);
  }
  return index;
}

Result check_coverage(const TaskGraph& g) {
  const int stages = g.schedule.stage_count();
  std::map<OpKey, int> count;
  std::vector<int> position(static_cast<std::size_t>(g.node_count()), -1);
  for (std::size_t s = 0; s < g.streams().size(); ++s) {
    const auto& order = g.stream_order(static_cast<int>(s));
    for (std::size_t i = 0; i < order.size(); ++i) {
      position[static_cast<std::size_t>(order[i])] = static_cast<int>(i);
    }
  }
  for (int id = 0; id < g.node_count(); ++id) {
    const Node& n = g.node(id);
    if (n.kind != NodeKind::compute) continue;
    if (n.stage < 0 || n.stage >= stages) {
      return violation(g, id, "coverage", "belongs to unknown stage " + std::to_string(n.stage));
    }
    if (g.schedule.stage_device[static_cast<std::size_t>(n.stage)] != n.device) {
      return violation(g, id, "coverage", "runs on a device that does not hold its stage");
    }
    for (const int mb : n.microbatches) {
      if (mb < 0 || mb >= g.meta.microbatches) {
        return violation(g, id, "coverage", "names unknown micro-batch " + std::to_string(mb));
      }
      const OpType cls = n.op == OpType::B ? OpType::P1 : n.op;
      if (++count[OpKey{cls, n.stage, mb}] > 1) {
        return violation(
            g, id, "coverage",
            "repeats micro-batch " + std::to_string(mb) + " of stage " + std::to_string(n.stage));
      }
    }
  }
  const auto index = index_compute(g);
  for (int s = 0; s < stages; ++s) {
    for (int mb = 0; mb < g.meta.microbatches; ++mb) {
      const std::string what = "stage " + std::to_string(s) + " micro-batch " + std::to_string(mb);
      const auto f = index.find({OpType::F, s, mb});
      const auto b = index.find({OpType::B, s, mb});
      const auto p1 = index.find({OpType::P1, s, mb});
      const auto p2 = index.find({OpType::P2, s, mb});
      if (f == index.end()) return violation(g, -1, "coverage", what + " has no forward");
      const bool fused = b != index.end();
      if (!fused && (p1 == index.end() || p2 == index.end())) {
        return violation(g, f->second, "coverage", what + " lacks its p1 or p2");
      }
      const int back = fused ? b->second : p1->second;
      if (position[static_cast<std::size_t>(back)] <
          position[static_cast<std::size_t>(f->second)]) {
        return violation(g, back, "f-before-p1", "runs before the forward of " + what);
      }
      if (!fused && position[static_cast<std::size_t>(p2->second)] <
                        position[static_cast<std::size_t>(p1->second)]) {
        return violation(g, p2->second, "p1-before-p2", "runs before the p1 of " + what);
      }
    }
  }
  return std::nullopt;
}

// True when `consumer` reads `producer`'s output: a direct data edge, or through a send/recv.
bool feeds(const TaskGraph& g, int producer, int consumer) {
  const auto& graph = g.graph();
  for (auto [it, end] = boost::in_edges(static_cast<std::size_t>(consumer), graph); it != end;
       ++it) {
    if (graph[*it] != EdgeKind::data) continue;
    const int from = static_cast<int>(boost::source(*it, graph));
    if (from == producer) return true;
    const Node& r = g.node(from);
    if (r.kind != NodeKind::recv || r.match < 0) continue;
    for (auto [jt, jend] = boost::in_edges(static_cast<std::size_t>(r.match), graph); jt != jend;
         ++jt) {
      if (graph[*jt] == EdgeKind::data && static_cast<int>(boost::source(*jt, graph)) == producer) {
        return true;
      }
    }
  }
  return false;
}

Result check_inputs(const TaskGraph& g) {
  const auto index = index_compute(g);
  const int stages = g.schedule.stage_count();
  auto backward_of = [&](int stage, int mb) {
    auto it = index.find({OpType::B, stage, mb});
    if (it == index.end()) it = index.find({OpType::P1, stage, mb});
    return it->second;
  };
  for (const auto& entry : index) {
    const OpKey& key = entry.first;
    const int id = entry.second;
    const auto need = [&](int producer, const char* what) -> Result {
      if (feeds(g, producer, id)) return std::nullopt;
      return violation(g, id, "inputs",
                       std::string("does not wait for ") + what + " " + g.node(producer).label);
    };
    Result r;
    if (key.op == OpType::F && key.stage > 0) {
      r = need(index.at({OpType::F, key.stage - 1, key.mb}), "the activation from");
    } else if (key.op == OpType::B || key.op == OpType::P1) {
      r = need(index.at({OpType::F, key.stage, key.mb}), "its forward");
      if (!r && key.stage + 1 < stages) {
        r = need(backward_of(key.stage + 1, key.mb), "the gradient from");
      }
    } else if (key.op == OpType::P2) {
      r = need(index.at({OpType::P1, key.stage, key.mb}), "its p1");
    }
    if (r) return r;
  }
  return std::nullopt;
}

Result check_memory(const TaskGraph& g) {
  for (std::size_t s = 0; s < g.streams().size(); ++s) {
    const Stream& stream = g.streams()[s];
    if (stream.role != StreamRole::compute) continue;
    const auto d = static_cast<std::size_t>(stream.device);
    const double limit = d < g.meta.memory_limit_bytes.size() ? g.meta.memory_limit_bytes[d] : 0;
    if (limit <= 0) continue;
    std::int64_t current = d < g.meta.static_bytes.size() ? g.meta.static_bytes[d] : 0;
    if (static_cast<double>(current) > limit) {
      return violation(
          g, -1, "memory-limit",
          "device " + std::to_string(d) + " needs " + gib(static_cast<double>(current)) +
              " for parameters, gradients and optimizer state, above its limit " + gib(limit));
    }
    for (const int id : g.stream_order(static_cast<int>(s))) {
      const Node& n = g.node(id);
      current += n.alloc_bytes;
      if (static_cast<double>(current) > limit) {
        return violation(g, id, "memory-limit",
                         "device " + std::to_string(d) + " reaches " +
                             gib(static_cast<double>(current)) + ", above its limit " + gib(limit));
      }
      current -= n.free_bytes;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<Violation> find_violation(const TaskGraph& graph) {
  for (const auto check : {check_streams, check_matches, check_pair_order, check_acyclic,
                           check_coverage, check_inputs, check_memory}) {
    if (auto v = check(graph)) return v;
  }
  return std::nullopt;
}

void validate(const TaskGraph& graph) {
  if (const auto v = find_violation(graph)) throw Error("invalid plan: " + v->message);
}

}  // namespace pipeplan
