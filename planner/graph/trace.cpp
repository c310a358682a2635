#include "planner/graph/trace.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/graph/bpipe_check.h"

namespace pipeplan {
namespace {

using nlohmann::json;
// Receives the trace's events one at a time, in file order.
using EventSink = std::function<void(json&&)>;

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

// pid/tid 0 are the idle process/thread in Perfetto's model, so both are offset by one; the
// process name carries the real device number.
int pid_of(int device) {
  return device + 1;
}
int tid_of(int stream) {
  return stream + 1;
}
// The thread of a device's overlapped ops: after every stream's.
int overlapped_tid(const TaskGraph& graph, int device) {
  return static_cast<int>(graph.streams().size()) + 1 + device;
}

int device_count(const TaskGraph& graph, const SimResult& sim) {
  int count = std::max(graph.meta.devices, static_cast<int>(sim.devices.size()));
  for (const Stream& stream : graph.streams())
    count = std::max(count, stream.device + 1);
  return count;
}

// Compute first, then its overlapped ops, then sends, then receives, each by peer: the same track
// order on every device.
int thread_sort_index(const Stream& stream, int devices) {
  const int peer = std::max(stream.peer, 0);
  switch (stream.role) {
    case StreamRole::compute:
      return 0;
    case StreamRole::send:
      return 2 + peer;
    case StreamRole::recv:
      return 2 + devices + peer;
    case StreamRole::transfer:
      return 2 + 2 * devices + peer;
  }
  return 0;
}
constexpr int kOverlappedSortIndex = 1;

std::string slice_category(const Node& node) {
  if (node.kind == NodeKind::compute) return std::string(to_string(node.op));
  return std::string(to_string(node.kind));
}

void add_metadata_events(const TaskGraph& graph, const std::vector<SliceTrack>& tracks, int devices,
                         const EventSink& events) {
  for (int device = 0; device < devices; ++device) {
    events({{"ph", "M"},
            {"name", "process_name"},
            {"pid", pid_of(device)},
            {"args", {{"name", "device " + std::to_string(device)}}}});
    events({{"ph", "M"},
            {"name", "process_sort_index"},
            {"pid", pid_of(device)},
            {"args", {{"sort_index", device}}}});
  }
  const auto& streams = graph.streams();
  for (int index = 0; index < static_cast<int>(streams.size()); ++index) {
    const Stream& stream = streams[static_cast<std::size_t>(index)];
    events({{"ph", "M"},
            {"name", "thread_name"},
            {"pid", pid_of(stream.device)},
            {"tid", tid_of(index)},
            {"args", {{"name", stream.name()}}}});
    events({{"ph", "M"},
            {"name", "thread_sort_index"},
            {"pid", pid_of(stream.device)},
            {"tid", tid_of(index)},
            {"args", {{"sort_index", thread_sort_index(stream, devices)}}}});
  }
  // A device's thread of overlapped ops, where it has any.
  std::vector<char> overlapped(static_cast<std::size_t>(devices), 0);
  for (int id = 0; id < graph.node_count(); ++id) {
    const SliceTrack& track = tracks[static_cast<std::size_t>(id)];
    const int device = graph.node(id).device;
    if (track.tid == track.stream_tid || device < 0 || device >= devices ||
        overlapped[static_cast<std::size_t>(device)] != 0) {
      continue;
    }
    overlapped[static_cast<std::size_t>(device)] = 1;
    events({{"ph", "M"},
            {"name", "thread_name"},
            {"pid", track.pid},
            {"tid", track.tid},
            {"args", {{"name", "compute (overlapped)"}}}});
    events({{"ph", "M"},
            {"name", "thread_sort_index"},
            {"pid", track.pid},
            {"tid", track.tid},
            {"args", {{"sort_index", kOverlappedSortIndex}}}});
  }
}

void add_slices(const TaskGraph& graph, const SimResult& sim, const std::vector<SliceTrack>& tracks,
                const EventSink& events) {
  for (int id = 0; id < graph.node_count(); ++id) {
    const Node& node = graph.node(id);
    const NodeTime& time = sim.times[static_cast<std::size_t>(id)];
    json args = {{"node", id},
                 {"stage", node.stage},
                 {"microbatches", node.microbatches},
                 {"alloc_bytes", node.alloc_bytes},
                 {"free_bytes", node.free_bytes}};
    if (node.work_bytes > 0) args["work_bytes"] = node.work_bytes;
    if (node.kind != NodeKind::compute) {
      args["op"] = to_string(node.op);
      args["transfer"] = to_string(node.transfer);
      args["bytes"] = node.bytes;
      args["peer"] = node.peer;
      args["match"] = node.match;
    }
    if (sim.host_times.size() == sim.times.size()) {
      const NodeTime& host = sim.host_times[static_cast<std::size_t>(id)];
      args["host_start_us"] = host.start_us;
      args["host_end_us"] = host.end_us;
    }
    events({{"ph", "X"},
            {"name", slice_name(node)},
            {"cat", slice_category(node)},
            {"pid", tracks[static_cast<std::size_t>(id)].pid},
            {"tid", tracks[static_cast<std::size_t>(id)].tid},
            {"ts", time.start_us},
            {"dur", std::max(0.0, time.end_us - time.start_us)},
            {"args", std::move(args)}});
  }
}

void add_memory_counters(const SimResult& sim, const EventSink& events) {
  for (int device = 0; device < static_cast<int>(sim.devices.size()); ++device) {
    for (const auto& [time_us, bytes] :
         sim.devices[static_cast<std::size_t>(device)].memory_timeline) {
      events({{"ph", "C"},
              {"name", "memory (GiB)"},
              {"pid", pid_of(device)},
              {"ts", time_us},
              {"args", {{"GiB", static_cast<double>(bytes) / kBytesPerGiB}}}});
    }
  }
}

// Flow events bind to the slice enclosing their timestamp; the midpoint of a slice never
// touches a neighbour that starts exactly where it ends.
double binding_ts(const NodeTime& time) {
  return time.start_us + (time.end_us - time.start_us) / 2;
}

class FlowWriter {
 public:
  FlowWriter(const TaskGraph& graph, const SimResult& sim, const std::vector<SliceTrack>& tracks,
             const EventSink& events)
      : graph_(graph), sim_(sim), tracks_(tracks), events_(events) {}

