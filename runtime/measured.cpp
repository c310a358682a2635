#include "runtime/measured.h"

#include <algorithm>
#include <string>
#include <utility>

#include "planner/base/error.h"
#include "planner/base/stats.h"
#include "planner/graph/metrics.h"

namespace pipeplan {

SimResult measured_result(const TaskGraph& plan, std::vector<NodeTime> times,
                          std::vector<MeasuredDevice> devices) {
  SimResult result;
  static_cast<StepMetrics&>(result) = step_metrics(plan, times);
  result.times = std::move(times);
  if (devices.size() > result.devices.size()) {
    throw Error("measured run: " + std::to_string(devices.size()) +
                " devices measured for a plan of " + std::to_string(result.devices.size()));
  }
  for (std::size_t d = 0; d < devices.size(); ++d) {
    if (devices[d].memory_timeline.empty()) continue;
    result.devices[d].peak_memory_bytes = devices[d].peak_bytes;
    result.devices[d].memory_timeline = std::move(devices[d].memory_timeline);
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
  const auto nodes = plan.nodes();
  if (std::any_of(nodes.begin(), nodes.end(),
                  [](const Node& n) { return n.kind == NodeKind::compute && n.op == OpType::O; })) {
    c.predicted_step_time_us = predicted.makespan_us;
  }
  c.predicted_tokens_per_s = predicted.tokens_per_s;
  c.measured_tokens_per_s = measured.tokens_per_s;
  c.predicted_mfu = predicted.mfu;
  const double model_flops_per_s = measured.tokens_per_s * plan.meta.flops_per_token;
  if (hardware.peak_flops > 0) {
    c.measured_mfu = model_flops_per_s / (hardware.gpus * hardware.peak_flops);
    c.predicted_mfu_on_gpus_used =
        predicted.tokens_per_s * plan.meta.flops_per_token / (hardware.gpus * hardware.peak_flops);
    if (hardware.emulated() && hardware.total_sms > 0 && hardware.sm_per_stage > 0) {
      c.sm_share = static_cast<double>(hardware.emulated_stages * hardware.sm_per_stage) /
                   hardware.total_sms;
      c.measured_mfu_of_share = c.measured_mfu / c.sm_share;
    }
  }
  c.predicted_peak_bytes = predicted.peak_memory_bytes();
  c.accounted_peak_bytes = measured.peak_memory_bytes();
  c.measured_peak_bytes = allocator_peak_bytes;
  for (std::size_t d = 0; d < c.measured_peak_bytes.size(); ++d) {
    const double want =
        d < c.predicted_peak_bytes.size() ? static_cast<double>(c.predicted_peak_bytes[d]) : 0.0;
    c.peak_bytes_error_pct.push_back(
        percent_error(static_cast<double>(c.measured_peak_bytes[d]), want));
  }
  return c;
}

void set_steady_steps(RunComparison& run, const std::vector<double>& makespans_us) {
  if (makespans_us.empty()) throw Error("measured run: no steps");
  const std::size_t first = makespans_us.size() > 1 ? 1 : 0;
  std::vector<double> steady(makespans_us.begin() + static_cast<std::ptrdiff_t>(first),
                             makespans_us.end());
  run.steady_steps = static_cast<int>(steady.size());
  run.steady_first_step = static_cast<int>(first) + 1;
  run.steady_makespan_us = median(std::move(steady));
  run.steady_error_pct = percent_error(run.steady_makespan_us, run.predicted_makespan_us);
}

}  // namespace pipeplan
