// What the profiler measures about a GPU under load, and the models the simulator takes from it
// (profiles/contention.h), derived here so that the rules are tested on any machine:
//
// - **Sustained load.** A block's forward, p1 and p2 run back to back for a while at full load
//   (the whole GPU, or every emulated stage's green context at once), each op timed; a GPU held
//   at its power limit lowers its clock and every op slows. fit_sustained_load finds the
//   SustainedLoad (factor, time constant) under which each op type's *cold* work (the profiled
//   work the model says the op did, the integral of dt / (1 + factor * H)) is the same at every
//   point of the run, H following the share of the devices computing with the time constant's
//   lag, as the simulator has it. The op times at the start and in the steady state and, where
//   the driver's management library answered, the SM clock and the power-cap share are kept with
//   it (`profile.sustained_load`).
// - **Contention.** The same op run at once in k green contexts, k = 1..P, short bursts from a
//   cool GPU: contention_from_bursts turns the medians into the slowdown curves.
//
// Format: docs/reference/profile-format.md ("sustained_load", "contention").
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "profiles/contention.h"

namespace pipeplan {

// One op of a load run: its type ("F", "P1", "P2"), start and end in µs from the run's start
// (the GPU idle before it, so the load H starts at 0).
struct TimedOp {
  std::string op;
  double start_us = 0;
  double end_us = 0;
};

// One sample of the GPU's state during a load run (t_us on the ops' clock).
struct ClockSample {
  double t_us = 0;
  double sm_mhz = 0;
  bool power_capped = false;  // the driver reported a software power cap
  double power_w = 0;
};

struct LoadOpTimes {
  double burst_us = 0;   // cold work: the op's time at H = 0 under the fitted model
  double steady_us = 0;  // median measured time over the run's last quarter
  int count = 0;         // ops of this type in the run
  bool operator==(const LoadOpTimes&) const = default;
};

struct ClockSummary {
  double start_mhz = 0;       // median SM clock over the run's first 5 %
  double steady_mhz = 0;      // median over the last quarter
  double power_capped = 0;    // share of the last quarter's samples under a power cap
  double steady_power_w = 0;  // median board power over the last quarter
  int samples = 0;
  bool operator==(const ClockSummary&) const = default;
};

struct SustainedMeasurement {
  int devices = 1;     // green contexts loaded at once (1: the whole GPU)
  double seconds = 0;  // length of the load run
  std::map<std::string, LoadOpTimes, std::less<>> ops;
  SustainedLoad model;  // factor 0: no slowdown under load was found
  // Root mean square of each op's deviation from its type's mean, in % of it: of the measured
  // times (a constant-time model) and of the cold work under the fitted model.
  double error_constant_pct = 0;
  double error_model_pct = 0;
  std::optional<ClockSummary> clock;  // absent where the clock could not be read
  std::string source;
  bool operator==(const SustainedMeasurement&) const = default;
};

// Fits the sustained-load model to a load run of `devices` devices (the share computing at a
// moment is the ops running then over `devices`, at most 1). Factors from 0 to kMaxFitFactor,
// time constants from 100 µs to kMaxTimeConstantUs; factor 0 when a slowdown does not explain
// the run better than constant times by more than kMinFitGainPct. Throws Error when an op type
// has fewer than kMinOpsPerType ops, a time is not finite, or an op ends before it starts.
SustainedMeasurement fit_sustained_load(std::span<const TimedOp> ops, int devices);

// Each op's cold work under `model`, in the order given: the profiled work the model says it
// did (its time where the factor is 0). Throws Error as fit_sustained_load for bad times.
std::vector<double> cold_work_of(std::span<const TimedOp> ops, int devices,
                                 const SustainedLoad& model);

// The clock over a load run of `seconds` (samples outside it are ignored); nullopt without
// samples inside it.
std::optional<ClockSummary> summarize_clock(std::span<const ClockSample> samples, double seconds);

inline constexpr int kMinOpsPerType = 8;
inline constexpr double kMaxFitFactor = 3;
inline constexpr double kMinFitGainPct = 0.05;

// Contention curves from bursts: median_us[op][k - 1] is op's median time while k green
// contexts ran it at once (k = 1 alone). Each op's curve is its time over its time alone; "B"
// (the fused backward: p1 then p2) is the time-weighted combination of "P1" and "P2" where both
// were measured; `slowdown`, used by the other ops, that of every measured op. Throws Error
// unless every op has the same k = 1..P entries, P >= 1, all finite and positive.
Contention contention_from_bursts(const std::map<std::string, std::vector<double>>& median_us,
                                  std::string source);

nlohmann::json sustained_measurement_to_json(const SustainedMeasurement& m);
// Throws Error naming `context` and the field (under "sustained_load").
SustainedMeasurement sustained_measurement_from_json(const nlohmann::json& json,
                                                     std::string_view context);

}  // namespace pipeplan