  void add(int from, int to, std::string_view category) {
    const SliceTrack& source = tracks_[static_cast<std::size_t>(from)];
    const SliceTrack& target = tracks_[static_cast<std::size_t>(to)];
    const std::string name = node_label(graph_.node(from));
    events_({{"ph", "s"},
             {"id", next_id_},
             {"cat", category},
             {"name", name},
             {"pid", source.pid},
             {"tid", source.tid},
             {"ts", binding_ts(sim_.times[static_cast<std::size_t>(from)])}});
    events_({{"ph", "f"},
             {"bp", "e"},
             {"id", next_id_},
             {"cat", category},
             {"name", name},
             {"pid", target.pid},
             {"tid", target.tid},
             {"ts", binding_ts(sim_.times[static_cast<std::size_t>(to)])}});
    ++next_id_;
  }

 private:
  const TaskGraph& graph_;
  const SimResult& sim_;
  const std::vector<SliceTrack>& tracks_;
  const EventSink& events_;
  int next_id_ = 1;
};

void add_flows(const TaskGraph& graph, const SimResult& sim, const std::vector<SliceTrack>& tracks,
               const EventSink& events) {
  FlowWriter flows(graph, sim, tracks, events);
  for (int id = 0; id < graph.node_count(); ++id) {
    const Node& node = graph.node(id);
    if (node.kind != NodeKind::send || node.match < 0 || node.match >= graph.node_count()) {
      continue;
    }
    flows.add(id, node.match, "transfer");
  }
  const auto& g = graph.graph();
  for (auto [it, end] = boost::edges(g); it != end; ++it) {
    if (g[*it] != EdgeKind::data) continue;
    const int from = static_cast<int>(boost::source(*it, g));
    const int to = static_cast<int>(boost::target(*it, g));
    const Node& source = graph.node(from);
    if (source.device == graph.node(to).device) continue;
    // Already drawn as the transfer's own arrow.
    if (source.kind == NodeKind::send && source.match == to) continue;
    flows.add(from, to, "data");
  }
}

json plan_summary(const TaskGraph& graph, const SimResult& sim, std::string_view title) {
  const PlanMeta& meta = graph.meta;
  return {{"title", title},
          {"model", meta.model.name},
          {"gpu", meta.gpu},
          {"schedule", meta.schedule.empty() ? graph.schedule.family : meta.schedule},
          {"backward", to_string(meta.backward)},
          {"devices", meta.devices},
          {"tensor_parallel", meta.tensor_parallel},
          {"data_parallel", meta.data_parallel.replicas},
          {"recompute", recompute_to_json(meta.recompute)},
          {"chunks", meta.chunks},
          {"stage_layers", stage_layers_json(meta.stage_layers)},
          {"bpipe", has_transfers(graph)},
          {"microbatches", meta.microbatches},
          {"mbs", meta.mbs},
          {"seq", meta.seq},
          {"makespan_us", sim.makespan_us},
          {"max_stage_span_us", sim.max_stage_span_us},
          {"bubble_ratio", sim.bubble_ratio},
          {"span_bubble_ratio", sim.span_bubble_ratio},
          {"tokens_per_s", sim.tokens_per_s},
          {"mfu_palm", sim.mfu},
          {"peak_memory_bytes", sim.peak_memory_bytes()}};
}

}  // namespace

std::string slice_name(const Node& node) {
  switch (node.kind) {
    case NodeKind::compute:
      return node_label(node);
    case NodeKind::send:
      return "send " + node_label(node) + "\u2192" + std::to_string(node.peer);
    case NodeKind::recv:
      return "recv " + node_label(node) + "\u2190" + std::to_string(node.peer);
  }
  return node_label(node);
}

std::vector<SliceTrack> slice_tracks(const TaskGraph& graph) {
  std::vector<SliceTrack> tracks(static_cast<std::size_t>(graph.node_count()));
  for (int id = 0; id < graph.node_count(); ++id) {
    const Node& node = graph.node(id);
    tracks[static_cast<std::size_t>(id)] = {pid_of(node.device), tid_of(node.stream),
                                            tid_of(node.stream)};
  }
  for (const OverlapPair& pair : overlap_pairs(graph)) {
    SliceTrack& second = tracks[static_cast<std::size_t>(pair.second)];
    second.tid = overlapped_tid(graph, graph.node(pair.second).device);
  }
  return tracks;
}

namespace {

void check_times(const TaskGraph& graph, const SimResult& sim) {
  if (sim.times.size() != static_cast<std::size_t>(graph.node_count())) {
    throw Error("trace: simulation has " + std::to_string(sim.times.size()) +
                " node times but the task graph has " + std::to_string(graph.node_count()) +
                " nodes");
  }
}

void emit_events(const TaskGraph& graph, const SimResult& sim, const EventSink& events) {
  const std::vector<SliceTrack> tracks = slice_tracks(graph);
  add_metadata_events(graph, tracks, device_count(graph, sim), events);
  add_slices(graph, sim, tracks, events);
  add_memory_counters(sim, events);
  add_flows(graph, sim, tracks, events);
}

}  // namespace

json perfetto_trace(const TaskGraph& graph, const SimResult& sim, std::string_view title) {
  check_times(graph, sim);
  json events = json::array();
  emit_events(graph, sim, [&](json&& event) { events.push_back(std::move(event)); });
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"metadata", plan_summary(graph, sim, title)}};
}

void write_perfetto_trace(const TaskGraph& graph, const SimResult& sim, std::string_view title,
                          const OutputFiles::Writer& write) {
  check_times(graph, sim);
  // The text json_text(perfetto_trace()) gives (an object's keys in sorted order), one event at
  // a time: a trace of a million nodes is never whole in memory.
  constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
  std::string chunk = R"({"displayTimeUnit":"ms","metadata":)" +
                      json_text(plan_summary(graph, sim, title)) + R"(,"traceEvents":[)";
  bool first = true;
  emit_events(graph, sim, [&](json&& event) {
    if (!first) chunk += ',';
    first = false;
    chunk += json_text(event);
    if (chunk.size() >= kChunkBytes) {
      write(chunk);
      chunk.clear();
    }
  });
  chunk += "]}\n";
  write(chunk);
}

void write_perfetto_trace(const TaskGraph& graph, const SimResult& sim,
                          const std::filesystem::path& path, std::string_view title) {
  OutputFiles files;
  files.add_stream(path, [&](const OutputFiles::Writer& write) {
    write_perfetto_trace(graph, sim, title, write);
  });
  files.commit();
}

}  // namespace pipeplan
