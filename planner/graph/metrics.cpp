#include "planner/graph/metrics.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include "planner/base/error.h"
#include "profiles/gpu.h"

namespace pipeplan {

std::vector<std::int64_t> StepMetrics::peak_memory_bytes() const {
  std::vector<std::int64_t> peaks;
  peaks.reserve(devices.size());
  for (const DeviceMetrics& d : devices)
    peaks.push_back(d.peak_memory_bytes);
  return peaks;
}

std::int64_t StepMetrics::largest_peak_memory_bytes() const {
  std::int64_t largest = 0;
  for (const DeviceMetrics& d : devices)
    largest = std::max(largest, d.peak_memory_bytes);
  return largest;
}

std::int64_t StepMetrics::shared_gpu_memory_bytes() const {
  std::int64_t sum = 0;
  for (const DeviceMetrics& d : devices)
    sum += d.peak_memory_bytes;
  return sum;
}

double shared_gpu_hbm_bytes(const PlanMeta& meta) {
  return meta.contention.empty() ? 0.0 : gpu_hbm_bytes(meta.gpu);
}

bool over_shared_gpu_hbm(const PlanMeta& meta, const StepMetrics& step) {
  const double hbm = shared_gpu_hbm_bytes(meta);
  return hbm > 0 && static_cast<double>(step.shared_gpu_memory_bytes()) > hbm;
}

double mfu_of_one_gpu(const PlanMeta& meta, const StepMetrics& step) {
  return meta.contention.empty() ? step.mfu : step.mfu * meta.devices;
}

std::string mfu_above_peak_note(const PlanMeta& meta, const StepMetrics& step) {
  const double mfu = mfu_of_one_gpu(meta, step);
  if (!(mfu > 1.0)) return "";
  const double tflops = meta.peak_flops_per_device / 1e12 / std::max(1, meta.tensor_parallel);
  char figures[96];
  std::snprintf(figures, sizeof figures, "MFU %.1f %% is above 100 %% of gpu '", mfu * 100);
  char peak[64];
  std::snprintf(peak, sizeof peak, "' (%g TFLOP/s a GPU)", tflops);
  return figures + meta.gpu + peak +
         (meta.contention.empty() ? "" : " for the stages that share it") +
         ": the plan's times are faster than its peak computes the model's FLOPs (check the "
         "durations, and the profile's times and model)";
}

namespace {

// A change of a device's memory at `time`: +alloc / -free; `held`, for a node that starts and
// ends at one instant, what it holds for that instant on top of the memory before it (its
// allocation and working memory; `delta` is then its allocation less its release).
struct MemoryEvent {
  double time;
  std::int64_t delta;
  std::int64_t held = 0;
  bool operator<(const MemoryEvent& o) const {
    return time != o.time ? time < o.time : delta < o.delta;
  }
};
using MemoryEvents = std::vector<MemoryEvent>;

void memory_metrics(const TaskGraph& graph, std::vector<MemoryEvents>& events,
                    std::vector<DeviceMetrics>& devices) {
  for (std::size_t d = 0; d < devices.size(); ++d) {
    auto& e = events[d];
    // Releases (negative) sort first at equal times. A device's events come in node order, which
    // for a lowered plan is its compute stream's order: usually sorted already, and checking is
    // linear where sorting is not.
    if (!std::is_sorted(e.begin(), e.end())) std::sort(e.begin(), e.end());
    const std::int64_t base = d < graph.meta.static_bytes.size() ? graph.meta.static_bytes[d] : 0;
    std::int64_t current = base;
    DeviceMetrics& m = devices[d];
    m.peak_memory_bytes = base;
    m.memory_timeline.clear();
    m.memory_timeline.reserve(e.size() + 1);
    m.memory_timeline.emplace_back(0.0, base);
    for (const auto& [time, delta, held] : e) {
      m.peak_memory_bytes = std::max(m.peak_memory_bytes, current + held);
      current += delta;
      m.peak_memory_bytes = std::max(m.peak_memory_bytes, current);
      if (m.memory_timeline.back().first == time) {
        m.memory_timeline.back().second = current;
      } else {
        m.memory_timeline.emplace_back(time, current);
      }
    }
  }
}

}  // namespace

StepMetrics step_metrics(const TaskGraph& graph, std::span<const NodeTime> times) {
  const int n_nodes = graph.node_count();
  if (times.size() != static_cast<std::size_t>(n_nodes)) {
    throw Error("step metrics: " + std::to_string(times.size()) +
                " node times for a task graph of " + std::to_string(n_nodes) + " nodes");
  }
  const auto n_devices = static_cast<std::size_t>(std::max(graph.meta.devices, 0));
  StepMetrics result;
  result.devices.assign(n_devices, DeviceMetrics{});
  std::vector<char> seen(n_devices, 0);
  std::vector<MemoryEvents> events(n_devices);
  // Room for an event or two per compute node of an even share (a compute node allocates at its
  // start, frees at its end or both): most plans never regrow a device's list.
  const std::size_t share = n_devices > 0 ? graph.nodes().size() / n_devices : 0;
  for (MemoryEvents& e : events)
    e.reserve(share);
  // A measured trace may start anywhere (its clock's zero is the run's, not the step's).
  double first = std::numeric_limits<double>::max();
  double last = std::numeric_limits<double>::lowest();
  // One pass over the nodes: times, compute-stream spans and memory events together.
  const std::span<const Node> nodes = graph.nodes();
  bool any_pair = false;  // a node flagged overlaps_next: overlap_pairs below has work
  for (std::size_t id = 0; id < nodes.size(); ++id) {
    const Node& n = nodes[id];
    const NodeTime& t = times[id];
    first = std::min(first, t.start_us);
    last = std::max(last, t.end_us);
    const auto d = static_cast<std::size_t>(n.device);
    if (n.device < 0 || d >= n_devices) {
      throw Error("step metrics: " + graph.node_name(static_cast<int>(id)) +
                  " runs on unknown device " + std::to_string(n.device));
    }
    // Working memory is held from the node's start to its end, on top of what it allocates.
    if (t.end_us == t.start_us) {
      // Its start and its end at one instant: ordered by bytes alone, the end's release could
      // come first and the node would never be seen holding anything.
      if (n.alloc_bytes + n.work_bytes + n.free_bytes != 0) {
        events[d].push_back(
            {t.start_us, n.alloc_bytes - n.free_bytes, n.alloc_bytes + n.work_bytes});
      }
    } else {
      if (n.alloc_bytes + n.work_bytes != 0) {
        events[d].push_back({t.start_us, n.alloc_bytes + n.work_bytes});
      }
      if (n.free_bytes + n.work_bytes != 0) {
        events[d].push_back({t.end_us, -(n.free_bytes + n.work_bytes)});
      }
    }
    any_pair = any_pair || n.overlaps_next;
    if (n.kind != NodeKind::compute) continue;
    DeviceMetrics& m = result.devices[d];
    if (!n.overlaps_next) m.busy_us += t.end_us - t.start_us;  // a pair's first: counted below
    if (n.op == OpType::O) m.optimizer_us += t.end_us - t.start_us;
    m.first_start_us = seen[d] ? std::min(m.first_start_us, t.start_us) : t.start_us;
    m.last_end_us = seen[d] ? std::max(m.last_end_us, t.end_us) : t.end_us;
    seen[d] = 1;
  }
  // An overlapped pair keeps its device busy over the union of its members' times (equal when
  // simulated; on two streams when measured): the second member counted its own time above.
  for (const OverlapPair& p : any_pair ? overlap_pairs(graph) : std::vector<OverlapPair>()) {
    const NodeTime& a = times[static_cast<std::size_t>(p.first)];
    const NodeTime& b = times[static_cast<std::size_t>(p.second)];
    const double overlap =
        std::max(0.0, std::min(a.end_us, b.end_us) - std::max(a.start_us, b.start_us));
    result.devices[static_cast<std::size_t>(graph.node(p.first).device)].busy_us +=
        a.end_us - a.start_us - overlap;
  }
  if (n_nodes == 0) first = last = 0;
  result.makespan_us = last - first;
  double busy_total = 0;
  for (DeviceMetrics& m : result.devices) {
    m.span_us = m.last_end_us - m.first_start_us;
    const double work = m.work_us();
    m.bubble_ratio =
        result.makespan_us > 0 ? (result.makespan_us - work) / result.makespan_us : 0.0;
    result.max_stage_span_us = std::max(result.max_stage_span_us, m.span_us);
    busy_total += work;
  }
  const auto devices = static_cast<double>(n_devices);
  if (result.makespan_us > 0 && n_devices > 0) {
    result.bubble_ratio = 1.0 - busy_total / (devices * result.makespan_us);
    const PlanMeta& meta = graph.meta;
    // Every replica of the pipeline runs its own micro-batches in the same step on its own GPUs.
    const double replicas = meta.data_parallel.replicas;
    const double tokens = static_cast<double>(meta.microbatches) * meta.mbs * meta.seq * replicas;
    result.tokens_per_s = tokens / (result.makespan_us * 1e-6);
    if (meta.flops_per_token > 0 && meta.peak_flops_per_device > 0) {
      result.mfu = result.tokens_per_s * meta.flops_per_token /
                   (devices * replicas * meta.peak_flops_per_device);
    }
  }
  if (result.max_stage_span_us > 0 && n_devices > 0) {
    result.span_bubble_ratio = 1.0 - busy_total / (devices * result.max_stage_span_us);
  }
  memory_metrics(graph, events, result.devices);
  return result;
}

}  // namespace pipeplan
