// Plan (task graph) JSON and Graphviz DOT. Format: docs/reference/plan-format.md.
#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <functional>
#include <optional>
#include <ostream>
#include <unordered_map>

#include <boost/graph/graphviz.hpp>
#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"
#include "planner/graph/taskgraph.h"
#include "profiles/tensor_parallel.h"

namespace pipeplan {

nlohmann::json stage_layers_json(const std::vector<StageLayers>& stages) {
  nlohmann::json out = nlohmann::json::array();
  for (const StageLayers& s : stages)
    out.push_back({s.first_layer, s.layer_count});
  return out;
}

namespace {

constexpr std::string_view kPlanFormat = "pipeplan-plan";
// Version 3 stores nodes as columns (plan_to_text); version 2, one object per node (plan_to_json),
// and version 1, without each send/recv's `transfer` kind (see transfer_of_v1), are still read.
constexpr int kPlanVersion = 3;
constexpr int kRowsPlanVersion = 2;
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
  for (const Transfer t : {Transfer::activation, Transfer::gradient, Transfer::evict,
                           Transfer::load, Transfer::grads}) {
    if (text == to_string(t)) return t;
  }
  throw Error(context + ": field 'transfer' must be activation, gradient, evict, load or grads");
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
  for (const OpType op : {OpType::F, OpType::B, OpType::P1, OpType::P2, OpType::O}) {
    if (text == to_string(op)) return op;
  }
  throw Error(context + ": field 'op' must be F, B, P1, P2 or O");
}

// Whether a compute node of `op` takes time: a forward, fused backward or P1 always does (the
// planner's are a profile's positive forward_us and p1_us); a P2 (a profile's p2_us may be 0), an
// optimizer step and a transfer may take none.
bool takes_time(const Node& n) {
  return n.kind == NodeKind::compute &&
         (n.op == OpType::F || n.op == OpType::B || n.op == OpType::P1);
}

// "field '<field>' is 0 us for a compute F (...)": a node that takes time given none (the plan's
// MFU would be above 100 %).
std::string no_time_problem(const Node& n, std::string_view field) {
  return "field '" + std::string(field) + "' is 0 us for a compute " +
         std::string(to_string(n.op)) +
         " (forwards, backwards and P1s take time; only P2s, optimizer steps and transfers may "
         "take 0)";
}

// An integer JSON value in [lo, hi] (unsigned values beyond int64 count as out of range).
bool int_in(const nlohmann::json& v, std::int64_t lo, std::int64_t hi) {
  const std::optional<std::int64_t> x = int64_value(v);
  return x && *x >= lo && *x <= hi;
}

std::int64_t require_int64(const nlohmann::json& object, std::string_view field,
                           const std::string& context, std::int64_t lo, std::int64_t hi) {
  const auto& v = require_field(object, field, context);
  // A whole number beyond the range, 99999999999999999999 (read as a double past uint64) or
  // 1e300, is out of range rather than "not an integer".
  const bool whole_outside =
      v.is_number_float() && v.get<double>() == std::floor(v.get<double>()) &&
      (v.get<double>() < static_cast<double>(lo) || v.get<double>() > static_cast<double>(hi));
  if (!v.is_number_integer() && !whole_outside) {
    throw Error(context + ": field '" + std::string(field) + "' must be an integer");
  }
  if (whole_outside || !int_in(v, lo, hi)) {
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

// {"latency_us", "bandwidth_GBps"}, each within its limit.
P2pLink link_from_json(const nlohmann::json& link, const std::string& ctx) {
  P2pLink out;
  out.latency_us = require_bounded(link, "latency_us", ctx, limits::kMaxLinkLatencyUs);
  out.bandwidth_GBps = require_bounded(link, "bandwidth_GBps", ctx, limits::kMaxBandwidthGBps);
  if (const std::string problem = limits::bandwidth_problem(out.bandwidth_GBps, "latency only");
      !problem.empty())
    throw Error(ctx + ": field 'bandwidth_GBps' " + problem);
  return out;
}

nlohmann::json link_to_json(const P2pLink& link) {
  return {{"latency_us", link.latency_us}, {"bandwidth_GBps", link.bandwidth_GBps}};
}

nlohmann::json meta_to_json(const PlanMeta& m) {
  nlohmann::json j = {{"model", model_to_json(m.model)},
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
                      {"stage_layers", stage_layers_json(m.stage_layers)},
                      {"memory_limit_bytes", m.memory_limit_bytes},
                      {"static_bytes", m.static_bytes},
                      {"flops_per_token", m.flops_per_token},
                      {"peak_flops_per_device", m.peak_flops_per_device},
                      {"link", link_to_json(m.link)},
                      {"profile_source", m.profile_source}};
  // Written only for a tensor-parallel plan: other plans stay as they were.
  if (m.tensor_parallel > 1) j["tensor_parallel"] = m.tensor_parallel;
  // Likewise only for a data-parallel plan.
  if (m.data_parallel.replicas > 1) {
    const DataParallel& dp = m.data_parallel;
    j["data_parallel"] = {{"replicas", dp.replicas},
                          {"optimizer", std::string(to_string(dp.optimizer))},
                          {"link", link_to_json(dp.link)}};
  }
  // Likewise only for a plan that recomputes activations.
  if (m.recompute.any()) j["recompute"] = recompute_to_json(m.recompute);
  if (m.contention.has_model()) j["contention"] = contention_to_json(m.contention);
  if (!m.overlap.is_default()) j["overlap"] = overlap_to_json(m.overlap);
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
  require_printable(m.gpu, "gpu", ctx);
  m.devices = require_int(j, "devices", ctx, 1, limits::kMaxDevices);
  m.chunks = require_int(j, "chunks", ctx, 1, limits::kMaxChunks);
  m.microbatches = require_int(j, "microbatches", ctx, 1, limits::kMaxMicrobatches);
  m.mbs = require_int(j, "mbs", ctx, 1, limits::kMaxMicroBatchSize);
  m.seq = require_int(j, "seq", ctx, 0, limits::kMaxSeq);
  m.schedule = require_string(j, "schedule", ctx);
  require_printable(m.schedule, "schedule", ctx);
  // The field read outside named(): its own error already names the file and field.
  const std::string backward = require_string(j, "backward", ctx);
  m.backward = named(ctx, "backward", [&] { return backward_mode_from_string(backward); });
  m.p2_concat = require_int(j, "p2_concat", ctx, 0, limits::kMaxMicrobatches);
  const std::string attention = require_string(j, "attention", ctx);
  m.attention = named(ctx, "attention", [&] { return attention_from_string(attention); });
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
  // `integers`: JSON integers only; else byte counts, which may be written as doubles
  // (81389630259.0), 0 for none: a memory limit below one byte is refused (every device would be
  // above it), a fraction beyond a whole byte dropped when read (peaks are whole bytes, so
  // 81389630259.64 holds what 81389630259 holds; earlier pipeplan wrote such limits).
  const auto per_device = [&](std::string_view field, bool integers, double hi) {
    const auto& a = require_field(j, field, ctx);
    if (!a.is_array() || static_cast<int>(a.size()) != m.devices) {
      throw Error(ctx + ": field '" + std::string(field) + "' must be an array of " +
                  std::to_string(m.devices) + " numbers (one per device)");
    }
    for (const auto& v : a) {
      const bool ok = integers ? int_in(v, 0, static_cast<std::int64_t>(hi))
                               : v.is_number() && v.get<double>() <= hi &&
                                     (v.get<double>() == 0 || v.get<double>() >= 1);
      if (!ok) {
        throw Error(ctx + ": field '" + std::string(field) + "' must hold " +
                    (integers ? "integers from 0" : "byte counts, 0 (no limit) or 1") + " to " +
                    std::to_string(static_cast<std::int64_t>(hi)) + " (docs/reference/limits.md)");
      }
    }
    return a;
  };
  m.memory_limit_bytes =
      per_device("memory_limit_bytes", false, limits::kMaxMemoryBytes).get<std::vector<double>>();
  for (double& limit : m.memory_limit_bytes)
    limit = std::floor(limit);
  m.static_bytes = per_device("static_bytes", true, static_cast<double>(limits::kMaxPlanBytes))
                       .get<std::vector<std::int64_t>>();
  m.flops_per_token = require_bounded(j, "flops_per_token", ctx, limits::kMaxFlopsPerToken);
  m.peak_flops_per_device =
      require_bounded(j, "peak_flops_per_device", ctx, limits::kMaxDevicePeakFlops);
  if (j.contains("tensor_parallel")) {
    m.tensor_parallel = require_int(j, "tensor_parallel", ctx, 1, limits::kMaxTensorParallel);
    // What the planner refuses, refused here in its words: T must divide the model's attention
    // heads and key/value heads (and experts).
    named(ctx, "tensor_parallel", [&] { check_tensor_parallel(m.model, m.tensor_parallel); });
  }
  m.link = link_from_json(require_field(j, "link", ctx), ctx + ".link");
  if (const auto dp = j.find("data_parallel"); dp != j.end()) {
    const std::string dp_ctx = ctx + ".data_parallel";
    if (!dp->is_object()) throw Error(dp_ctx + ": must be an object");
    m.data_parallel.replicas = require_int(*dp, "replicas", dp_ctx, 1, limits::kMaxDataParallel);
    const std::string optimizer = require_string(*dp, "optimizer", dp_ctx);
    m.data_parallel.optimizer =
        named(dp_ctx, "optimizer", [&] { return data_parallel_optimizer_from_string(optimizer); });
    m.data_parallel.link = link_from_json(require_field(*dp, "link", dp_ctx), dp_ctx + ".link");
  }
  if (const auto r = j.find("recompute"); r != j.end()) {
    m.recompute = recompute_from_json(*r, ctx + ".recompute");
  }
  m.profile_source = require_string(j, "profile_source", ctx);
  require_printable(m.profile_source, "profile_source", ctx);
  if (const auto c = j.find("contention"); c != j.end())
    m.contention = contention_from_json(*c, ctx);
  if (const auto o = j.find("overlap"); o != j.end()) m.overlap = overlap_from_json(*o, ctx);
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
  if (n.overlaps_next) j["overlaps_next"] = true;
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
  if (n.duration_us == 0 && takes_time(n))
    throw Error(ctx + ": " + no_time_problem(n, "duration_us"));
  std::string label = require_string(j, "label", ctx);
  require_printable(label, "label", ctx);
  n.alloc_bytes = require_int64(j, "alloc_bytes", ctx, 0, limits::kMaxPlanBytes);
  n.free_bytes = require_int64(j, "free_bytes", ctx, 0, limits::kMaxPlanBytes);
  if (j.contains("work_bytes")) {
    n.work_bytes = require_int64(j, "work_bytes", ctx, 0, limits::kMaxPlanBytes);
  }
  if (const auto o = j.find("overlaps_next"); o != j.end()) {
    if (!o->is_boolean()) throw Error(ctx + ": field 'overlaps_next' must be true or false");
    if (o->get<bool>() && n.kind != NodeKind::compute)
      throw Error(ctx + ": field 'overlaps_next' is for compute nodes only");
    n.overlaps_next = o->get<bool>();
  }
  if (n.kind == NodeKind::compute) {
    if (j.contains("transfer")) throw Error(ctx + ": field 'transfer' is for send/recv nodes only");
    // Written for send/recv only; a compute node's may be there only as version 3 has them for
    // one (bytes 0, no peer, no match), not dropped silently.
    for (const auto& [field, none] :
         {std::pair<std::string_view, std::int64_t>{"bytes", 0}, {"peer", -1}, {"match", -1}}) {
      if (const auto f = j.find(field); f != j.end() && int64_value(*f) != none) {
        throw Error(ctx + ": field '" + std::string(field) + "' is " + json_excerpt(*f) +
                    " on a compute node (send/recv only; a compute node's is " +
                    std::to_string(none) + " or absent)");
      }
    }
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
          {"version", kRowsPlanVersion},
          {"meta", meta_to_json(graph.meta)},
          {"schedule", schedule_to_text(graph.schedule)},
          {"streams", streams},
          {"nodes", nodes},
          {"edges", edges}};
}

namespace {

// What every version shares: meta, the schedule (checked against meta) and the streams. Returns
// each stream's order as the file gives it; in version 3 a stream may leave it out (nullopt):
// its nodes in id order. An order read as a column ("streams[3].order") is taken from `columns`.
std::vector<std::optional<std::vector<int>>> read_plan_header(const nlohmann::json& json,
                                                              const JsonColumns* columns,
                                                              const std::string& source,
                                                              int version, int node_total,
                                                              TaskGraph& g) {
  g.meta = meta_from_json(require_field(json, "meta", source), source);
  // Read outside named(): its own error already names the file and field.
  const std::string schedule_text = require_string(json, "schedule", source);
  g.schedule = named(source, "schedule", [&] {
    const std::string& text = schedule_text;
    // Lines and the blanks between words; nothing else a terminal would act on.
    if (const std::string problem = control_character_problem(text, "\n\t"); !problem.empty()) {
      throw Error(problem);
    }
    Schedule schedule = schedule_from_text(text);
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
  // What diff, show and the runtime read from meta must be what the schedule says.
  if (!g.meta.schedule.empty() && g.meta.schedule != g.schedule.family) {
    throw Error(source + ": field 'meta.schedule' is '" + g.meta.schedule +
                "' but the schedule's family is '" + g.schedule.family + "'");
  }
  if (g.schedule.backward != g.meta.backward) {
    throw Error(source + ": field 'meta.backward' is '" + std::string(to_string(g.meta.backward)) +
                "' but the schedule's is '" + std::string(to_string(g.schedule.backward)) + "'");
  }
  if (static_cast<std::int64_t>(g.meta.chunks) * g.meta.devices != g.schedule.stage_count()) {
    throw Error(source + ": field 'meta.chunks' is " + std::to_string(g.meta.chunks) + " but " +
                std::to_string(g.schedule.stage_count()) + " stages on " +
                std::to_string(g.meta.devices) + " devices are " +
                std::to_string(g.schedule.stage_count() / std::max(g.meta.devices, 1)) +
                " a device");
  }
  check_stage_layers(g, source);
  const auto& streams = require_field(json, "streams", source);
  if (!streams.is_array()) throw Error(source + ": field 'streams' must be an array");
  if (streams.empty() && node_total > 0) {
    throw Error(source + ": field 'streams' is empty, but the plan has " +
                std::to_string(node_total) + " nodes, each on a stream");
  }
  if (streams.size() > static_cast<std::size_t>(limits::kMaxPlanNodes)) {
    throw Error(
        source + ": " +
        limits::above_limit(std::to_string(streams.size()) + " streams", limits::kMaxPlanNodes));
  }
  std::vector<std::optional<std::vector<int>>> orders;
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const std::string ctx = source + ": streams[" + std::to_string(i) + "]";
    const int device = require_int(streams[i], "device", ctx, 0, g.meta.devices - 1);
    const StreamRole role = stream_role_from_string(require_string(streams[i], "role", ctx), ctx);
    const int peer = require_int(streams[i], "peer", ctx, -1, g.meta.devices - 1);
    require_known_fields(streams[i], {"device", "role", "peer", "order"}, source,
                         "streams[" + std::to_string(i) + "]", "a stream");
    if ((role == StreamRole::compute) != (peer == -1)) {
      throw Error(ctx + ": field 'peer' is " + std::to_string(peer) +
                  (role == StreamRole::compute ? " on a compute stream (it has none: -1)"
                                               : " on a link's stream (the other device)"));
    }
    if (g.stream(device, role, peer) != static_cast<int>(i)) {
      throw Error(ctx + ": duplicate stream");
    }
    const std::vector<std::int64_t>* column =
        columns == nullptr ? nullptr : columns->column("streams[" + std::to_string(i) + "].order");
    const auto order = streams[i].find("order");
    if (column == nullptr && order == streams[i].end() && version >= 3) {
      orders.emplace_back();
      continue;
    }
    if (column == nullptr && (order == streams[i].end() || !order->is_array())) {
      throw Error(ctx + ": field 'order' must be an array of node ids");
    }
    const auto unknown = [&] { return Error(ctx + ": field 'order' holds an unknown node id"); };
    std::vector<int> ids;
    if (column != nullptr) {
      ids.reserve(column->size());
      for (const std::int64_t id : *column) {
        if (id < 0 || id >= node_total) throw unknown();
        ids.push_back(static_cast<int>(id));
      }
    } else {
      ids.reserve(order->size());
      for (const auto& id : *order) {
        if (!int_in(id, 0, node_total - 1)) throw unknown();
        ids.push_back(id.get<int>());
      }
    }
    orders.emplace_back(std::move(ids));
  }
  return orders;
}

// Running memory totals add every allocation: their sum stays within kMaxPlanBytes.
class AllocationTotal {
 public:
  explicit AllocationTotal(const PlanMeta& meta) {
    for (const std::int64_t bytes : meta.static_bytes)
      total_ += bytes;
  }
  // `context()` names the node, spelt only for the error.
  template <typename Context>
  void add(const Node& node, const Context& context) {
    total_ += node.alloc_bytes;
    if (total_ > limits::kMaxPlanBytes || total_ < 0) {
      throw Error(context() + ": field 'alloc_bytes': " +
                  limits::above_limit("the plan's allocations",
                                      static_cast<double>(limits::kMaxPlanBytes), "bytes"));
    }
  }

 private:
  std::int64_t total_ = 0;
};

// Gives each stream its order: the file's, or (version 3, none given) its nodes in id order.
void set_stream_orders(TaskGraph& g, std::vector<std::optional<std::vector<int>>>& orders) {
  std::vector<std::vector<int>> implied(orders.size());
  for (int id = 0; id < g.node_count(); ++id) {
    const auto s = static_cast<std::size_t>(g.node(id).stream);
    if (!orders[s]) implied[s].push_back(id);
  }
  for (std::size_t s = 0; s < orders.size(); ++s) {
    g.set_stream_order(static_cast<int>(s),
                       orders[s] ? std::move(*orders[s]) : std::move(implied[s]));
  }
}

}  // namespace

namespace {

// A top-level key of the other versions, which this version's reader would never read.
void refuse_other_versions_key(const nlohmann::json& json, const JsonColumns* columns,
                               const std::string& source, int version) {
  if (version >= kPlanVersion && json.contains("edges")) {
    throw Error(source +
                ": field 'edges' is a version 1 and 2 field; version 3 plans give 'data_edges'");
  }
  if (version < kPlanVersion &&
      (json.contains("data_edges") || (columns != nullptr && columns->column("data_edges")))) {
    throw Error(source + ": field 'data_edges' is a version 3 field; version " +
                std::to_string(version) + " plans give 'edges'");
  }
}

// plan_from_json, the streams' orders taken from `columns` where it has them.
TaskGraph plan_from_rows(const nlohmann::json& json, const JsonColumns* columns,
                         const std::string& source) {
  const int version =
      require_format(json, kPlanFormat, kOldestPlanVersion, kRowsPlanVersion, source);
  refuse_other_versions_key(json, columns, source, version);
  const auto& nodes = require_field(json, "nodes", source);
  if (!nodes.is_array()) throw Error(source + ": field 'nodes' must be an array");
  if (nodes.size() > static_cast<std::size_t>(limits::kMaxPlanNodes)) {
    throw Error(
        source + ": " +
        limits::above_limit(std::to_string(nodes.size()) + " nodes", limits::kMaxPlanNodes));
  }
  const int node_total = static_cast<int>(nodes.size());
  TaskGraph g;
  auto orders = read_plan_header(json, columns, source, version, node_total, g);
  AllocationTotal allocated(g.meta);
  for (int i = 0; i < node_total; ++i) {
    const std::string ctx = source + ": nodes[" + std::to_string(i) + "]";
    const auto& j = nodes[static_cast<std::size_t>(i)];
    if (require_integer(j, "id", ctx) != i)
      throw Error(ctx + ": field 'id' must equal " + std::to_string(i));
    // A misspelt optional field ("work_byte") would otherwise read as its default.
    require_known_fields(j,
                         {"id", "kind", "op", "device", "stream", "stage", "microbatches",
                          "duration_us", "label", "alloc_bytes", "free_bytes", "work_bytes",
                          "overlaps_next", "transfer", "bytes", "peer", "match"},
                         source, "nodes[" + std::to_string(i) + "]", "a plan's node");
    Node node = node_from_json(j, ctx, g, node_total, version);
    allocated.add(node, [&]() -> const std::string& { return ctx; });
    g.add_node_unordered(std::move(node));
  }
  set_stream_orders(g, orders);

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

}  // namespace

TaskGraph plan_from_json(const nlohmann::json& json, std::string_view source) {
  return plan_from_rows(json, nullptr, std::string(source));
}

namespace {

// Version 3's one-character codes for the node columns "kind", "op" and "transfer".
constexpr std::string_view kKindCodes = "csr";         // NodeKind order
constexpr std::string_view kOpCodes = "FB12O";         // OpType order: F, B, P1, P2, O
constexpr std::string_view kTransferCodes = "-agelw";  // Transfer order

template <typename E>
char code_of(E value, std::string_view codes) {
  return codes[static_cast<std::size_t>(value)];
}

// The integer columns of version 3, in the order they are written: IntColumn indexes kIntColumns.
enum IntColumn : std::uint8_t {
  kStream,
  kStage,
  kMicrobatch,
  kDuration,
  kAllocBytes,
  kFreeBytes,
  kWorkBytes,
  kBytes,
  kMatch,
};
constexpr std::array<std::string_view, 9> kIntColumns = {"stream",     "stage",       "microbatch",
                                                         "duration",   "alloc_bytes", "free_bytes",
                                                         "work_bytes", "bytes",       "match"};
static_assert(kIntColumns.size() == kMatch + 1);

// Appends decimal integers, comma-separated, as fast as the bytes can be copied.
class IntWriter {
 public:
  explicit IntWriter(std::string& out) : out_(out) {}
  void add(std::int64_t v) {
    if (!first_) out_.push_back(',');
    first_ = false;
    std::array<char, 24> buffer{};
    const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), v);
    out_.append(buffer.data(), result.ptr);
  }

 private:
  std::string& out_;
  bool first_ = true;
};

// The distinct durations, in order of first appearance, and each node's index among them: a
// plan's durations come from a few per-stage costs and message sizes, so the indices are short.
struct DurationTable {
  std::vector<double> values;
  std::vector<std::int64_t> index;
};

DurationTable duration_table(const TaskGraph& g) {
  DurationTable table;
  std::unordered_map<std::uint64_t, std::int64_t> seen;  // by bit pattern: -0 and 0 stay apart
  table.index.reserve(static_cast<std::size_t>(g.node_count()));
  for (const Node& n : g.nodes()) {
    const auto bits = std::bit_cast<std::uint64_t>(n.duration_us);
    const auto [it, added] = seen.try_emplace(bits, static_cast<std::int64_t>(table.values.size()));
    if (added) table.values.push_back(n.duration_us);
    table.index.push_back(it->second);
  }
  return table;
}

// Whether stream `s` lists exactly its nodes in id order (version 3 then leaves its order out).
std::vector<bool> streams_in_id_order(const TaskGraph& g) {
  const std::size_t stream_total = g.streams().size();
  std::vector<std::size_t> next(stream_total, 0);
  std::vector<bool> in_order(stream_total, true);
  for (int id = 0; id < g.node_count(); ++id) {
    const auto s = static_cast<std::size_t>(g.node(id).stream);
    if (s >= stream_total) continue;  // a graph built by hand; the validator names it
    const std::vector<int>& order = g.stream_order(static_cast<int>(s));
    in_order[s] = in_order[s] && next[s] < order.size() && order[next[s]] == id;
    ++next[s];
  }
  for (std::size_t s = 0; s < stream_total; ++s) {
    if (next[s] != g.stream_order(static_cast<int>(s)).size()) in_order[s] = false;
  }
  return in_order;
}

std::int64_t int_column_value(const Node& n, IntColumn column, const DurationTable& durations,
                              int id) {
  switch (column) {
    case kStream:
      return n.stream;
    case kStage:
      return n.stage;
    case kMicrobatch:
      return n.microbatches.empty() ? 0 : n.microbatches[0];
    case kDuration:
      return durations.index[static_cast<std::size_t>(id)];
    case kAllocBytes:
      return n.alloc_bytes;
    case kFreeBytes:
      return n.free_bytes;
    case kWorkBytes:
      return n.work_bytes;
    case kBytes:
      return n.bytes;
    case kMatch:
      return n.match;
  }
  return 0;
}

}  // namespace

namespace {

// The version 3 text, handed to `sink` in pieces of about kPiece bytes (at most one piece is in
// memory at once when the sink writes them out).
constexpr std::size_t kPiece = std::size_t{1} << 20;

void write_plan_text(const TaskGraph& g, const std::function<void(std::string_view)>& sink) {
  const auto node_total = static_cast<std::size_t>(g.node_count());
  std::string out;
  out.reserve(kPiece + 4096);
  // Called between values (IntWriter keeps its place across it): hands over what is there once
  // it is a piece's worth.
  const auto pass_on = [&] {
    if (out.size() < kPiece) return;
    sink(out);
    out.clear();
  };
  out += R"({"format": ")";
  out += kPlanFormat;
  out += R"(", "version": )" + std::to_string(kPlanVersion) + ",\n";
  out += R"("meta": )" + json_text(meta_to_json(g.meta)) + ",\n";
  out += R"("schedule": )" + json_text(nlohmann::json(schedule_to_text(g.schedule))) + ",\n";
  out += R"("streams": [)";
  const std::vector<bool> in_order = streams_in_id_order(g);
  for (std::size_t i = 0; i < g.streams().size(); ++i) {
    const Stream& st = g.streams()[i];
    out += i == 0 ? "\n" : ",\n";
    out += R"({"device": )" + std::to_string(st.device) + R"(, "role": ")" +
           std::string(to_string(st.role)) + R"(", "peer": )" + std::to_string(st.peer);
    if (!in_order[i]) {
      out += R"(, "order": [)";
      IntWriter ids(out);
      for (const int id : g.stream_order(static_cast<int>(i))) {
        ids.add(id);
        pass_on();
      }
      out += "]";
    }
    out += "}";
  }
  out += "],\n";
  out += R"("nodes": {"count": )" + std::to_string(node_total);
  const auto codes = [&](std::string_view name, auto code) {
    out += ",\n\"";
    out += name;
    out += R"(": ")";
    for (const Node& n : g.nodes()) {
      out.push_back(code(n));
      pass_on();
    }
    out += "\"";
  };
  codes("kind", [](const Node& n) { return code_of(n.kind, kKindCodes); });
  codes("op", [](const Node& n) { return code_of(n.op, kOpCodes); });
  codes("transfer", [](const Node& n) { return code_of(n.transfer, kTransferCodes); });
  const DurationTable durations = duration_table(g);
  out += ",\n\"duration_values\": " + json_text(nlohmann::json(durations.values));
  for (std::size_t c = 0; c < kIntColumns.size(); ++c) {
    out += ",\n\"";
    out += kIntColumns[c];
    out += "\": [";
    IntWriter column(out);
    for (std::size_t id = 0; id < node_total; ++id) {
      column.add(int_column_value(g.nodes()[id], static_cast<IntColumn>(c), durations,
                                  static_cast<int>(id)));
      pass_on();
    }
    out += "]";
  }
  // The rare nodes with more than one micro-batch (a concatenated P2): [id, second, third, ...].
  out += ",\n\"more_microbatches\": [";
  bool first = true;
  for (std::size_t id = 0; id < node_total; ++id) {
    const MicroBatches& mbs = g.nodes()[id].microbatches;
    if (mbs.size() < 2) continue;
    out += first ? "[" : ",[";
    first = false;
    IntWriter row(out);
    row.add(static_cast<std::int64_t>(id));
    for (std::size_t k = 1; k < mbs.size(); ++k)
      row.add(mbs[k]);
    out += "]";
    pass_on();
  }
  // Labels other than the one a node's fields spell: [id, "label"].
  nlohmann::json labels = nlohmann::json::array();
  for (std::size_t id = 0; id < node_total; ++id) {
    if (const std::string* label = g.nodes()[id].custom_label.get()) labels.push_back({id, *label});
  }
  out += "],\n\"labels\": " + json_text(labels);
  // The first node of every overlapped pair, when the plan has any (its partner is the next node
  // of its stream).
  std::optional<IntWriter> overlapped;
  for (std::size_t id = 0; id < node_total; ++id) {
    if (!g.nodes()[id].overlaps_next) continue;
    if (!overlapped) {
      out += ",\n\"overlapped\": [";
      overlapped.emplace(out);
    }
    overlapped->add(static_cast<std::int64_t>(id));
    pass_on();
  }
  out += overlapped ? "]},\n" : "},\n";
  out += R"("data_edges": [)";
  IntWriter edges(out);
  for (const TaskGraph::EdgeRecord& e : g.edge_records()) {
    if (e.kind != EdgeKind::data) continue;
    edges.add(e.from);
    edges.add(e.to);
    pass_on();
  }
  out += "]}\n";
  sink(out);
}

}  // namespace

