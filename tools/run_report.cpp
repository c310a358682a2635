#include "tools/run_report.h"

#include <cmath>
#include <cstdio>

#include "runtime/emulate.h"
#include "tools/units.h"

namespace pipeplan {

namespace {

std::string mfu_text(double mfu) {
  return printf_text("%.1f %%", mfu * 100.0);
}

std::string peak_text(const MeasuredHardware& hw) {
  return printf_text("%.1f TFLOP/s", hw.peak_flops / 1e12);
}

}  // namespace

std::string emulation_line(const MeasuredHardware& hw) {
  if (!hw.emulated()) return "";
  std::string line = std::string(kEmulatedNote) + " (" + std::to_string(hw.emulated_stages) +
                     " stages x " + std::to_string(hw.sm_per_stage) + " of " +
                     std::to_string(hw.total_sms) + " SMs";
  if (hw.work_queues > 0)
    line += ", " + std::to_string(hw.work_queues) + " work queues per context";
  return line + ")";
}

std::string format_run_report(const RunComparison& run, const MeasuredHardware& hw) {
  std::string out;
  if (hw.emulated()) out += emulation_line(hw) + "\n";
  out += printf_text("%-26s %14s %14s %10s\n", "", "predicted", "measured", "error");
  out += printf_text("%-26s %11.3f ms %11.3f ms %+8.2f %%\n", "step time (makespan)",
                     run.predicted_makespan_us / 1e3, run.measured_makespan_us / 1e3,
                     run.makespan_error_pct);
  if (run.steady_steps > 0 && (run.steady_steps > 1 || run.steady_first_step > 1)) {
    const std::string label =
        run.steady_steps == 1 ? "  step " + std::to_string(run.steady_first_step)
                              : "  median, steps " + std::to_string(run.steady_first_step) + "-" +
                                    std::to_string(run.steady_first_step + run.steady_steps - 1);
    out += printf_text("%-26s %11.3f ms %11.3f ms %+8.2f %%\n", label.c_str(),
                       run.predicted_makespan_us / 1e3, run.steady_makespan_us / 1e3,
                       run.steady_error_pct);
  }
  if (run.predicted_step_time_us > 0) {  // the plan's optimizer nodes: one quantity
    out += printf_text("%-26s %11.3f ms %11.3f ms %+8.2f %%\n", "step time (wall, +AdamW)",
                       run.predicted_step_time_us / 1e3, run.measured_step_time_us / 1e3,
                       percent_error(run.measured_step_time_us, run.predicted_step_time_us));
  } else {
    out += printf_text("%-26s %14s %11.3f ms\n", "step time (wall, +AdamW)", "",
                       run.measured_step_time_us / 1e3);
  }
  out += printf_text("%-26s %14.0f %14.0f %+8.2f %%\n", "tokens/s", run.predicted_tokens_per_s,
                     run.measured_tokens_per_s,
                     percent_error(run.measured_tokens_per_s, run.predicted_tokens_per_s));
  if (hw.peak_flops > 0) {
    out += printf_text("%-26s %14s %14s\n", "MFU (PaLM model FLOPs)",
                       mfu_text(run.predicted_mfu_on_gpus_used).c_str(),
                       mfu_text(run.measured_mfu).c_str());
    out += "  both against " + std::to_string(hw.gpus) + " x " + hw.device_name + " (" + hw.gpu +
           ", " + peak_text(hw) + " dense bf16 each)";
    if (std::abs(run.predicted_mfu - run.predicted_mfu_on_gpus_used) > 5e-4) {
      out += "; the plan's own figure, against its devices: " + mfu_text(run.predicted_mfu);
    }
    if (hw.emulated()) {
      out += "; " + mfu_text(run.measured_mfu_of_share) + " of the " +
             std::to_string(hw.emulated_stages * hw.sm_per_stage) + " SMs granted (" +
             printf_text("%.1f %%", run.sm_share * 100.0) + " of the GPU)";
    }
    out += "\n";
  } else {
    out += "MFU: unknown peak for device '" + hw.device_name + "' (pass --gpu)\n";
  }
  const bool accounted = run.accounted_peak_bytes.size() == run.measured_peak_bytes.size();
  out += accounted ? "peak memory per stage (allocator; the plan's tensors as the runtime counted "
                     "them):\n"
                   : "peak memory per stage (allocator):\n";
  for (std::size_t d = 0; d < run.measured_peak_bytes.size(); ++d) {
    const double want = d < run.predicted_peak_bytes.size()
                            ? static_cast<double>(run.predicted_peak_bytes[d])
                            : 0.0;
    out += printf_text("  device %-3zu %20s %14s %+8.2f %%", d, format_gib(want).c_str(),
                       format_gib(static_cast<double>(run.measured_peak_bytes[d])).c_str(),
                       run.peak_bytes_error_pct[d]);
    if (accounted) {
      out += "  (" + format_gib(static_cast<double>(run.accounted_peak_bytes[d])) + ")";
    }
    out += "\n";
  }
  return out;
}

nlohmann::json run_report_json(const RunComparison& run, const MeasuredHardware& hw) {
  nlohmann::json memory = nlohmann::json::array();
  for (std::size_t d = 0; d < run.measured_peak_bytes.size(); ++d) {
    memory.push_back(
        {{"device", d},
         {"predicted_bytes",
          d < run.predicted_peak_bytes.size() ? run.predicted_peak_bytes[d] : std::int64_t{0}},
         {"measured_bytes", run.measured_peak_bytes[d]},
         {"error_pct", run.peak_bytes_error_pct[d]}});
    if (d < run.accounted_peak_bytes.size()) {
      memory.back()["accounted_bytes"] = run.accounted_peak_bytes[d];
    }
  }
  nlohmann::json hardware = {{"device_name", hw.device_name},
                             {"gpu", hw.gpu},
                             {"peak_bf16_tflops", hw.peak_flops / 1e12},
                             {"gpus", hw.gpus},
                             {"emulated", hw.emulated()}};
  if (hw.work_queues > 0) hardware["work_queues_per_context"] = hw.work_queues;
  if (hw.emulated()) {
    hardware["note"] = std::string(kEmulatedNote);
    hardware["emulated_stages"] = hw.emulated_stages;
    hardware["sm_per_stage"] = hw.sm_per_stage;
    hardware["total_sms"] = hw.total_sms;
    hardware["sm_share"] = run.sm_share;
  }
  nlohmann::json measured = {
      {"makespan_us", run.measured_makespan_us},
      {"step_time_us", run.measured_step_time_us},
      {"tokens_per_s", run.measured_tokens_per_s},
      {"mfu", hw.peak_flops > 0 ? nlohmann::json(run.measured_mfu) : nlohmann::json(nullptr)}};
  if (hw.emulated() && hw.peak_flops > 0) measured["mfu_of_sm_share"] = run.measured_mfu_of_share;
  nlohmann::json errors = {
      {"makespan", run.makespan_error_pct},
      {"tokens_per_s", percent_error(run.measured_tokens_per_s, run.predicted_tokens_per_s)}};
  if (run.predicted_step_time_us > 0) {
    errors["step_time"] = percent_error(run.measured_step_time_us, run.predicted_step_time_us);
  }
  if (run.steady_steps > 0) {
    measured["steady"] = {{"makespan_us", run.steady_makespan_us},
                          {"steps", run.steady_steps},
                          {"first_step", run.steady_first_step}};
    errors["steady_makespan"] = run.steady_error_pct;
  }
  return {
      {"hardware", std::move(hardware)},
      {"mfu_kind", "PaLM model FLOPs (no recomputation)"},
      {"predicted",
       {{"makespan_us", run.predicted_makespan_us},
        {"step_time_us", run.predicted_step_time_us > 0 ? nlohmann::json(run.predicted_step_time_us)
                                                        : nlohmann::json(nullptr)},
        {"tokens_per_s", run.predicted_tokens_per_s},
        {"mfu", run.predicted_mfu},
        {"mfu_on_gpus_used", hw.peak_flops > 0 ? nlohmann::json(run.predicted_mfu_on_gpus_used)
                                               : nlohmann::json(nullptr)}}},
      {"measured", std::move(measured)},
      {"error_pct", std::move(errors)},
      {"peak_memory", std::move(memory)}};
}

}  // namespace pipeplan
