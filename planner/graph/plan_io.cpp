// Plan (task graph) JSON and Graphviz DOT. Format: docs/reference/plan-format.md.
#include <algorithm>
#include <ostream>

#include <boost/graph/graphviz.hpp>
#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"
#include "planner/graph/taskgraph.h"

namespace pipeplan {

namespace {

constexpr std::string_view kPlanFormat = "pipeplan-plan";
// Version 2 stores each send/recv's `transfer` kind; version 1 plans are still read (see
// transfer_of_v1).
constexpr int kPlanVersion = 2;
constexpr int kOldestPlanVersion = 1;

NodeKind node_kind_from_string(std::string_view text, const std::string& context) {
  if (text == "compute") return NodeKind::compute;
  if (text == "send") return NodeKind::send;
  if (text == "recv") return NodeKind::recv;
  throw Error(context + ": field 'kind' must be compute, send or recv");
}

StreamRole stream_role_from_string(std::string_view text, const std::string& context) {
  if (text == "compute") return StreamRole::compute;
  if (text == "send") return StreamRole::send;
  if (text == "recv") return StreamRole::recv;
  if (text == "transfer") return StreamRole::transfer;
  throw Error(context + ": field 'role' must be compute, send, recv or transfer");
}

Transfer transfer_from_string(std::string_view text, const std::string& context) {
  for (const Transfer t :
       {Transfer::activation, Transfer::gradient, Transfer::evict, Transfer::load}) {
    if (text == to_string(t)) return t;
  }
  throw Error(context + ": field 'transfer' must be activation, gradient, evict or load");
}

// Version 1 had no transfer kind: BPipe moves were told apart by their label alone. This is
// the one place that still reads a label for meaning, and only for files of that version.
Transfer transfer_of_v1(const Node& n, const std::string& label, StreamRole role,
                        const std::string& context) {
  if (role != StreamRole::transfer) {
    return n.op == OpType::F ? Transfer::activation : Transfer::gradient;
  }
  if (label.starts_with("evict ")) return Transfer::evict;
  if (label.starts_with("load ")) return Transfer::load;
  throw Error(context +
              ": field 'label' of a version 1 transfer-stream node must start with "
              "'evict ' or 'load '");
}

OpType op_from_string(std::string_view text, const std::string& context) {
  for (const OpType op : {OpType::F, OpType::B, OpType::P1, OpType::P2}) {
    if (text == to_string(op)) return op;
  }
  throw Error(context + ": field 'op' must be F, B, P1 or P2");
}

// An integer JSON value in [lo, hi] (unsigned values beyond int64 count as out of range).
bool int_in(const nlohmann::json& v, std::int64_t lo, std::int64_t hi) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    return hi >= 0 && u <= static_cast<std::uint64_t>(hi) &&
           (lo <= 0 || u >= static_cast<std::uint64_t>(lo));
  }
  const auto x = v.get<std::int64_t>();
  return x >= lo && x <= hi;
}

std::int64_t require_int64(const nlohmann::json& object, std::string_view field,
                           const std::string& context, std::int64_t lo, std::int64_t hi) {
  const auto& v = require_field(object, field, context);
  if (!v.is_number_integer()) {
    throw Error(context + ": field '" + std::string(field) + "' must be an integer");
  }
  if (!int_in(v, lo, hi)) {
    throw Error(context + ": field '" + std::string(field) + "' = " + v.dump() +
                " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v.get<std::int64_t>();
}

int require_int(const nlohmann::json& object, std::string_view field, const std::string& context,
                std::int64_t lo, std::int64_t hi) {
  return static_cast<int>(require_int64(object, field, context, lo, hi));
}

// A finite number in [0, hi].
double require_bounded(const nlohmann::json& object, std::string_view field,
                       const std::string& context, double hi) {
  const double v = require_nonnegative(object, field, context);
  if (v > hi) {
    throw Error(context + ": field '" + std::string(field) + "' " +
                limits::above_limit("(" + require_field(object, field, context).dump() + ")", hi));
  }
  return v;
}

nlohmann::json meta_to_json(const PlanMeta& m) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageLayers& s : m.stage_layers)
    stages.push_back({s.first_layer, s.layer_count});
  nlohmann::json j = {
      {"model", model_to_json(m.model)},
      {"gpu", m.gpu},
      {"devices", m.devices},
      {"chunks", m.chunks},
      {"microbatches", m.microbatches},
      {"mbs", m.mbs},
      {"seq", m.seq},
      {"schedule", m.schedule},
      {"backward", std::string(to_string(m.backward))},
      {"p2_concat", m.p2_concat},
      {"attention", std::string(to_string(m.attention))},
      {"stage_layers", stages},
      {"memory_limit_bytes", m.memory_limit_bytes},
      {"static_bytes", m.static_bytes},
      {"flops_per_token", m.flops_per_token},
      {"peak_flops_per_device", m.peak_flops_per_device},
      {"link", {{"latency_us", m.link.latency_us}, {"bandwidth_GBps", m.link.bandwidth_GBps}}},
      {"profile_source", m.profile_source}};
  if (!m.contention.empty()) j["contention"] = contention_to_json(m.contention);
  return j;
}

