// How much slower a compute op runs while other pipeline stages compute on the same GPU: the
// emulated stages of `pipeplan run --emulate` share one GPU's HBM, L2 and power budget, so an op
// profiled alone in its SM share (`profile --sm-partition`) takes longer when its neighbours are
// busy. The simulator divides the GPU between the ops running at once (processor sharing, see
// planner/graph/simulator.h). Separate GPUs have no curve: at most a sustained-load term, each
// device then being its own GPU with its own clock.
//
// Stored in a profile (its optional "contention" object) and copied into the plan's meta by the
// planner, so the simulator, the runtime's report and `diff` read one prediction. Fitted from
// measured traces by `pipeplan calibrate fit` (planner/calibrate/contention_fit.h,
// docs/reference/profile-format.md).
#pragma once

#include <functional>
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
// compute op's slowdown by 1 + factor * H. On separate GPUs (no curve) each device is its own
// GPU with its own clock: its own H, L being 1 while it computes and 0 while it idles
// (DeviceLoad below). The step is taken as repeating: it starts at the loads its own end leaves
// (planner/graph/simulator.h).
struct SustainedLoad {
  double factor = 0;
  double time_constant_us = 1;
  bool operator==(const SustainedLoad&) const = default;
};

// The profiled work an op of slowdown 1 gets done in `dt` µs while the load moves from `h`
// towards `share` (the share of the devices computing, constant over `dt`): the integral of
// dt' / (1 + factor * H(t')), in closed form. `dt` itself without a factor; 0 for dt <= 0.
double sustained_work(const SustainedLoad& load, double dt, double share, double h);

// Its inverse: how long an op of profiled work `work` (slowdown 1) takes from load `h` while the
// share of the devices computing stays `share` (Newton's method on the closed form, to 1e-12
// relative). `work` itself for work <= 0 or without a factor.
double sustained_time(const SustainedLoad& load, double work, double share, double h);

// The load `dt` µs after it was `h` while the share computing stays `share`:
// share + (h - share) * exp(-dt / time_constant_us). `h` itself for dt <= 0.
double sustained_load_after(const SustainedLoad& load, double dt, double share, double h);

// One GPU's load under the separate-GPU model (a sustained term without a curve: each device its
// own GPU with its own clock): H moves towards 1 while any of its compute ops runs and towards 0
// while none does. Ops are taken in order of start; each lasts sustained_time(load, its profiled
// time, 1, H at its start). The simulator and the compact schedule simulation both step it, so
// they do the same arithmetic.
class DeviceLoad {
 public:
  DeviceLoad() = default;
  explicit DeviceLoad(double h) : h_(h), h_end_(h) {}  // H at time 0, idle until the first op
  // Takes a compute op of profiled work `work` that starts at `start` (no earlier than any op
  // before it on this GPU) and returns how long it lasts.
  double run(const SustainedLoad& load, double start, double work);
  // H at `t`, no earlier than the last op's start.
  double at(const SustainedLoad& load, double t) const;

 private:
  double start_ = 0;       // the last op's start
  double h_ = 0;           // H then
  double busy_until_ = 0;  // the latest end so far: busy from start_ to it
  double h_end_ = 0;       // H at busy_until_
};

// One DeviceLoad per device, each at its entry of `loads` (0 past its end): a step's start.
std::vector<DeviceLoad> device_loads_from(const std::vector<double>& loads, int devices);
// Each device's H at `end` (the step's last end), written over `loads` (resized to the devices):
// what periodic_loads' pass gives back.
void write_loads_at(const std::vector<DeviceLoad>& devices, const SustainedLoad& load, double end,
                    std::vector<double>& loads);

// Steps repeat, so a step starts at the loads (one per GPU, or one for a shared GPU) its own end
// leaves. `pass` runs one step from the loads it is given, writes the loads it leaves in their
// place and returns the step's length. For fixed op times each end load is affine in its start
// load with slope exp(-length / time_constant_us) (H relaxes at rate 1 / tau all through the
// step), so from a pass begun idle (all 0) one secant step with that slope lands on the fixed
// point. Op times move with the loads (and, on separate GPUs, with the other devices' loads), so
// passes go on until start and end agree to kPeriodicLoadTolerance, each pass's secant step
// combined with those of the passes before it (Anderson mixing: the combination whose residual is
// least), at most kMaxPeriodicPasses. A step many time constants long forgets its start: its
// first pass's end is the load. Returns the last pass's end loads (`count` of them).
std::vector<double> periodic_loads(const SustainedLoad& load, std::size_t count,
                                   const std::function<double(std::vector<double>&)>& pass);
inline constexpr int kMaxPeriodicPasses = 16;
inline constexpr double kPeriodicLoadTolerance = 1e-9;

struct Contention {
  // slowdown[k - 1]: an op's time over its profiled time while k compute ops run on the GPU at
  // once, itself included; beyond the last entry the last applies. Empty: no processor sharing.
  std::vector<double> slowdown;
  // The same per op type ("F", "B", "P1", "P2") where it differs; the others use `slowdown`.
  std::map<std::string, std::vector<double>, std::less<>> by_op;
  // Transfers between the stages: unset, each takes the plan's link time whatever the stages do.
  std::optional<CopySlowdown> copy;
  // Unset: an op's slowdown depends only on the ops running with it. Set without a curve:
  // separate GPUs, each with its own clock.
  std::optional<SustainedLoad> sustained;
  std::string source;  // where the factors come from (fit, traces, date)

  // No curve: processor sharing is off (separate GPUs), though a sustained term may be set.
  bool empty() const { return slowdown.empty(); }
  // A model of any kind: a curve, or a sustained term alone (separate GPUs, each with its own
  // clock). What decides whether a contention object is written, copied or printed.
  bool has_model() const { return !slowdown.empty() || sustained.has_value(); }
  // The curve for an op type: its own, else `slowdown`.
  const std::vector<double>& curve(std::string_view op) const;
  // The factor for `running` ops at once (running >= 1) on `curve`; 1 on an empty curve.
  static double factor(const std::vector<double>& curve, std::size_t running);
  // The smallest factor the model can apply to a profiled time, at most 1: a fitted curve may put
  // an op alone below its profiled time (a clock higher than the profiler's), and a lower bound
  // on the step must allow for it. The sustained term only slows (1 + factor · load).
  double fastest_factor() const;
};

// {"slowdown": [...], "by_op": {"P1": [...], ...}, "copy": {"sender_idle": x, "sender_computing":
// y}, "sustained": {"factor": b, "time_constant_us": t}, "source": "..."} ("slowdown" only when
// non-empty; "by_op", "copy" and "sustained" only when set)
nlohmann::json contention_to_json(const Contention& contention);
// Throws Error naming `context` and the field: each curve must be 1 to kMaxContentionEntries
// finite numbers in (0, kMaxSlowdown], by_op's keys F, B, P1 or P2, and copy's two factors
// numbers in (0, kMaxSlowdown], sustained's factor in [0, kMaxSlowdown] and its time constant in
// (0, kMaxTimeConstantUs]. "slowdown" may be absent only beside "sustained" (separate GPUs),
// and then "by_op" and "copy" may not be there.
Contention contention_from_json(const nlohmann::json& json, std::string_view context);

inline constexpr std::size_t kMaxContentionEntries = 1024;  // one per device at most
inline constexpr double kMaxSlowdown = 100;
inline constexpr double kMaxTimeConstantUs = 1e9;  // 1000 s

}  // namespace pipeplan
