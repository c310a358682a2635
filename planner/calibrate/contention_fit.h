// Fitting a profile's contention model (profiles/contention.h) from measured runs: plans made
// from the profile, run with their stages emulated on one GPU, and the node times their traces
// recorded. The model is the simulator's (planner/graph/simulator.h): while k compute ops run, an
// op advances through its profiled time at rate 1 / slowdown[k - 1], further divided by
// 1 + factor * H under a sustained load, and a transfer through its link time at rate
// 1 / sender_computing or 1 / sender_idle. Processor sharing makes an op's profiled time
// d = sum_k T_k / slowdown_k (T_k: the time it ran while k compute ops ran, itself included),
// linear in 1 / slowdown_k, so the curves and the copy factors are linear fits (least absolute
// deviations); the sustained-load term is chosen on a grid. Format and method:
// docs/reference/profile-format.md ("contention").
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/graph/metrics.h"
#include "planner/graph/taskgraph.h"
#include "profiles/contention.h"
#include "profiles/overlap.h"

namespace pipeplan {

// One measured run: the plan that ran and the times its trace recorded, by node id.
struct MeasuredRun {
  std::string name;  // how reports name it
  TaskGraph plan;
  std::vector<NodeTime> times;
};

struct ContentionFitOptions {
  // Ops of one type needed for a curve of its own, and transfers needed for the copy factors.
  int min_ops = 20;
  // Keep `given`'s compute curves and sustained term; fit the copy factors alone.
  bool copy_only = false;
  // Also fit the sustained-load term: every factor from min_factor to max_factor by 0.05 (the
  // bounds included) with every time constant; the pair whose fitted curves give the least mean
  // op error is kept. Equal bounds and one time constant fix the term and fit the curves alone.
  bool sustained = false;
  double min_factor = 0;
  double max_factor = 2;
  // From tens of ms (emulated stages sharing one GPU's clock) to seconds (a whole GPU settling at
  // its power cap, as the profiler measures it).
  std::vector<double> time_constants_us = {10e3,  20e3,  30e3,  50e3, 70e3,  100e3, 150e3, 200e3,
                                           300e3, 500e3, 700e3, 1e6,  1.5e6, 2e6,   3e6,   5e6};
  // The overlap model the step after the fit is simulated with (fit_overlap's, where fitted);
  // unset: each plan's own.
  std::optional<OverlapModel> overlap;
};

// How one run is predicted, before (the plan as it was made) and after (the fitted model).
struct RunFitReport {
  std::string name;
  int ops = 0;                   // compute ops with a profiled time
  double op_error_before = 0;    // mean |relative error| of op times, the plan's own model
  double op_error_after = 0;     // the same under the fitted model
  int sends = 0;                 // transfers with a link time
  double copy_error_before = 0;  // median |relative error| of copies, the plan's copy factors
  double copy_error_after = 0;   // under the fitted (or kept) copy factors; NaN without them
  double measured_makespan_us = 0;
  double predicted_before_us = 0;  // the recorded plan simulated as it was made
  double predicted_after_us = 0;   // the recorded plan simulated under the fitted model
};

// The mean |relative error| of the runs' step times (measured against predicted): before the
// fit (`after` false) or under it. 0 without runs.
double mean_step_error(const std::vector<RunFitReport>& runs, bool after);

// A warning where the fit predicts the runs' steps worse than the profile did (by more than a
// point): the runs disagree with each other or with the ops' model, as runs on a busy machine
// do; empty otherwise.
std::string worse_steps_warning(const std::vector<RunFitReport>& runs);

struct ContentionFit {
  Contention contention;  // the fitted model ("source" left to the caller)
  bool copy_fitted = false;
  bool copy_kept = false;        // none fitted: the given copy factors kept
  std::string copy_note;         // why copies fitted no factors a profile can hold ("" otherwise)
  bool sustained_kept = false;   // the given sustained-load term kept (neither flag, one given)
  bool sustained_fixed = false;  // sustained with a grid of one factor and one time constant
  std::vector<RunFitReport> runs;
};

// Fits the model on `runs` (each plan's "duration_us" is its profiled time; each run's sustained
// load is the share of its own plan's devices computing). `given` is the profile's model: with
// copy_only its curves and sustained term are kept (it must have curves); with neither copy_only
// nor sustained, its sustained term (where it has one, beside curves: a term alone is separate
// GPUs', refused) is kept and the curves are fitted under it. Factors are written from 0.01 to
// kMaxSlowdown: a slowdown outside is an error, copy factors outside are left out (`copy_note`
// says why), with copy_only an error. Where no copy factors are fitted, `given`'s are kept.
// Each run's error before is under its own plan's model: a sustained term without curves (separate
// GPUs) times each device's ops under that device's own load, as the simulator does.
// `progress`, when set, gets a line per step of the sustained-load grid. Throws Error naming the
// run or the field that cannot be fitted (no compute op, too few distinct concurrency levels,
// copy_only with too few transfers or factors outside the range).
ContentionFit fit_contention(const std::vector<MeasuredRun>& runs, const Contention& given,
                             const ContentionFitOptions& options,
                             const std::function<void(const std::string&)>& progress = {});

// The plan's simulated step time (makespan) with `contention` in its meta in place of its own,
// and `overlap` in place of its overlap model where given.
double simulated_makespan(const TaskGraph& plan, const std::optional<Contention>& contention,
                          const std::optional<OverlapModel>& overlap = std::nullopt);

// The overlap efficiency of the runs' overlapped pairs (planner/graph/pair_overlap.h): the median
// over every pair whose two ops also ran alone in its run, and how many such pairs there were.
// Throws Error when no run has one.
struct OverlapFit {
  double efficiency = 0;
  int pairs = 0;
};
OverlapFit fit_overlap(const std::vector<MeasuredRun>& runs);
// The step time the measured node times show (first op anywhere to last op anywhere).
double measured_makespan(const TaskGraph& plan, const std::vector<NodeTime>& times);

// The pieces of the fit, for tests and for reports that need them alone.
namespace contention_fit {

// One compute op of a run: its op type, profiled time and the time it spent at each level of
// concurrency (levels[k - 1]: while k compute ops ran; under a sustained-load term, each piece
// divided by that term as the simulator applies it).
struct OpSample {
  OpType op = OpType::F;
  double profiled_us = 0;
  std::vector<double> levels;
};
// One transfer: its link time, and its measured time while its sender ran no compute op and
// while it ran one.
struct CopySample {
  double link_us = 0;
  double sender_idle_us = 0;
  double sender_computing_us = 0;
};

// Per compute op with a profiled time, in node order; `devices` levels (the last takes more),
// the sustained load H the share of the run's own plan's devices computing.
std::vector<OpSample> op_samples(const MeasuredRun& run, int devices,
                                 const std::optional<SustainedLoad>& sustained);
std::vector<CopySample> copy_samples(const MeasuredRun& run);
// Per segment between consecutive starts and ends of the compute ops (in time order): the
// sustained load H at its start, the step repeating (it starts at the load its end leaves).
// Empty where the ops take no time.
std::vector<double> periodic_load(const std::vector<double>& points,
                                  const std::vector<double>& shares, double time_constant_us);
// slowdown[0 .. devices - 1] by least absolute deviations in 1 / slowdown (each op's row
// relative, as op_error measures it: an op held up by something else, a few of them ten times
// their time, does not pull the curve as it would pull least squares). A level
// with under 1 % of the time, or whose rate the runs leave non-positive, takes `fallback`'s
// factor there, else the nearest fitted level's. nullopt when no time was measured or the fit is
// degenerate.
std::optional<std::vector<double>> fit_curve(const std::vector<const OpSample*>& samples,
                                             int devices, const std::vector<double>* fallback);
// (sender_idle, sender_computing): least absolute deviations of each send's link time against
// its measured parts, the row divided by its measured time and weighted by its link time (the
// long copies weigh most; a short send held up many times its link time pulls by no more than
// its link time, a long one by its own). nullopt with fewer than `min_copies` transfers, where
// either case has under 1 % of those weighted rows or time in fewer than 3 sends, or a
// degenerate fit.
std::optional<CopySlowdown> fit_copy(const std::vector<CopySample>& samples, int min_copies);
// Mean |relative error| of the op times `contention` predicts from the measured concurrency, over
// the ops the trace gives time (NaN when none does).
double op_error(const std::vector<OpSample>& samples, const Contention& contention);
// Mean |relative error| of the op times the separate-GPU model (`sustained` without curves)
// predicts: each device's ops taken in order of their measured starts by the simulator's
// DeviceLoad, an overlapped pair as one op of its overlapped time, from the loads the measured
// step leaves at its end (periodic_loads). Over the ops alone with a profiled and a measured time
// (NaN when none).
double separate_gpus_op_error(const MeasuredRun& run, const SustainedLoad& sustained);
// Median |relative error| of the copies' link times under `copy`.
double copy_error(const std::vector<CopySample>& samples, const CopySlowdown& copy);
// The sustained-load factors tried: min_factor..max_factor by 0.05, both bounds included.
std::vector<double> factor_grid(double min_factor, double max_factor);

}  // namespace contention_fit

}  // namespace pipeplan
