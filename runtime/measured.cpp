#include "runtime/measured.h"

#include <algorithm>
#include <limits>

#include "planner/base/error.h"

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

double percent_error(double measured, double predicted) {
  return predicted != 0 ? (measured - predicted) / predicted * 100.0 : 0.0;
}

RunComparison compare_with_prediction(const TaskGraph& plan, const SimResult& predicted,
                                      const SimResult& measured, double step_time_us,
                                      const std::vector<std::int64_t>& allocator_peak_bytes,
                                      const MeasuredHardware& hardware) {
  if (hardware.gpus <= 0) throw Error("measured run: GPU count must be positive");
  RunComparison c;
  c.predicted_makespan_us = predicted.makespan_us;
  c.measured_makespan_us = measured.makespan_us;
  c.makespan_error_pct = percent_error(measured.makespan_us, predicted.makespan_us);
  c.measured_step_time_us = step_time_us;
  c.predicted_tokens_per_s = predicted.tokens_per_s;
  c.measured_tokens_per_s = measured.tokens_per_s;
  c.predicted_mfu = predicted.mfu;
  const double model_flops_per_s = measured.tokens_per_s * plan.meta.flops_per_token;
  if (hardware.peak_flops > 0) {
    c.measured_mfu = model_flops_per_s / (hardware.gpus * hardware.peak_flops);
    if (hardware.emulated() && hardware.total_sms > 0 && hardware.sm_per_stage > 0) {
      c.sm_share = static_cast<double>(hardware.emulated_stages * hardware.sm_per_stage) /
                   hardware.total_sms;
      c.measured_mfu_of_share = c.measured_mfu / c.sm_share;
    }
  }
  c.predicted_peak_bytes = predicted.peak_memory_bytes();
  c.measured_peak_bytes = allocator_peak_bytes;
  for (std::size_t d = 0; d < c.measured_peak_bytes.size(); ++d) {
    const double want =
        d < c.predicted_peak_bytes.size() ? static_cast<double>(c.predicted_peak_bytes[d]) : 0.0;
    c.peak_bytes_error_pct.push_back(
        percent_error(static_cast<double>(c.measured_peak_bytes[d]), want));
  }
  return c;
}

}  // namespace pipeplan
