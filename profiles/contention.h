// How much slower a compute op runs while other pipeline stages compute on the same GPU: the
// emulated stages of `pipeplan run --emulate` share one GPU's HBM, L2 and power budget, so an op
// profiled alone in its SM share (`profile --sm-partition`) takes longer when its neighbours are
// busy. The simulator divides the GPU between the ops running at once (processor sharing, see
// planner/graph/simulator.h); separate GPUs have no such model (empty).
//
// Stored in a profile (its optional "contention" object) and copied into the plan's meta by the
// planner, so the simulator, the runtime's report and `diff` read one prediction. Fitted from
// measured traces by `pipeplan calibrate fit` (planner/calibrate/contention_fit.h,
// docs/reference/profile-format.md).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pipeplan {

// A transfer between stages on one GPU is a copy kernel on its link stream, made in the sending
// stage's green context (runtime/cuda/device_local_transport.h): it shares the sender's SMs, and
// beside the sender's GEMMs it gets them only between kernels. Its time over the plan's link
// time (bytes / bandwidth + latency), while the sender runs no compute op and while it runs one.
struct CopySlowdown {
  double sender_idle = 1;
  double sender_computing = 1;
  bool operator==(const CopySlowdown&) const = default;
};

// A GPU that has been busy runs every op slower for a while: measured on an H200, an op's time
// over its profile grew with how long all the stages had been computing, and stayed up after
// they stopped (docs/results.md; a clock held down by the power limit fits this). The
// model: a load H, the share of the devices computing, averaged exponentially over the last
// `time_constant_us` (dH/dt = (L - H) / time_constant_us, L the share now), multiplies every
// compute op's slowdown by 1 + factor * H. The step is taken as repeating: it starts at the load
// its own end leaves (planner/graph/simulator.h).
struct SustainedLoad {
  double factor = 0;
  double time_constant_us = 1;
  bool operator==(const SustainedLoad&) const = default;
};

// The profiled work an op of slowdown 1 gets done in `dt` µs while the load moves from `h`
// towards `share` (the share of the devices computing, constant over `dt`): the integral of
// dt' / (1 + factor * H(t')), in closed form. `dt` itself without a factor; 0 for dt <= 0.
double sustained_work(const SustainedLoad& load, double dt, double share, double h);

struct Contention {
  // slowdown[k - 1]: an op's time over its profiled time while k compute ops run on the GPU at
  // once, itself included; beyond the last entry the last applies. Empty: no model.
  std::vector<double> slowdown;
  // The same per op type ("F", "B", "P1", "P2") where it differs; the others use `slowdown`.
  std::map<std::string, std::vector<double>, std::less<>> by_op;
  // Transfers between the stages: unset, each takes the plan's link time whatever the stages do.
  std::optional<CopySlowdown> copy;
  // Unset: an op's slowdown depends only on the ops running with it.
  std::optional<SustainedLoad> sustained;
  std::string source;  // where the factors come from (fit, traces, date)

  bool empty() const { return slowdown.empty(); }
  // The curve for an op type: its own, else `slowdown`.
  const std::vector<double>& curve(std::string_view op) const;
  // The factor for `running` ops at once (running >= 1) on `curve`; 1 on an empty curve.
  static double factor(const std::vector<double>& curve, std::size_t running);
};

// {"slowdown": [...], "by_op": {"P1": [...], ...}, "copy": {"sender_idle": x, "sender_computing":
// y}, "sustained": {"factor": b, "time_constant_us": t}, "source": "..."} ("by_op", "copy" and
// "sustained" only when set)
nlohmann::json contention_to_json(const Contention& contention);
// Throws Error naming `context` and the field: each curve must be 1 to kMaxContentionEntries
// finite numbers in (0, kMaxSlowdown], by_op's keys F, B, P1 or P2, and copy's two factors
// numbers in (0, kMaxSlowdown], sustained's factor in [0, kMaxSlowdown] and its time constant in
// (0, kMaxTimeConstantUs].
Contention contention_from_json(const nlohmann::json& json, std::string_view context);

inline constexpr std::size_t kMaxContentionEntries = 1024;  // one per device at most
inline constexpr double kMaxSlowdown = 100;
inline constexpr double kMaxTimeConstantUs = 1e9;  // 1000 s

}  // namespace pipeplan
