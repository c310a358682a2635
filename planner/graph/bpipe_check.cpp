#include "planner/graph/bpipe_check.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "planner/graph/simulator.h"

namespace pipeplan {

namespace {

using Result = std::optional<Violation>;

bool on_transfer_stream(const TaskGraph& g, int id) {
  const int s = g.node(id).stream;
  return s >= 0 && s < static_cast<int>(g.streams().size()) &&
         g.streams()[static_cast<std::size_t>(s)].role == StreamRole::transfer;
}

// The data-edge predecessor of `id` that satisfies `pred`, or -1 (`preds` from predecessors()).
template <typename Pred>
int data_predecessor(const TaskGraph& g,
                     const std::vector<std::vector<std::pair<int, EdgeKind>>>& preds, int id,
                     Pred pred) {
  for (const auto& [other, kind] : preds[static_cast<std::size_t>(id)]) {
    if (kind == EdgeKind::data && pred(g.node(other))) return other;
  }
  return -1;
}

// The data-edge successor of `id` that satisfies `pred`, or -1.
template <typename Pred>
int data_successor(const TaskGraph& g, int id, Pred pred) {
  const auto& graph = g.graph();
  for (auto [it, end] = boost::out_edges(static_cast<std::size_t>(id), graph); it != end; ++it) {
    const int other = static_cast<int>(boost::target(*it, graph));
    if (graph[*it] == EdgeKind::data && pred(g.node(other))) return other;
  }
  return -1;
}

}  // namespace

bool has_transfers(const TaskGraph& graph) {
  for (const Stream& s : graph.streams()) {
    if (s.role == StreamRole::transfer) return true;
  }
  return false;
}

Result check_transfer_order(const TaskGraph& g) {
  const auto& streams = g.streams();
  for (std::size_t s = 0; s < streams.size(); ++s) {
    const Stream& mine = streams[s];
    if (mine.role != StreamRole::transfer) continue;
    int theirs = -1;
    for (std::size_t r = 0; r < streams.size(); ++r) {
      if (streams[r].role == StreamRole::transfer && streams[r].device == mine.peer &&
          streams[r].peer == mine.device) {
        theirs = static_cast<int>(r);
      }
    }
    const auto& a = g.stream_order(static_cast<int>(s));
    if (theirs < 0) {
      return make_violation(g, a.empty() ? -1 : a.front(), "transfer-order",
                            "no transfer stream on device " + std::to_string(mine.peer));
    }
    const auto& b = g.stream_order(theirs);
    for (std::size_t k = 0; k < a.size() && k < b.size(); ++k) {
      if (g.node(a[k]).match != b[k]) {
        return make_violation(g, a[k], "transfer-order",
                              "is transfer #" + std::to_string(k) + " with device " +
                                  std::to_string(mine.peer) + " but transfer #" +
                                  std::to_string(k) + " there is " + g.node_name(b[k]));
      }
    }
    if (a.size() != b.size()) {
      return make_violation(g, a.empty() ? -1 : a.front(), "transfer-order",
                            std::to_string(a.size()) + " transfers here but " +
                                std::to_string(b.size()) + " on device " +
                                std::to_string(mine.peer));
    }
  }
  return std::nullopt;
}

Result check_transfer_use(const TaskGraph& g) {
  const auto preds = predecessors(g);
  for (int id = 0; id < g.node_count(); ++id) {
    if (!on_transfer_stream(g, id)) continue;
    const Node& n = g.node(id);
    const int mb = n.microbatches.empty() ? -1 : n.microbatches.front();
    auto same_op = [&](const Node& other, bool backward) {
      const bool op_ok =
          backward ? (other.op == OpType::B || other.op == OpType::P1) : other.op == OpType::F;
      return other.kind == NodeKind::compute && op_ok && other.stage == n.stage &&
             !other.microbatches.empty() && other.microbatches.front() == mb;
    };
    if (!is_stash_move(n.transfer)) {
      return make_violation(
          g, id, "transfer-use",
          "is a " + std::string(to_string(n.transfer)) + " transfer, neither an evict nor a load");
    }
    // The stash leaves the sender's memory and enters the receiver's, its size as the message
    // says (both ends carry it: check_matches): a move whose bytes are off would hold the stash
    // on neither device, or on both, and the memory rules would count something else.
    const bool send = n.kind == NodeKind::send;
    const std::int64_t moved = send ? n.free_bytes : n.alloc_bytes;  // what its end changes
    const std::int64_t other = send ? n.alloc_bytes : n.free_bytes;
    if (n.bytes <= 0 || moved != n.bytes || other != 0 || n.work_bytes != 0) {
      const std::string verb = send ? "frees" : "allocates";
      return make_violation(g, id, "transfer-use",
                            "moves a stash of " + std::to_string(n.bytes) + " bytes but " + verb +
                                " " + std::to_string(moved) + " (" + (send ? "alloc " : "free ") +
                                std::to_string(other) + ", work " + std::to_string(n.work_bytes) +
                                "); a " + (send ? "send " : "recv ") + verb +
                                " exactly the bytes it moves and nothing else");
    }
    const bool evict = n.transfer == Transfer::evict;
    if (n.kind == NodeKind::send && evict &&
        data_predecessor(g, preds, id, [&](const Node& o) { return same_op(o, false); }) < 0) {
      return make_violation(g, id, "transfer-use",
                            "does not wait for the forward that made the stash");
    }
    if (n.kind == NodeKind::send && !evict) {
      const int from = data_predecessor(g, preds, id, [&](const Node& o) {
        return o.kind == NodeKind::recv && o.transfer == Transfer::evict && o.stage == n.stage &&
               !o.microbatches.empty() && o.microbatches.front() == mb;
      });
      if (from < 0) {
        return make_violation(g, id, "transfer-use",
                              "loads a stash whose evict it does not wait for");
      }
    }
    if (n.kind == NodeKind::recv && evict &&
        data_successor(g, id, [&](const Node& o) {
          return o.kind == NodeKind::send && o.transfer == Transfer::load && o.stage == n.stage &&
                 !o.microbatches.empty() && o.microbatches.front() == mb;
        }) < 0) {
      return make_violation(g, id, "transfer-use",
                            "holds an evicted stash that no load sends back (its backward would "
                            "run without it)");
    }
    if (n.kind == NodeKind::recv && !evict &&
        data_successor(g, id, [&](const Node& o) { return same_op(o, true); }) < 0) {
      return make_violation(
          g, id, "transfer-use",
          "is not waited for by the backward that reads the stash (use before load)");
    }
  }
  return std::nullopt;
}

Result check_transfer_memory(const TaskGraph& g) {
  if (!has_transfers(g)) return std::nullopt;
  // Static memory over the limit is no instant's fault: say so as check_memory does.
  for (std::size_t d = 0; d < g.meta.static_bytes.size(); ++d) {
    if (auto v = check_static_memory(g, static_cast<int>(d))) return v;
  }
  const SimResult sim = simulate(g);
  for (std::size_t d = 0; d < sim.devices.size(); ++d) {
    // Never below the device's static memory: a node that frees more than its device holds.
    const std::int64_t base = d < g.meta.static_bytes.size() ? g.meta.static_bytes[d] : 0;
    for (const auto& [time, bytes] : sim.devices[d].memory_timeline) {
      if (bytes >= base) continue;
      char when[48];
      std::snprintf(when, sizeof when, "%.3f ms", time / 1e3);
      return make_violation(g, -1, "memory",
                            "device " + std::to_string(d) + " frees " +
                                std::to_string(base - bytes) + " bytes more than it holds at " +
                                when + " (simulated)");
    }
  }
  for (std::size_t d = 0; d < sim.devices.size(); ++d) {
    const double limit = d < g.meta.memory_limit_bytes.size() ? g.meta.memory_limit_bytes[d] : 0;
    if (limit <= 0) continue;
    for (const auto& [time, bytes] : sim.devices[d].memory_timeline) {
      if (static_cast<double>(bytes) <= limit) continue;
      // The node that allocated at that instant, for the message.
      int culprit = -1;
      for (int id = 0; id < g.node_count() && culprit < 0; ++id) {
        const Node& n = g.node(id);
        if (n.device == static_cast<int>(d) && n.alloc_bytes > 0 &&
            sim.times[static_cast<std::size_t>(id)].start_us == time) {
          culprit = id;
        }
      }
      char when[48];
      std::snprintf(when, sizeof when, "%.3f ms", time / 1e3);
      const auto [reached, allowed] = gib_texts_apart(static_cast<double>(bytes), limit);
      return make_violation(g, culprit, "memory-limit",
                            "device " + std::to_string(d) + " reaches " + reached + " at " + when +
                                " (simulated), above its limit " + allowed);
    }
  }
  return std::nullopt;
}

}  // namespace pipeplan