// Wraps an Error from a reader that does not know the file (backward mode, attention) so it
// names the file and field.
template <typename F>
auto named(const std::string& ctx, std::string_view field, F&& read) {
  try {
    return read();
  } catch (const FieldError& e) {  // a request field's name means nothing in a file
    throw Error(ctx + ": field '" + std::string(field) + "': " + e.detail());
  } catch (const Error& e) {
    throw Error(ctx + ": field '" + std::string(field) + "': " + e.what());
  }
}

PlanMeta meta_from_json(const nlohmann::json& j, const std::string& source) {
  const std::string ctx = source + ": meta";
  PlanMeta m;
  m.model = model_from_json(require_field(j, "model", ctx), ctx + ".model");
  m.gpu = require_string(j, "gpu", ctx);
  m.devices = require_int(j, "devices", ctx, 1, limits::kMaxDevices);
  m.chunks = require_int(j, "chunks", ctx, 1, limits::kMaxChunks);
  m.microbatches = require_int(j, "microbatches", ctx, 1, limits::kMaxMicrobatches);
  m.mbs = require_int(j, "mbs", ctx, 1, limits::kMaxMicroBatchSize);
  m.seq = require_int(j, "seq", ctx, 0, limits::kMaxSeq);
  m.schedule = require_string(j, "schedule", ctx);
  m.backward = named(ctx, "backward",
                     [&] { return backward_mode_from_string(require_string(j, "backward", ctx)); });
  m.p2_concat = require_int(j, "p2_concat", ctx, 0, limits::kMaxMicrobatches);
  m.attention = named(ctx, "attention",
                      [&] { return attention_from_string(require_string(j, "attention", ctx)); });
  const auto& stages = require_field(j, "stage_layers", ctx);
  const auto layer_total = static_cast<std::int64_t>(m.model.layer_list().size());
  if (!stages.is_array() || stages.size() > static_cast<std::size_t>(limits::kMaxStages)) {
    throw Error(ctx + ": field 'stage_layers' must be an array of at most " +
                std::to_string(limits::kMaxStages) + " [first_layer, layer_count] pairs");
  }
  for (const auto& s : stages) {
    if (!s.is_array() || s.size() != 2 || !int_in(s[0], 0, layer_total - 1) ||
        !int_in(s[1], 1, layer_total - s[0].get<std::int64_t>())) {
      throw Error(ctx +
                  ": field 'stage_layers' must hold [first_layer, layer_count] pairs within "
                  "the model's " +
                  std::to_string(layer_total) + " layers");
    }
    m.stage_layers.push_back({s[0].get<int>(), s[1].get<int>()});
  }
  const auto per_device = [&](std::string_view field, bool integers, double hi) {
    const auto& a = require_field(j, field, ctx);
    if (!a.is_array() || static_cast<int>(a.size()) != m.devices) {
      throw Error(ctx + ": field '" + std::string(field) + "' must be an array of " +
                  std::to_string(m.devices) + " numbers (one per device)");
    }
    for (const auto& v : a) {
      const bool ok = integers ? int_in(v, 0, static_cast<std::int64_t>(hi))
                               : v.is_number() && v.get<double>() >= 0 && v.get<double>() <= hi;
      if (!ok) {
        throw Error(ctx + ": field '" + std::string(field) + "' must hold " +
                    (integers ? "integers" : "numbers") + " from 0 to " +
                    std::to_string(static_cast<std::int64_t>(hi)) + " (docs/reference/limits.md)");
      }
    }
    return a;
  };
  m.memory_limit_bytes =
      per_device("memory_limit_bytes", false, limits::kMaxMemoryBytes).get<std::vector<double>>();
  m.static_bytes = per_device("static_bytes", true, static_cast<double>(limits::kMaxPlanBytes))
                       .get<std::vector<std::int64_t>>();
  m.flops_per_token = require_nonnegative(j, "flops_per_token", ctx);
  m.peak_flops_per_device = require_nonnegative(j, "peak_flops_per_device", ctx);
  const auto& link = require_field(j, "link", ctx);
  m.link.latency_us = require_bounded(link, "latency_us", ctx + ".link", limits::kMaxLinkLatencyUs);
  m.link.bandwidth_GBps = require_nonnegative(link, "bandwidth_GBps", ctx + ".link");
  m.profile_source = require_string(j, "profile_source", ctx);
  if (const auto c = j.find("contention"); c != j.end())
    m.contention = contention_from_json(*c, ctx);
  return m;
}