std::string plan_to_text(const TaskGraph& g) {
  std::string text;
  text.reserve(4096 + g.schedule.action_count() * 8 +
               static_cast<std::size_t>(g.node_count()) * 56 + g.edge_records().size() * 16);
  write_plan_text(g, [&](std::string_view piece) { text += piece; });
  return text;
}

namespace {

// A version 3 plan's columns, read with their bounds (PlanColumns::at names the column and node).
class PlanColumns {
 public:
  PlanColumns(const JsonColumns& doc, const nlohmann::json& table, std::string source)
      : doc_(doc), table_(table), source_(std::move(source)) {
    if (!table_.is_object()) {
      throw Error(source_ + ": field 'nodes' must be an object of columns (version 3)");
    }
    count_ = require_int(table_, "count", source_ + ": nodes", 0, limits::kMaxPlanNodes);
  }
  int count() const { return count_; }

  // The column of one-character codes; each code is checked when read (code()).
  std::string_view codes(std::string_view name) const {
    const auto& v = require_field(table_, name, source_ + ": nodes");
    if (!v.is_string() ||
        v.get_ref<const std::string&>().size() != static_cast<std::size_t>(count_)) {
      throw Error(source_ + ": field 'nodes." + std::string(name) + "' must be a string of " +
                  std::to_string(count_) + " characters (one per node)");
    }
    return v.get_ref<const std::string&>();
  }
  const std::vector<std::int64_t>& ints(std::string_view name) const {
    const std::vector<std::int64_t>* column = doc_.column("nodes." + std::string(name));
    if (column == nullptr || column->size() != static_cast<std::size_t>(count_)) {
      throw Error(source_ + ": field 'nodes." + std::string(name) + "' must be an array of " +
                  std::to_string(count_) + " integers (one per node)");
    }
    return *column;
  }
  // The value of node `id` in `column`, within [lo, hi].
  std::int64_t at(const std::vector<std::int64_t>& column, std::string_view name, int id,
                  std::int64_t lo, std::int64_t hi) const {
    const std::int64_t v = column[static_cast<std::size_t>(id)];
    if (v < lo || v > hi) {
      throw Error(source_ + ": node " + std::to_string(id) + ": field '" + std::string(name) +
                  "' = " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
    }
    return v;
  }
  template <typename E>
  E code(std::string_view column, std::string_view name, std::string_view codes, int id) const {
    const std::size_t at = codes.find(column[static_cast<std::size_t>(id)]);
    if (at == std::string_view::npos) {
      throw Error(source_ + ": node " + std::to_string(id) + ": field '" + std::string(name) +
                  "' must be one of the characters '" + std::string(codes) + "'");
    }
    return static_cast<E>(at);
  }

 private:
  const JsonColumns& doc_;
  const nlohmann::json& table_;
  std::string source_;
  int count_ = 0;
};

// The integer node id at entry `index` of list `field`, whose ids increase, after `last`: one
// that is no node's is out of range (not out of order), one not above `last` out of order.
int increasing_node_id(const nlohmann::json& id, int last, int node_total,
                       const std::string& source, const std::string& field, std::size_t index) {
  if (!int_in(id, 0, node_total - 1)) {
    throw Error(source + ": field '" + field + "[" + std::to_string(index) + "]' names node " +
                json_excerpt(id) +
                (node_total == 0 ? ", but the plan has no nodes"
                                 : ", out of range [0, " + std::to_string(node_total - 1) + "]"));
  }
  if (id.get<int>() <= last) {
    throw Error(source + ": field '" + field + "' must hold increasing node ids (entry " +
                std::to_string(index) + ": node " + id.dump() + " after node " +
                std::to_string(last) + ")");
  }
  return id.get<int>();
}

// Rows [id, value...] of a sparse column, ids increasing: calls take(id, row).
template <typename Take>
void sparse_rows(const nlohmann::json& table, std::string_view name, const std::string& source,
                 int node_total, Take&& take) {
  const auto& rows = require_field(table, name, source + ": nodes");
  const std::string field = "nodes." + std::string(name);
  if (!rows.is_array()) throw Error(source + ": field '" + field + "' must be an array");
  int last = -1;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    if (!row.is_array() || row.empty() || !row[0].is_number_integer()) {
      throw Error(source + ": field '" + field +
                  "' must hold rows [node id, ...] with increasing node ids");
    }
    last = increasing_node_id(row[0], last, node_total, source, field, i);
    take(last, row);
  }
}

TaskGraph plan_from_columns(const JsonColumns& doc, const std::string& source) {
  const nlohmann::json& json = doc.json;
  refuse_other_versions_key(json, &doc, source, kPlanVersion);
  const auto& table = require_field(json, "nodes", source);
  const PlanColumns columns(doc, table, source);
  const int node_total = columns.count();
  TaskGraph g;
  auto orders = read_plan_header(json, &doc, source, kPlanVersion, node_total, g);
  const int devices = g.meta.devices;
  const int stream_total = static_cast<int>(g.streams().size());
  const std::string_view kinds = columns.codes("kind");
  const std::string_view ops = columns.codes("op");
  const std::string_view transfers = columns.codes("transfer");
  const auto& values = require_field(table, "duration_values", source + ": nodes");
  std::vector<double> durations;
  if (!values.is_array()) {
    throw Error(source + ": field 'nodes.duration_values' must be an array of numbers");
  }
  for (const auto& v : values) {
    if (!v.is_number() || !(v.get<double>() >= 0) || v.get<double>() > limits::kMaxNodeTimeUs) {
      throw Error(source + ": field 'nodes.duration_values' holds " + json_excerpt(v) + ": " +
                  "durations are numbers from 0 to 1e18 us (docs/reference/limits.md)");
    }
    durations.push_back(v.get<double>());
  }
  if (durations.empty() && node_total > 0) {
    throw Error(source + ": field 'nodes.duration_values' must hold the nodes' durations");
  }
  std::array<const std::vector<std::int64_t>*, kIntColumns.size()> ints{};
  for (std::size_t c = 0; c < kIntColumns.size(); ++c)
    ints[c] = &columns.ints(kIntColumns[c]);
  const auto col = [&](IntColumn c, int id, std::int64_t lo, std::int64_t hi) {
    return columns.at(*ints[c], kIntColumns[c], id, lo, hi);
  };
  const int last_mb = g.meta.microbatches - 1;
  const auto duration_count = static_cast<std::int64_t>(durations.size());
  g.reserve(static_cast<std::size_t>(node_total), 0);
  AllocationTotal allocated(g.meta);
  for (int id = 0; id < node_total; ++id) {
    Node n;
    n.kind = columns.code<NodeKind>(kinds, "kind", kKindCodes, id);
    n.op = columns.code<OpType>(ops, "op", kOpCodes, id);
    n.transfer = columns.code<Transfer>(transfers, "transfer", kTransferCodes, id);
    n.stream = static_cast<int>(col(kStream, id, 0, stream_total - 1));
    n.device = g.streams()[static_cast<std::size_t>(n.stream)].device;
    n.stage = static_cast<int>(col(kStage, id, 0, limits::kMaxStages - 1));
    n.microbatches.push_back(static_cast<int>(col(kMicrobatch, id, 0, last_mb)));
    n.duration_us = durations[static_cast<std::size_t>(col(kDuration, id, 0, duration_count - 1))];
    if (n.duration_us == 0 && takes_time(n)) {
      throw Error(source + ": node " + std::to_string(id) + ": " + no_time_problem(n, "duration"));
    }
    n.alloc_bytes = col(kAllocBytes, id, 0, limits::kMaxPlanBytes);
    n.free_bytes = col(kFreeBytes, id, 0, limits::kMaxPlanBytes);
    n.work_bytes = col(kWorkBytes, id, 0, limits::kMaxPlanBytes);
    const bool compute = n.kind == NodeKind::compute;
    if (compute != (n.transfer == Transfer::none)) {
      throw Error(source + ": node " + std::to_string(id) +
                  ": field 'transfer' must be '-' for a compute node and one of 'agelw' for a "
                  "send or recv");
    }
    n.bytes = col(kBytes, id, 0, compute ? 0 : limits::kMaxPlanBytes);
    n.match = static_cast<int>(col(kMatch, id, -1, compute ? -1 : node_total - 1));
    n.peer = compute ? -1 : g.streams()[static_cast<std::size_t>(n.stream)].peer;
    if (!compute && (n.peer < 0 || n.peer >= devices)) {
      throw Error(source + ": node " + std::to_string(id) + ": a " +
                  std::string(to_string(n.kind)) + " must be on a stream with a peer device");
    }
    allocated.add(n, [&] { return source + ": node " + std::to_string(id); });
    g.add_node_unordered(std::move(n));
  }
  sparse_rows(table, "more_microbatches", source, node_total,
              [&](int id, const nlohmann::json& row) {
                MicroBatches& mbs = g.node(id).microbatches;
                if (row.size() > static_cast<std::size_t>(g.meta.microbatches)) {
                  throw Error(source + ": node " + std::to_string(id) + ": more than meta's " +
                              std::to_string(g.meta.microbatches) + " micro-batches");
                }
                for (std::size_t k = 1; k < row.size(); ++k) {
                  if (!int_in(row[k], 0, last_mb)) {
                    throw Error(source + ": node " + std::to_string(id) +
                                ": field 'more_microbatches' must hold integers from 0 to " +
                                std::to_string(last_mb));
                  }
                  mbs.push_back(row[k].get<int>());
                }
              });
  sparse_rows(table, "labels", source, node_total, [&](int id, const nlohmann::json& row) {
    if (row.size() != 2 || !row[1].is_string()) {
      throw Error(source + ": field 'nodes.labels' must hold rows [node id, \"label\"]");
    }
    require_printable(row[1].get_ref<const std::string&>(), "nodes.labels",
                      source + ": node " + std::to_string(id));
    set_label(g.node(id), row[1].get<std::string>());
  });
  if (const auto overlapped = table.find("overlapped"); overlapped != table.end()) {
    const std::string field = source + ": field 'nodes.overlapped'";
    if (!overlapped->is_array()) throw Error(field + " must be an array of node ids");
    int last = -1;
    for (std::size_t i = 0; i < overlapped->size(); ++i) {
      const auto& id = (*overlapped)[i];
      if (!id.is_number_integer()) throw Error(field + " must be an array of node ids");
      last = increasing_node_id(id, last, node_total, source, "nodes.overlapped", i);
      Node& n = g.node(last);
      if (n.kind != NodeKind::compute) {
        throw Error(source + ": node " + std::to_string(last) +
                    ": only a compute node can be in field 'nodes.overlapped'");
      }
      n.overlaps_next = true;
    }
  }
  set_stream_orders(g, orders);
  const std::vector<std::int64_t>* edges = doc.column("data_edges");
  if (edges == nullptr || edges->size() % 2 != 0) {
    throw Error(source + ": field 'data_edges' must be an array of node ids, two per edge");
  }
  g.reserve(0, edges->size() / 2 + static_cast<std::size_t>(node_total));
  for (std::size_t i = 0; i < edges->size(); i += 2) {
    const std::int64_t from = (*edges)[i], to = (*edges)[i + 1];
    if (from < 0 || from >= node_total || to < 0 || to >= node_total) {
      throw Error(source + ": data_edges[" + std::to_string(i / 2) +
                  "] must be [from, to] node ids");
    }
    g.add_data_edge(static_cast<int>(from), static_cast<int>(to));
  }
  return g;
}

}  // namespace

