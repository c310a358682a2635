#include "runtime/measured.h"

#include <algorithm>
#include <limits>

namespace pipeplan {

namespace {

void device_metrics(const TaskGraph& plan, SimResult& result) {
  std::vector<char> seen(result.devices.size(), 0);
  for (int id = 0; id < plan.node_count(); ++id) {
    const Node& node = plan.node(id);
    if (node.kind != NodeKind::compute) continue;
    const auto d = static_cast<std::size_t>(node.device);
    const NodeTime& t = result.times[static_cast<std::size_t>(id)];
    DeviceMetrics& m = result.devices[d];
    m.busy_us += t.end_us - t.start_us;
    m.first_start_us = seen[d] ? std::min(m.first_start_us, t.start_us) : t.start_us;
    m.last_end_us = seen[d] ? std::max(m.last_end_us, t.end_us) : t.end_us;
    seen[d] = 1;
  }
}

}  // namespace

SimResult measured_result(const TaskGraph& plan, std::vector<NodeTime> times,
                          std::vector<MeasuredDevice> devices) {
  SimResult result;
  result.times = std::move(times);
  result.devices.assign(devices.size(), DeviceMetrics{});
  for (std::size_t d = 0; d < devices.size(); ++d) {
    result.devices[d].peak_memory_bytes = devices[d].peak_bytes;
    result.devices[d].memory_timeline = std::move(devices[d].memory_timeline);
  }
  double first = std::numeric_limits<double>::max();
  double last = 0;
  for (const NodeTime& t : result.times) {
    first = std::min(first, t.start_us);
    last = std::max(last, t.end_us);
  }
  if (result.times.empty()) first = 0;
  result.makespan_us = last - first;
  device_metrics(plan, result);
  double busy_total = 0;
  for (DeviceMetrics& m : result.devices) {
    m.span_us = m.last_end_us - m.first_start_us;
    m.bubble_ratio =
        result.makespan_us > 0 ? (result.makespan_us - m.busy_us) / result.makespan_us : 0.0;
    result.max_stage_span_us = std::max(result.max_stage_span_us, m.span_us);
    busy_total += m.busy_us;
  }
  const auto count = static_cast<double>(result.devices.size());
  if (result.makespan_us > 0 && count > 0) {
    result.bubble_ratio = 1.0 - busy_total / (count * result.makespan_us);
    const double tokens =
        static_cast<double>(plan.meta.microbatches) * plan.meta.mbs * plan.meta.seq;
    result.tokens_per_s = tokens / (result.makespan_us * 1e-6);
  }
  if (result.max_stage_span_us > 0 && count > 0) {
    result.span_bubble_ratio = 1.0 - busy_total / (count * result.max_stage_span_us);
  }
  return result;
}

}  // namespace pipeplan