nlohmann::json node_to_json(int id, const Node& n) {
  nlohmann::json j = {{"id", id},
                      {"kind", std::string(to_string(n.kind))},
                      {"op", std::string(to_string(n.op))},
                      {"device", n.device},
                      {"stream", n.stream},
                      {"stage", n.stage},
                      {"microbatches", n.microbatches},
                      {"duration_us", n.duration_us},
                      {"label", node_label(n)},
                      {"alloc_bytes", n.alloc_bytes},
                      {"free_bytes", n.free_bytes}};
  // Written only when the profile gave working memory: plans without it stay as they were.
  if (n.work_bytes > 0) j["work_bytes"] = n.work_bytes;
  if (n.kind != NodeKind::compute) {
    j["transfer"] = std::string(to_string(n.transfer));
    j["bytes"] = n.bytes;
    j["peer"] = n.peer;
    j["match"] = n.match;
  }
  return j;
}

Node node_from_json(const nlohmann::json& j, const std::string& ctx, const TaskGraph& g, int nodes,
                    int version) {
  const int devices = g.meta.devices;
  const int streams = static_cast<int>(g.streams().size());
  Node n;
  n.kind = node_kind_from_string(require_string(j, "kind", ctx), ctx);
  n.op = op_from_string(require_string(j, "op", ctx), ctx);
  n.device = require_int(j, "device", ctx, 0, devices - 1);
  n.stream = require_int(j, "stream", ctx, 0, streams - 1);
  n.stage = require_int(j, "stage", ctx, 0, limits::kMaxStages - 1);
  const auto& mbs = require_field(j, "microbatches", ctx);
  if (!mbs.is_array() || mbs.empty() ||
      mbs.size() > static_cast<std::size_t>(g.meta.microbatches)) {
    throw Error(ctx + ": field 'microbatches' must be a non-empty array of at most meta's " +
                std::to_string(g.meta.microbatches) + " micro-batches");
  }
  for (const auto& mb : mbs) {
    if (!int_in(mb, 0, g.meta.microbatches - 1)) {
      throw Error(ctx + ": field 'microbatches' must hold integers from 0 to " +
                  std::to_string(g.meta.microbatches - 1));
    }
    n.microbatches.push_back(mb.get<int>());
  }
  n.duration_us = require_bounded(j, "duration_us", ctx, limits::kMaxNodeTimeUs);
  std::string label = require_string(j, "label", ctx);
  n.alloc_bytes = require_int64(j, "alloc_bytes", ctx, 0, limits::kMaxPlanBytes);
  n.free_bytes = require_int64(j, "free_bytes", ctx, 0, limits::kMaxPlanBytes);
  if (j.contains("work_bytes")) {
    n.work_bytes = require_int64(j, "work_bytes", ctx, 0, limits::kMaxPlanBytes);
  }
  if (n.kind == NodeKind::compute) {
    if (j.contains("transfer")) throw Error(ctx + ": field 'transfer' is for send/recv nodes only");
    set_label(n, std::move(label));
    return n;
  }
  n.bytes = require_int64(j, "bytes", ctx, 0, limits::kMaxPlanBytes);
  n.peer = require_int(j, "peer", ctx, 0, devices - 1);
  n.match = require_int(j, "match", ctx, -1, nodes - 1);
  n.transfer =
      version == 1
          ? transfer_of_v1(n, label, g.streams()[static_cast<std::size_t>(n.stream)].role, ctx)
          : transfer_from_string(require_string(j, "transfer", ctx), ctx);
  set_label(n, std::move(label));  // once the fields that spell it are read
  return n;
}

}  // namespace