TaskGraph plan_from_text(std::string_view text, std::string_view source_view) {
  const std::string source(source_view);
  std::vector<std::string> paths = {"data_edges", "streams[].order"};
  for (const std::string_view name : kIntColumns)
    paths.push_back("nodes." + std::string(name));
  // A key the format does not have, at the top, in the node table and in meta, is refused where
  // the parser meets it, before its value is read (a misspelt field would otherwise read as
  // absent).
  static const std::vector<KnownKeys> kKnown = {
      {"",
       {"format", "version", "meta", "schedule", "streams", "nodes", "edges", "data_edges"},
       "a plan"},
      {"nodes",
       {"count", "kind", "op", "transfer", "duration_values", "stream", "stage", "microbatch",
        "duration", "alloc_bytes", "free_bytes", "work_bytes", "bytes", "match",
        "more_microbatches", "labels", "overlapped"},
       "a plan's node table"},
      {"meta",
       {"model",
        "gpu",
        "devices",
        "chunks",
        "microbatches",
        "mbs",
        "seq",
        "schedule",
        "backward",
        "p2_concat",
        "attention",
        "stage_layers",
        "memory_limit_bytes",
        "static_bytes",
        "flops_per_token",
        "peak_flops_per_device",
        "link",
        "profile_source",
        "tensor_parallel",
        "data_parallel",
        "recompute",
        "contention",
        "overlap"},
       "a plan's meta"},
      {"meta.link", {"latency_us", "bandwidth_GBps"}, "a link"},
      {"meta.data_parallel", {"replicas", "optimizer", "link"}, "a plan's data parallelism"},
      {"meta.data_parallel.link", {"latency_us", "bandwidth_GBps"}, "a link"},
      {"meta.recompute", {"method", "blocks"}, "a plan's recomputation"}};
  // Checked as met once "format" has said pipeplan-plan (pipeplan writes it first), and a key met
  // before it when it is read, wherever it is; a file of another kind is named by require_format.
  // The top level lists both versions' keys: the one of the other version is named by its reader.
  const JsonColumns doc = parse_json_columns(text, source, paths, kKnown, kPlanFormat);
  const int version =
      require_format(doc.json, kPlanFormat, kOldestPlanVersion, kPlanVersion, source);
  if (version < kPlanVersion) return plan_from_rows(doc.json, &doc, source);
  return plan_from_columns(doc, source);
}

TaskGraph load_plan(const std::filesystem::path& path) {
  return plan_from_text(read_text_file(path), input_name(path));
}

void save_plan(const TaskGraph& graph, const std::filesystem::path& path) {
  OutputFiles files;
  files.add_stream(path, [&](const OutputFiles::Writer& write) { write_plan_text(graph, write); });
  files.commit();
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
    case OpType::O:
      return "plum";
  }
  return "white";
}

// `text` inside a DOT string's quotes: '"' and '\\' escaped (Graphviz reads "\\n", "\\l" in a
// label as line breaks), a control character as '?' (plans read from files hold none).
std::string dot_quoted(std::string_view text) {
  std::string out;
  for (const char c : printable_text(text)) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

void write_dot(const TaskGraph& graph, std::ostream& out) {
  const auto& g = graph.graph();
  boost::write_graphviz(
      out, g,
      [&](std::ostream& os, std::size_t v) {
        const Node& n = graph.node(static_cast<int>(v));
        std::string label = dot_quoted(node_label(n));
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
        os << "rankdir=LR;\nlabel=\"" << dot_quoted(graph.meta.schedule) << " / "
           << to_string(graph.meta.backward) << "\";\n";
      });
}

}  // namespace pipeplan
