// How an overlapped pair takes its device: DualPipe's F&B, one micro-batch's forward running
// beside another's backward (schedules/schedule.h), each hiding the other's communication. The
// pair lasts
//   overlapped_time_us(a, b) = max(a, b) + (1 - efficiency) * min(a, b),
// so efficiency 1 is the bound max(F, B) (the shorter op entirely hidden) and efficiency 0 runs
// the two one after the other (F + B). The profile carries the efficiency: measured on the CUDA
// backend (the two ops of a layer run at once on two streams, `profile --backend cuda`), else
// 0, the sequential bound, for compute-bound dense layers whose kernels each fill the GPU. The
// simulator (planner/graph/simulator.h) and the compact schedule simulation apply this formula
// and nothing else. Format: docs/reference/profile-format.md ("overlap").
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace pipeplan {

struct OverlapModel {
  double efficiency = 0;  // 0..1
  std::string source;     // where the figure comes from ("" when the default)
  bool operator==(const OverlapModel&) const = default;
  bool is_default() const { return efficiency == 0 && source.empty(); }
};

double overlapped_time_us(double a_us, double b_us, double efficiency);
inline double overlapped_time_us(double a_us, double b_us, const OverlapModel& model) {
  return overlapped_time_us(a_us, b_us, model.efficiency);
}

// The efficiency that makes overlapped_time_us(a, b) equal a measured pair time, clamped to
// [0, 1] (a pair slower than its two ops in sequence is 0).
double overlap_efficiency_from(double a_us, double b_us, double pair_us);

nlohmann::json overlap_to_json(const OverlapModel& model);
// Throws Error naming `context` and the field ("overlap.efficiency" from 0 to 1, "overlap.source"
// a string).
OverlapModel overlap_from_json(const nlohmann::json& json, std::string_view context);

}  // namespace pipeplan