nlohmann::json plan_to_json(const TaskGraph& graph) {
  nlohmann::json streams = nlohmann::json::array();
  for (std::size_t i = 0; i < graph.streams().size(); ++i) {
    const Stream& s = graph.streams()[i];
    streams.push_back({{"device", s.device},
                       {"role", std::string(to_string(s.role))},
                       {"peer", s.peer},
                       {"order", graph.stream_order(static_cast<int>(i))}});
  }
  nlohmann::json nodes = nlohmann::json::array();
  for (int id = 0; id < graph.node_count(); ++id)
    nodes.push_back(node_to_json(id, graph.node(id)));
  nlohmann::json edges = nlohmann::json::array();
  for (auto [it, end] = boost::edges(graph.graph()); it != end; ++it) {
    if (graph.graph()[*it] != EdgeKind::data) continue;
    edges.push_back({boost::source(*it, graph.graph()), boost::target(*it, graph.graph())});
  }
  return {{"format", kPlanFormat},
          {"version", kPlanVersion},
          {"meta", meta_to_json(graph.meta)},
          {"schedule", schedule_to_text(graph.schedule)},
          {"streams", streams},
          {"nodes", nodes},
          {"edges", edges}};
}

TaskGraph plan_from_json(const nlohmann::json& json, std::string_view source_view) {
  const std::string source(source_view);
  const int version = require_format(json, kPlanFormat, kOldestPlanVersion, kPlanVersion, source);
  TaskGraph g;
  g.meta = meta_from_json(require_field(json, "meta", source), source);
  g.schedule = named(source, "schedule", [&] {
    Schedule schedule = schedule_from_text(require_string(json, "schedule", source));
    check_schedule(schedule);
    return schedule;
  });
  // What the validator, simulator, views and runtime index by: the schedule must be the plan's.
  if (g.schedule.devices != g.meta.devices || g.schedule.microbatches != g.meta.microbatches ||
      g.schedule.stage_count() != static_cast<int>(g.meta.stage_layers.size())) {
    throw Error(source + ": field 'schedule' has " + std::to_string(g.schedule.devices) +
                " devices, " + std::to_string(g.schedule.microbatches) + " micro-batches and " +
                std::to_string(g.schedule.stage_count()) + " stages; meta has " +
                std::to_string(g.meta.devices) + ", " + std::to_string(g.meta.microbatches) +
                " and " + std::to_string(g.meta.stage_layers.size()));
  }

  const auto& streams = require_field(json, "streams", source);
  if (!streams.is_array()) throw Error(source + ": field 'streams' must be an array");
  const auto& nodes = require_field(json, "nodes", source);
  if (!nodes.is_array()) throw Error(source + ": field 'nodes' must be an array");
  if (nodes.size() > static_cast<std::size_t>(limits::kMaxPlanNodes) ||
      streams.size() > static_cast<std::size_t>(limits::kMaxPlanNodes)) {
    throw Error(source + ": " +
                limits::above_limit(std::to_string(nodes.size()) + " nodes and " +
                                        std::to_string(streams.size()) + " streams",
                                    limits::kMaxPlanNodes));
  }
  const int node_total = static_cast<int>(nodes.size());
  std::vector<std::vector<int>> orders;
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const std::string ctx = source + ": streams[" + std::to_string(i) + "]";
    const int device = require_int(streams[i], "device", ctx, 0, g.meta.devices - 1);
    const StreamRole role = stream_role_from_string(require_string(streams[i], "role", ctx), ctx);
    const int peer = require_int(streams[i], "peer", ctx, -1, g.meta.devices - 1);
    if (g.stream(device, role, peer) != static_cast<int>(i)) {
      throw Error(ctx + ": duplicate stream");
    }
    const auto& order = require_field(streams[i], "order", ctx);
    if (!order.is_array()) throw Error(ctx + ": field 'order' must be an array of node ids");
    std::vector<int> ids;
    for (const auto& id : order) {
      if (!int_in(id, 0, node_total - 1)) {
        throw Error(ctx + ": field 'order' holds an unknown node id");
      }
      ids.push_back(id.get<int>());
    }
    orders.push_back(std::move(ids));
  }
  const int stream_total = static_cast<int>(g.streams().size());
  // Running memory totals add every allocation: their sum stays within kMaxPlanBytes.
  std::int64_t allocated = 0;
  for (const std::int64_t bytes : g.meta.static_bytes)
    allocated += bytes;
  for (int i = 0; i < node_total; ++i) {
    const std::string ctx = source + ": nodes[" + std::to_string(i) + "]";
    const auto& j = nodes[static_cast<std::size_t>(i)];
    if (require_integer(j, "id", ctx) != i)
      throw Error(ctx + ": field 'id' must equal " + std::to_string(i));
    Node node = node_from_json(j, ctx, g, node_total, version);
    allocated += node.alloc_bytes;
    if (allocated > limits::kMaxPlanBytes || allocated < 0) {
      throw Error(ctx + ": field 'alloc_bytes': " +
                  limits::above_limit("the plan's allocations",
                                      static_cast<double>(limits::kMaxPlanBytes), "bytes"));
    }
    g.add_node_unordered(std::move(node));
  }
  for (int s = 0; s < stream_total; ++s)
    g.set_stream_order(s, orders[static_cast<std::size_t>(s)]);

  const auto& edges = require_field(json, "edges", source);
  if (!edges.is_array()) throw Error(source + ": field 'edges' must be an array");
  for (std::size_t i = 0; i < edges.size(); ++i) {
    const auto& e = edges[i];
    if (!e.is_array() || e.size() != 2 || !int_in(e[0], 0, node_total - 1) ||
        !int_in(e[1], 0, node_total - 1)) {
      throw Error(source + ": edges[" + std::to_string(i) + "] must be [from, to] node ids");
    }
    g.add_data_edge(e[0].get<int>(), e[1].get<int>());
  }
  return g;
}

