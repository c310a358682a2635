#include "runtime/trace_diff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"
#include "planner/base/stats.h"
#include "planner/graph/bpipe_check.h"
#include "planner/graph/pair_overlap.h"
#include "planner/graph/trace.h"

namespace pipeplan {

namespace {

using nlohmann::json;

std::string category_of(const Node& node) {
  if (node.kind == NodeKind::compute) return std::string(to_string(node.op));
  return std::string(to_string(node.kind));
}

std::string op_label(const Node& node) {
  if (node.kind == NodeKind::compute) return node_label(node);
  return std::string(to_string(node.kind)) + " " + node_label(node);
}

// How many of `size` entries a listing of the `top` first shows (all when top < 0).
std::size_t shown_count(std::size_t size, int top) {
  return top < 0 ? size : std::min(size, static_cast<std::size_t>(top));
}

// A time that may be unknown (negative): null in JSON.
json optional_us(double us) {
  return us < 0 ? json(nullptr) : json(us);
}

double pct(double measured, double predicted) {
  if (predicted == 0) return measured == 0 ? 0.0 : 100.0;
  return 100.0 * (measured - predicted) / predicted;
}

// A member of a trace event of the expected type, or nullptr (events are read field by field
// with type checks: a trace from elsewhere must give a one-line error, never an exception from
// the JSON library).
const json* member(const json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string string_member(const json& object, std::string_view key) {
  const json* v = member(object, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

// A slice's name as an error message quotes it: its first 60 bytes (a concatenated P2's label
// grows with its micro-batches).
std::string excerpt(std::string name) {
  if (name.size() > 60) name = std::string(utf8_prefix(name, 60)) + "...";
  return name;
}

[[noreturn]] void bad_slice_named(std::string_view source, std::size_t index,
                                  const std::string& name, const std::string& why) {
  throw Error(std::string(source) + ": traceEvents[" + std::to_string(index) + "]" +
              (name.empty() ? "" : " ('" + excerpt(name) + "')") + ": " + why);
}

[[noreturn]] void bad_slice(std::string_view source, std::size_t index, const json& event,
                            const std::string& why) {
  bad_slice_named(source, index, string_member(event, "name"), why);
}

// A finite time in µs from the slice (`in_args`: from its args), within limits::kMaxNodeTimeUs
// in magnitude.
double slice_time(std::string_view source, std::size_t index, const json& event,
                  std::string_view key, bool nonnegative, bool in_args = false) {
  const std::string field = (in_args ? "args." : "") + std::string(key);
  const json* holder = in_args ? member(event, "args") : &event;
  const json* v = holder != nullptr ? member(*holder, key) : nullptr;
  if (v == nullptr || !v->is_number()) {
    bad_slice(source, index, event, "field '" + field + "' must be a number");
  }
  const double x = v->get<double>();
  if (!std::isfinite(x) || std::abs(x) > limits::kMaxNodeTimeUs || (nonnegative && x < 0)) {
    bad_slice(source, index, event,
              "field '" + field + "' must be a finite number of us from " +
                  (nonnegative ? "0" : "-1e18") + " to 1e18");
  }
  return x;
}

// The value as an int64, when it is a JSON integer (int64_value): 5.0 is not one.
std::optional<std::int64_t> integer_of(const json* value) {
  return value != nullptr ? int64_value(*value) : std::nullopt;
}

// "field 'F' must be an integer, not 5.0" for a value given that is no JSON integer (5.0, 1e300,
// "5"), else nothing.
std::optional<std::string> not_an_integer(std::string_view field, const json* value) {
  if (value == nullptr || value->is_number_integer()) return std::nullopt;
  return "field '" + std::string(field) + "' must be an integer, not " + json_excerpt(*value);
}

// An array of integers (int64_value), each an int.
bool integer_array(const json& list) {
  return list.is_array() && std::all_of(list.begin(), list.end(), [](const json& mb) {
           const std::optional<std::int64_t> v = int64_value(mb);
           return v && *v >= std::numeric_limits<int>::min() &&
                  *v <= std::numeric_limits<int>::max();
         });
}

// `list` (an integer_array) holds `expected`.
bool same_microbatches(const json& list, const MicroBatches& expected) {
  if (list.size() != expected.size()) return false;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (list[i].get<std::int64_t>() != expected[i]) return false;
  }
  return true;
}

// The slice is the plan's node `id`: its name, category, stage and micro-batches, and the track
// it is drawn on (its device's process, its stream's thread: slice_tracks).
void check_slice(const TaskGraph& plan, int id, const SliceTrack& track, const json& event,
                 std::string_view source, std::size_t index) {
  const Node& node = plan.node(id);
  const json& args = *member(event, "args");
  // "field 'F' = V, the plan's node N (...) has W X (a trace of another plan?)".
  const auto differs = [&](std::string_view field, const json* value, std::string_view what,
                           const json& expected) {
    bad_slice(source, index, event,
              "field '" + std::string(field) + "' " +
                  (value != nullptr ? "= " + json_excerpt(*value) : std::string("is missing")) +
                  ", the plan's " + plan.node_name(id) + " has " + std::string(what) + " " +
                  json_excerpt(expected) + " (a trace of another plan?)");
  };
  const json* cat = member(event, "cat");
  if (cat == nullptr || !cat->is_string() || cat->get<std::string>() != category_of(node)) {
    differs("cat", cat, "category", category_of(node));
  }
  const json* stage = member(args, "stage");
  if (auto why = not_an_integer("args.stage", stage)) bad_slice(source, index, event, *why);
  if (integer_of(stage) != std::optional<std::int64_t>(node.stage)) {
    differs("args.stage", stage, "stage", node.stage);
  }
  const json* microbatches = member(args, "microbatches");
  if (microbatches != nullptr && !integer_array(*microbatches)) {
    bad_slice(source, index, event,
              "field 'args.microbatches' must be an array of integers, not " +
                  json_excerpt(*microbatches));
  }
  if (microbatches == nullptr || !same_microbatches(*microbatches, node.microbatches)) {
    differs("args.microbatches", microbatches, "micro-batches",
            json(std::vector<int>(node.microbatches)));
  }
  if (string_member(event, "name") != slice_name(node)) {
    bad_slice(source, index, event,
              "field 'name' is not '" + slice_name(node) + "', the name of the plan's " +
                  plan.node_name(id) + " that its args.node names");
  }
  const json* pid = member(event, "pid");
  if (auto why = not_an_integer("pid", pid)) bad_slice(source, index, event, *why);
  if (integer_of(pid) != std::optional<std::int64_t>(track.pid)) {
    bad_slice(source, index, event,
              "field 'pid' = " + (pid != nullptr ? json_excerpt(*pid) : std::string("nothing")) +
                  ", but the plan's " + plan.node_name(id) + " runs on device " +
                  std::to_string(node.device) + " (pid " + std::to_string(track.pid) + ")");
  }
  const json* tid = member(event, "tid");
  if (auto why = not_an_integer("tid", tid)) bad_slice(source, index, event, *why);
  // The second op of an overlapped pair has its own thread; traces written before it had one
  // drew it on its stream's.
  const std::optional<std::int64_t> tid_value = integer_of(tid);
  if (tid_value != std::optional<std::int64_t>(track.tid) &&
      tid_value != std::optional<std::int64_t>(track.stream_tid)) {
    bad_slice(source, index, event,
              "field 'tid' = " + (tid != nullptr ? json_excerpt(*tid) : std::string("nothing")) +
                  ", but the plan's " + plan.node_name(id) + " is on tid " +
                  std::to_string(track.tid));
  }
}

// The slices of a compute, send or recv stream follow its order one at a time: each starts no
// earlier than the one before it ended (the two ops of an overlapped pair run together and count
// as one). A BPipe transfer stream is left out: it carries both directions, and the measured
// copies of the two overlap.
void check_stream_times(const TaskGraph& plan, const std::vector<SliceTrack>& tracks,
                        const std::vector<NodeTime>& times,
                        const std::vector<std::size_t>& event_of, std::string_view source) {
  constexpr double kToleranceUs = 1e-3;
  for (std::size_t s = 0; s < plan.streams().size(); ++s) {
    const Stream& stream = plan.streams()[s];
    if (stream.role == StreamRole::transfer) continue;
    double before = -std::numeric_limits<double>::infinity();  // the end before this node's pair
    double latest = before;
    int before_node = -1, latest_node = -1;
    for (const int id : plan.stream_order(static_cast<int>(s))) {
      const auto i = static_cast<std::size_t>(id);
      if (tracks[i].tid == tracks[i].stream_tid) {  // not a pair's second (slice_tracks)
        before = latest;
        before_node = latest_node;
      }
      if (before_node >= 0 && times[i].start_us < before - kToleranceUs) {
        const auto earlier = static_cast<std::size_t>(before_node);
        // (A slice's name is its node's: check_slice.)
        bad_slice_named(source, event_of[i], slice_name(plan.node(id)),
                        "starts at " + json(times[i].start_us).dump() + " us, before '" +
                            slice_name(plan.node(before_node)) + "' (traceEvents[" +
                            std::to_string(event_of[earlier]) + "]) ends at " +
                            json(before).dump() + " us on stream " + stream.name() + " of device " +
                            std::to_string(stream.device) +
                            " (its slices run one at a time, in the plan's order)");
      }
      if (times[i].end_us > latest || latest_node < 0) {
        latest = std::max(latest, times[i].end_us);
        latest_node = id;
      }
    }
  }
}

// A pipeplan trace says in its metadata which plan it is of (planner/graph/trace.cpp's
// plan_summary): a trace of another model or shape matches nodes by number only, and its times
// would be read as this plan's.
void check_metadata(const TaskGraph& plan, const json& trace, std::string_view source) {
  const json* metadata = member(trace, "metadata");
  if (metadata == nullptr) return;
  if (!metadata->is_object()) {
    throw Error(std::string(source) +
                ": field 'metadata' must be an object (the plan the trace "
                "is of), not " +
                json_excerpt(*metadata));
  }
  const auto differs = [&](std::string_view field, const json& expected) {
    const json* value = member(*metadata, field);
    if (value == nullptr || *value == expected) return;
    throw Error(std::string(source) + ": field 'metadata." + std::string(field) + "' is " +
                json_excerpt(*value) + ", the plan's is " + json_excerpt(expected) +
                " (a trace of another plan)");
  };
  const PlanMeta& meta = plan.meta;
  differs("model", meta.model.name);
  differs("devices", meta.devices);
  differs("chunks", meta.chunks);
  differs("microbatches", meta.microbatches);
  differs("mbs", meta.mbs);
  differs("seq", meta.seq);
  // What the run did beyond the shape (traces written before a field was added lack it).
  differs("schedule", meta.schedule.empty() ? plan.schedule.family : meta.schedule);
  differs("backward", std::string(to_string(meta.backward)));
  differs("tensor_parallel", meta.tensor_parallel);
  differs("data_parallel", meta.data_parallel.replicas);
  differs("recompute", recompute_to_json(meta.recompute));
  differs("stage_layers", stage_layers_json(meta.stage_layers));
  differs("bpipe", has_transfers(plan));
}

}  // namespace

double OpDiff::error_pct() const {
  return pct(measured_us, predicted_us);
}

namespace {

// Node times from a trace's events, given one at a time in file order (a trace of a million nodes
// is never read whole). The first event that is wrong is remembered, not thrown at once, so that
// finish() reports what the DOM order would: 'traceEvents' missing, then metadata of another
// plan (which may come after the events in the file), then the first bad slice.
class TraceTimes {
 public:
  TraceTimes(const TaskGraph& plan, std::string_view source)
      : plan_(plan),
        source_(source),
        times_(static_cast<std::size_t>(plan.node_count())),
        host_(times_.size()),
        seen_(times_.size(), 0),
        event_of_(times_.size(), 0),
        tracks_(slice_tracks(plan)) {}

  void event(const json& event, std::size_t index) {
    if (error_) return;
    try {
      read(event, index);
    } catch (const Error& e) {
      error_ = e.what();
    }
  }

  // `trace`: the document, its 'traceEvents' read already (read_trace_times leaves that array
  // empty).
  std::vector<NodeTime> finish(const json& trace, std::vector<NodeTime>* host_times) {
    const json* events = member(trace, "traceEvents");
    if (events == nullptr) {
      throw Error(std::string(source_) + ": field 'traceEvents' missing (not a pipeplan trace)");
    }
    if (!events->is_array()) {
      throw Error(std::string(source_) + ": field 'traceEvents' must be an array of events, not " +
                  json_excerpt(*events));
    }
    check_metadata(plan_, trace, source_);
    if (error_) throw Error(*error_);
    for (int id = 0; id < plan_.node_count(); ++id) {
      if (!seen_[static_cast<std::size_t>(id)]) {
        const auto nodeless = nodeless_.find(id);
        throw Error(std::string(source_) + ": no slice for " + plan_.node_name(id) +
                    (nodeless == nodeless_.end()
                         ? std::string()
                         : ": the slice named '" + excerpt(slice_name(plan_.node(id))) +
                               "' (traceEvents[" + std::to_string(nodeless->second) +
                               "]) on its track has no 'args.node'"));
      }
    }
    check_stream_times(plan_, tracks_, times_, event_of_, source_);
    if (host_times != nullptr) {
      *host_times = host_given_ ? std::move(host_) : std::vector<NodeTime>{};
    }
    return std::move(times_);
  }

 private:
  void read(const json& event, std::size_t index) {
    // Slices only: metadata, counters and flow events carry no node time.
    if (string_member(event, "ph") != "X") return;
    const json* args = member(event, "args");
    const json* node = args != nullptr ? member(*args, "node") : nullptr;
    // A slice that names no node is some other event: skipped.
    if (node == nullptr) {
      note_nodeless(event, index);
      return;
    }
    if (auto why = not_an_integer("args.node", node)) bad_slice(source_, index, event, *why);
    const std::optional<std::int64_t> id_value = int64_value(*node);
    if (!id_value || *id_value < 0 || *id_value >= plan_.node_count()) {
      bad_slice(source_, index, event,
                "field 'args.node' = " + json_excerpt(*node) + ", the plan has nodes 0.." +
                    std::to_string(plan_.node_count() - 1) + " (a trace of another plan?)");
    }
    const auto id = static_cast<std::size_t>(*id_value);
    if (seen_[id]) {
      bad_slice(source_, index, event,
                "a second slice for " + plan_.node_name(static_cast<int>(id)));
    }
    check_slice(plan_, static_cast<int>(id), tracks_[id], event, source_, index);
    event_of_[id] = index;
    const double start = slice_time(source_, index, event, "ts", false);
    times_[id] = {start, start + slice_time(source_, index, event, "dur", true)};
    seen_[id] = 1;
    read_host_times(event, index, *args, static_cast<int>(id));
  }

  // Host times are on every node's slice (a measured GPU run's) or on none: a trace with some
  // only, or with a node queued before its host began queuing it, is refused.
  void read_host_times(const json& event, std::size_t index, const json& args, int id) {
    const json* host_start = member(args, "host_start_us");
    const json* host_end = member(args, "host_end_us");
    const bool given = host_start != nullptr || host_end != nullptr;
    if (first_node_ < 0) {
      first_node_ = id;
      host_given_ = given;
    } else if (given != host_given_) {
      const std::string first = "traceEvents[" +
                                std::to_string(event_of_[static_cast<std::size_t>(first_node_)]) +
                                "] ('" + excerpt(slice_name(plan_.node(first_node_))) + "')";
      bad_slice(source_, index, event,
                given ? "field '" +
                            std::string(host_start != nullptr ? "args.host_start_us"
                                                              : "args.host_end_us") +
                            "' is given, but " + first +
                            " has no host times (a trace has them on every slice or on none)"
                      : "field 'args.host_start_us' is missing, but " + first +
                            " has host times (a trace has them on every slice or on none)");
    }
    if (!given) return;
    const double begun = slice_time(source_, index, event, "host_start_us", false, true);
    const double ended = slice_time(source_, index, event, "host_end_us", false, true);
    if (ended < begun) {
      bad_slice(source_, index, event,
                "field 'args.host_end_us' = " + json(ended).dump() +
                    " is before 'args.host_start_us' = " + json(begun).dump() +
                    " (the host finished queuing the node before it began)");
    }
    host_[static_cast<std::size_t>(id)] = {begun, ended};
  }

  // A slice that names no node but has a node's name and is drawn on its track: that node's
  // slice, its args lost. Remembered (the first for each node) for the error that the node has
  // no slice.
  void note_nodeless(const json& event, std::size_t index) {
    const json* name = member(event, "name");
    if (name == nullptr || !name->is_string()) return;
    if (!by_name_built_) {
      by_name_.reserve(static_cast<std::size_t>(plan_.node_count()));
      for (int id = 0; id < plan_.node_count(); ++id)
        by_name_.emplace(slice_name(plan_.node(id)), id);
      by_name_built_ = true;
    }
    const std::optional<std::int64_t> pid = integer_of(member(event, "pid"));
    const std::optional<std::int64_t> tid = integer_of(member(event, "tid"));
    const auto [first, last] = by_name_.equal_range(name->get_ref<const std::string&>());
    for (auto it = first; it != last; ++it) {
      const SliceTrack& track = tracks_[static_cast<std::size_t>(it->second)];
      if (pid == std::optional<std::int64_t>(track.pid) &&
          (tid == std::optional<std::int64_t>(track.tid) ||
           tid == std::optional<std::int64_t>(track.stream_tid))) {
        nodeless_.try_emplace(it->second, index);
      }
    }
  }

  const TaskGraph& plan_;
  std::string_view source_;
  std::vector<NodeTime> times_;
  std::vector<NodeTime> host_;
  std::vector<char> seen_;
  std::vector<std::size_t> event_of_;
  std::vector<SliceTrack> tracks_;
  int first_node_ = -1;      // the node of the first slice that names one
  bool host_given_ = false;  // whether that slice has host times (then every one has)
  // Slice names (slice_name) to nodes, built at the first slice that names no node.
  std::unordered_multimap<std::string, int> by_name_;
  bool by_name_built_ = false;
  std::unordered_map<int, std::size_t> nodeless_;  // node -> its slice without args.node
  std::optional<std::string> error_;
};

}  // namespace

std::vector<NodeTime> node_times_from_trace(const TaskGraph& plan, const json& trace,
                                            std::string_view source,
                                            std::vector<NodeTime>* host_times) {
  TraceTimes reader(plan, source);
  const json* events = member(trace, "traceEvents");
  if (events != nullptr && events->is_array()) {
    for (std::size_t index = 0; index < events->size(); ++index)
      reader.event((*events)[index], index);
  }
  return reader.finish(trace, host_times);
}

std::vector<NodeTime> read_trace_times(const TaskGraph& plan, const std::filesystem::path& path,
                                       std::vector<NodeTime>* host_times) {
  const std::string source = input_name(path);
  const std::string text = read_text_file(path);
  TraceTimes reader(plan, source);
  const json trace =
      parse_json_streaming(text, source, "traceEvents",
                           [&](json&& event, std::size_t index) { reader.event(event, index); });
  return reader.finish(trace, host_times);
}

namespace {

PairsDiff diff_pairs(const TaskGraph& plan, const SimResult& predicted, const SimResult& measured) {
  PairsDiff out;
  out.planned_efficiency = plan.meta.overlap.efficiency;
  const std::vector<OverlapPair> pairs = overlap_pairs(plan);
  out.pairs = static_cast<int>(pairs.size());
  if (pairs.empty()) return out;
  const auto span = [](const SimResult& sim, const OverlapPair& pair) {
    const NodeTime t = pair_time(pair, sim.times);
    return t.end_us - t.start_us;
  };
  std::vector<double> predicted_spans, measured_spans;
  for (const OverlapPair& pair : pairs) {
    predicted_spans.push_back(span(predicted, pair));
    measured_spans.push_back(span(measured, pair));
  }
  std::vector<double> efficiencies = pair_efficiencies(plan, measured.times);
  out.predicted_median_us = median(std::move(predicted_spans));
  out.measured_median_us = median(std::move(measured_spans));
  out.measured_from = static_cast<int>(efficiencies.size());
  if (!efficiencies.empty()) out.measured_efficiency = median(std::move(efficiencies));
  return out;
}

}  // namespace

TraceDiff diff_trace(const TaskGraph& plan, const SimResult& predicted, const SimResult& measured) {
  TraceDiff diff;
  double mape_sum = 0;
  int compute_ops = 0;
  for (int id = 0; id < plan.node_count(); ++id) {
    const Node& node = plan.node(id);
    const NodeTime& p = predicted.times.at(static_cast<std::size_t>(id));
    const NodeTime& m = measured.times.at(static_cast<std::size_t>(id));
    OpDiff op{id,
              op_label(node),
              node.device,
              plan.streams()[static_cast<std::size_t>(node.stream)].name(),
              p.end_us - p.start_us,
              m.end_us - m.start_us};
    if (node.kind == NodeKind::compute) {
      mape_sum += std::abs(op.error_pct());
      ++compute_ops;
    }
    diff.ops.push_back(std::move(op));
  }
  std::stable_sort(diff.ops.begin(), diff.ops.end(), [](const OpDiff& a, const OpDiff& b) {
    return std::abs(a.error_us()) > std::abs(b.error_us());
  });
  const std::size_t devices = std::min(predicted.devices.size(), measured.devices.size());
  for (std::size_t d = 0; d < devices; ++d) {
    const DeviceMetrics& p = predicted.devices[d];
    const DeviceMetrics& m = measured.devices[d];
    diff.devices.push_back({static_cast<int>(d), p.busy_us, m.busy_us, p.span_us, m.span_us});
  }
  const auto preds = predecessors(plan);
  // (stall, the predecessor that made the node ready, or -1 when it has none)
  const auto stall = [&](const SimResult& sim, int id) {
    const NodeTime& t = sim.times.at(static_cast<std::size_t>(id));
    double ready = -std::numeric_limits<double>::infinity();
    int last = -1;
    for (const auto& [from, kind] : preds[static_cast<std::size_t>(id)]) {
      const double end = sim.times.at(static_cast<std::size_t>(from)).end_us;
      if (end > ready) {
        ready = end;
        last = from;
      }
    }
    return std::pair{last >= 0 ? std::max(0.0, t.start_us - ready) : 0.0, last};
  };
  const bool host_known = measured.host_times.size() == measured.times.size();
  for (auto& d : diff.devices)
    d.measured_host_stall_us = host_known ? 0.0 : -1.0;
  // No op starts on the GPU before its thread began queuing it. A device whose compute ops seem
  // to (traces measured before the host and device clocks shared a zero) has its host clock
  // ahead: it is moved back by the most any op seems early, the estimate the clocks allow.
  std::vector<double> host_shift(devices, 0.0);
  if (host_known) {
    for (int id = 0; id < plan.node_count(); ++id) {
      const Node& node = plan.node(id);
      if (node.kind != NodeKind::compute || static_cast<std::size_t>(node.device) >= devices)
        continue;
      const double early = measured.host_times[static_cast<std::size_t>(id)].start_us -
                           measured.times[static_cast<std::size_t>(id)].start_us;
      double& shift = host_shift[static_cast<std::size_t>(node.device)];
      shift = std::max(shift, early);
    }
    for (std::size_t d = 0; d < devices; ++d) {
      if (host_shift[d] <= TraceDiff::kHostClockSlackUs) host_shift[d] = 0;
      diff.devices[d].host_clock_shift_us = host_shift[d];
    }
  }
  for (int id = 0; id < plan.node_count(); ++id) {
    const Node& node = plan.node(id);
    if (node.kind != NodeKind::compute || static_cast<std::size_t>(node.device) >= devices) {
      continue;
    }
    DeviceDiff& d = diff.devices[static_cast<std::size_t>(node.device)];
    d.predicted_stall_us += stall(predicted, id).first;
    const auto [waited, last] = stall(measured, id);
    d.measured_stall_us += waited;
    if (waited <= 0) continue;
    const double start = measured.times[static_cast<std::size_t>(id)].start_us;
    const double ready = start - waited;
    // Host and device clocks both count from the step's start (aligned to a launch latency, or
    // above): the op could not start before its host thread began queuing it.
    double host_late = -1;
    if (host_known) {
      const double queued = measured.host_times[static_cast<std::size_t>(id)].start_us -
                            host_shift[static_cast<std::size_t>(node.device)];
      host_late = std::clamp(queued - ready, 0.0, waited);
      d.measured_host_stall_us += host_late;
    }
    if (waited >= TraceDiff::kMinListedStallUs) {
      diff.stalls.push_back(
          {id, op_label(node), node.device, ready, waited, host_late, op_label(plan.node(last))});
    }
  }
  std::stable_sort(diff.stalls.begin(), diff.stalls.end(),
                   [](const StallDiff& a, const StallDiff& b) { return a.stall_us > b.stall_us; });
  diff.predicted_makespan_us = predicted.makespan_us;
  diff.measured_makespan_us = measured.makespan_us;
  diff.makespan_error_pct = pct(measured.makespan_us, predicted.makespan_us);
  diff.compute_mape_pct = compute_ops > 0 ? mape_sum / compute_ops : 0.0;
  diff.pairs = diff_pairs(plan, predicted, measured);
  return diff;
}

json diff_to_json(const TraceDiff& diff, int top) {
  json ops = json::array();
  const std::size_t shown = shown_count(diff.ops.size(), top);
  for (std::size_t i = 0; i < shown; ++i) {
    const OpDiff& op = diff.ops[i];
    ops.push_back({{"node", op.node},
                   {"label", op.label},
                   {"device", op.device},
                   {"stream", op.stream},
                   {"predicted_us", op.predicted_us},
                   {"measured_us", op.measured_us},
                   {"error_pct", op.error_pct()}});
  }
  json devices = json::array();
  for (const DeviceDiff& d : diff.devices) {
    devices.push_back({{"device", d.device},
                       {"predicted_busy_us", d.predicted_busy_us},
                       {"measured_busy_us", d.measured_busy_us},
                       {"busy_error_pct", pct(d.measured_busy_us, d.predicted_busy_us)},
                       {"predicted_span_us", d.predicted_span_us},
                       {"measured_span_us", d.measured_span_us},
                       {"span_error_pct", pct(d.measured_span_us, d.predicted_span_us)},
                       {"predicted_stall_us", d.predicted_stall_us},
                       {"measured_stall_us", d.measured_stall_us},
                       {"measured_host_stall_us", optional_us(d.measured_host_stall_us)},
                       {"host_clock_shift_us", d.host_clock_shift_us}});
  }
  json stalls = json::array();
  const std::size_t listed = shown_count(diff.stalls.size(), top);
  for (std::size_t i = 0; i < listed; ++i) {
    const StallDiff& st = diff.stalls[i];
    stalls.push_back({{"node", st.node},
                      {"label", st.label},
                      {"device", st.device},
                      {"ready_us", st.ready_us},
                      {"stall_us", st.stall_us},
                      {"host_late_us", optional_us(st.host_late_us)},
                      {"last_input", st.last_input}});
  }
  json out = {{"overall",
               {{"predicted_makespan_us", diff.predicted_makespan_us},
                {"measured_makespan_us", diff.measured_makespan_us},
                {"makespan_error_pct", diff.makespan_error_pct},
                {"compute_mape_pct", diff.compute_mape_pct},
                {"ops_total", diff.ops.size()},
                {"stalls_total", diff.stalls.size()}}},
              {"devices", std::move(devices)},
              {"ops", std::move(ops)},
              {"stalls", std::move(stalls)}};
  if (diff.pairs.pairs > 0) {
    const PairsDiff& p = diff.pairs;
    out["pairs"] = {{"pairs", p.pairs},
                    {"predicted_median_us", p.predicted_median_us},
                    {"measured_median_us", p.measured_median_us},
                    {"planned_efficiency", p.planned_efficiency},
                    {"measured_efficiency",
                     p.measured_efficiency < 0 ? json(nullptr) : json(p.measured_efficiency)},
                    {"measured_from", p.measured_from}};
  }
  return out;
}

namespace {

// printf-style text appended to `out`, however long (labels of concatenated ops grow with the
// micro-batches they join).
template <typename... Args>
void append_format(std::string& out, const char* format, Args... args) {
  const int n = std::snprintf(nullptr, 0, format, args...);
  if (n <= 0) return;
  const std::size_t at = out.size();
  out.resize(at + static_cast<std::size_t>(n) + 1);
  std::snprintf(out.data() + at, static_cast<std::size_t>(n) + 1, format, args...);
  out.resize(at + static_cast<std::size_t>(n));
}

}  // namespace

std::string format_diff(const TraceDiff& diff, int top) {
  std::string out;
  const std::size_t shown = shown_count(diff.ops.size(), top);
  append_format(out, "ops (%zu of %zu, worst first)\n", shown, diff.ops.size());
  append_format(out, "  %5s  %-22s %3s %-12s %12s %12s %9s\n", "node", "op", "dev", "stream",
                "pred us", "meas us", "error");
  for (std::size_t i = 0; i < shown; ++i) {
    const OpDiff& op = diff.ops[i];
    append_format(out, "  %5d  %-22s %3d %-12s %12.1f %12.1f %+8.1f%%\n", op.node, op.label.c_str(),
                  op.device, op.stream.c_str(), op.predicted_us, op.measured_us, op.error_pct());
  }
  out += "devices (compute stream)\n";
  append_format(out, "  %3s %12s %12s %9s %12s %12s %9s %12s %12s\n", "dev", "pred busy",
                "meas busy", "error", "pred span", "meas span", "error", "pred stall",
                "meas stall");
  for (const DeviceDiff& d : diff.devices) {
    append_format(out, "  %3d %12.1f %12.1f %+8.1f%% %12.1f %12.1f %+8.1f%% %12.1f %12.1f\n",
                  d.device, d.predicted_busy_us, d.measured_busy_us,
                  pct(d.measured_busy_us, d.predicted_busy_us), d.predicted_span_us,
                  d.measured_span_us, pct(d.measured_span_us, d.predicted_span_us),
                  d.predicted_stall_us, d.measured_stall_us);
  }
  const bool host_known = !diff.devices.empty() && diff.devices[0].measured_host_stall_us >= 0;
  out += diff.pairs.pairs > 0
             ? "  (stall: compute waited with every input ready; the simulator waits only where an "
               "overlapped pair's other op is not ready yet)\n"
             : "  (stall: compute waited with every input ready; the simulator never waits)\n";
  if (host_known) {
    out += "  of the measured stall, the host queued late:";
    for (const DeviceDiff& d : diff.devices) {
      append_format(out, " %.1f", d.measured_host_stall_us);
    }
    out += " us\n";
    double least = 0, most = 0;
    int shifted = 0;
    for (const DeviceDiff& d : diff.devices) {
      if (d.host_clock_shift_us <= 0) continue;
      least = shifted == 0 ? d.host_clock_shift_us : std::min(least, d.host_clock_shift_us);
      most = std::max(most, d.host_clock_shift_us);
      ++shifted;
    }
    if (shifted > 0) {
      append_format(out,
                    "  (host clock ahead of the GPU's on %d of %zu devices, by %.1f to %.1f us: "
                    "ops seemed to start before their thread queued them; each device's host "
                    "times moved back by its largest such lead)\n",
                    shifted, diff.devices.size(), least, most);
    }
  }
  if (!diff.stalls.empty()) {
    const std::size_t listed = shown_count(diff.stalls.size(), top);
    append_format(out, "stalls (%zu of %zu of %.0f us or more, longest first)\n", listed,
                  diff.stalls.size(), TraceDiff::kMinListedStallUs);
    append_format(out, "  %5s  %-22s %3s %12s %12s %12s  %s\n", "node", "op", "dev", "ready us",
                  "stall us", "host late", "ready after");
    for (std::size_t i = 0; i < listed; ++i) {
      const StallDiff& st = diff.stalls[i];
      char host[32];
      if (st.host_late_us < 0) {
        std::snprintf(host, sizeof host, "%12s", "-");
      } else {
        std::snprintf(host, sizeof host, "%12.1f", st.host_late_us);
      }
      append_format(out, "  %5d  %-22s %3d %12.1f %12.1f %s  %s\n", st.node, st.label.c_str(),
                    st.device, st.ready_us, st.stall_us, host, st.last_input.c_str());
    }
  }
  if (diff.pairs.pairs > 0) {
    const PairsDiff& p = diff.pairs;
    append_format(out,
                  "overlapped pairs: %d, median time predicted %.1f us, measured %.1f us; overlap "
                  "efficiency planned %.2f, ",
                  p.pairs, p.predicted_median_us, p.measured_median_us, p.planned_efficiency);
    if (p.measured_efficiency < 0) {
      out += "measured unknown (no pair's ops also ran alone)\n";
    } else {
      append_format(out, "measured %.2f (from %d pairs beside their ops alone)\n",
                    p.measured_efficiency, p.measured_from);
    }
  }
  append_format(out,
                "step time (makespan): predicted %.1f us, measured %.1f us, error %+.1f%%\n"
                "compute ops: mean absolute error %.1f%%\n",
                diff.predicted_makespan_us, diff.measured_makespan_us, diff.makespan_error_pct,
                diff.compute_mape_pct);
  return out;
}

}  // namespace pipeplan