TaskGraph load_plan(const std::filesystem::path& path) {
  return plan_from_json(read_json_file(path), path.string());
}

void save_plan(const TaskGraph& graph, const std::filesystem::path& path) {
  write_file_atomic(path, plan_to_json(graph).dump(1) + "\n");
}

namespace {

std::string op_color(const Node& n) {
  if (n.kind != NodeKind::compute) return "gray80";
  switch (n.op) {
    case OpType::F:
      return "lightblue";
    case OpType::B:
    case OpType::P1:
      return "palegreen";
    case OpType::P2:
      return "orange";
  }
  return "white";
}

}  // namespace

void write_dot(const TaskGraph& graph, std::ostream& out) {
  const auto& g = graph.graph();
  boost::write_graphviz(
      out, g,
      [&](std::ostream& os, std::size_t v) {
        const Node& n = graph.node(static_cast<int>(v));
        std::string label = node_label(n);
        if (n.kind != NodeKind::compute) {
          label = std::string(to_string(n.kind)) + " " + label + "\\n" +
                  graph.streams()[static_cast<std::size_t>(n.stream)].name();
        }
        os << "[label=\"" << label << "\\nd" << n.device << "\" style=filled fillcolor=\""
           << op_color(n) << "\" shape=" << (n.kind == NodeKind::compute ? "box" : "ellipse")
           << "]";
      },
      [&](std::ostream& os, const TaskGraph::Graph::edge_descriptor& e) {
        if (g[e] == EdgeKind::order) os << "[style=dashed color=gray50]";
      },
      [&](std::ostream& os) {
        os << "rankdir=LR;\nlabel=\"" << graph.meta.schedule << " / "
           << to_string(graph.meta.backward) << "\";\n";
      });
}

}  // namespace pipeplan
