#include "planner/calibrate/contention_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "planner/base/error.h"
#include "planner/base/limits.h"
#include "planner/base/stats.h"
#include "planner/graph/pair_overlap.h"
#include "planner/graph/simulator.h"

namespace pipeplan {

namespace contention_fit {

namespace {

constexpr double kMinLevelShare = 0.01;  // a level or copy case with less of the time is not fitted
constexpr int kMinSendsPerCase = 3;      // sends with time in a copy case, for its factor
constexpr double kDigits = 1e4;          // fitted factors are stored to 4 decimals
constexpr double kFactorStep = 0.05;     // the sustained-load grid
// The least slowdown or copy factor a fit writes: a run 100 times faster than the profile says is
// as far from it as one 100 times slower (kMaxSlowdown).
constexpr double kMinFactor = 1 / kMaxSlowdown;

double rounded(double x) {
  return std::round(x * kDigits) / kDigits;
}

std::vector<double> rounded(std::vector<double> curve) {
  for (double& x : curve)
    x = rounded(x);
  return curve;
}

// The compute work of a run: every compute op alone, and each overlapped pair as one op over the
// union of its two ops' times (the simulator runs a pair as one op under contention). A pair is
// no sample of an op's own time: `pair` marks it.
struct ComputeSpan {
  int node;  // the op, or a pair's first
  NodeTime time;
  bool pair;
  double work_us;  // profiled: the op's, or the pair's overlapped time as the simulator takes it
};

std::vector<ComputeSpan> compute_spans(const MeasuredRun& run) {
  const TaskGraph& plan = run.plan;
  // Per node: -1 alone, -2 a pair's second, else the index of the pair it is the first of.
  const std::vector<OverlapPair> pairs = overlap_pairs(plan);
  std::vector<int> role(static_cast<std::size_t>(plan.node_count()), -1);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    role[static_cast<std::size_t>(pairs[i].first)] = static_cast<int>(i);
    role[static_cast<std::size_t>(pairs[i].second)] = -2;
  }
  std::vector<ComputeSpan> spans;
  for (int id = 0; id < plan.node_count(); ++id) {
    const int r = role[static_cast<std::size_t>(id)];
    if (plan.node(id).kind != NodeKind::compute || r == -2) continue;
    if (r < 0) {
      spans.push_back(
          {id, run.times.at(static_cast<std::size_t>(id)), false, plan.node(id).duration_us});
    } else {
      const OverlapPair& pair = pairs[static_cast<std::size_t>(r)];
      spans.push_back({id, pair_time(pair, run.times), true,
                       overlapped_time_us(plan.node(pair.first).duration_us,
                                          plan.node(pair.second).duration_us, plan.meta.overlap)});
    }
  }
  return spans;
}

// The compute work of a run in time (compute_spans): each op's [start, end) as indices into
// `points` (every start and end, in order), how many ran between each point and the next, and
// the share of the run's own devices that computing makes (the simulator's H for its plan).
struct Concurrency {
  struct Op {
    int node;
    std::size_t first;
    std::size_t last;
    bool pair;
  };
  std::vector<Op> ops;
  std::vector<double> points;
  std::vector<int> running;  // per segment [points[i], points[i + 1])
  std::vector<double> shares;
};

Concurrency concurrency(const MeasuredRun& run) {
  const int devices = std::max(1, run.plan.meta.devices);
  Concurrency c;
  const std::vector<ComputeSpan> spans = compute_spans(run);
  for (const ComputeSpan& span : spans) {
    c.points.push_back(span.time.start_us);
    c.points.push_back(span.time.end_us);
  }
  std::sort(c.points.begin(), c.points.end());
  c.points.erase(std::unique(c.points.begin(), c.points.end()), c.points.end());
  std::vector<int> delta(c.points.size(), 0);
  const auto index = [&](double t) {
    return static_cast<std::size_t>(std::lower_bound(c.points.begin(), c.points.end(), t) -
                                    c.points.begin());
  };
  for (const ComputeSpan& span : spans) {
    const Concurrency::Op op{span.node, index(span.time.start_us), index(span.time.end_us),
                             span.pair};
    ++delta[op.first];
    --delta[op.last];
    c.ops.push_back(op);
  }
  int k = 0;
  for (std::size_t i = 0; i + 1 < c.points.size(); ++i) {
    k += delta[i];
    c.running.push_back(k);
    c.shares.push_back(std::min(1.0, static_cast<double>(k) / devices));
  }
  return c;
}

std::size_t level_of(int running, int devices) {
  return static_cast<std::size_t>(std::clamp(running, 1, devices) - 1);
}

}  // namespace

std::vector<double> periodic_load(const std::vector<double>& points,
                                  const std::vector<double>& shares, double time_constant_us) {
  if (points.size() < 2 || points.back() <= points.front()) return {};
  std::vector<double> starts(shares.size());
  const auto run_from = [&](double h) {
    for (std::size_t i = 0; i < shares.size(); ++i) {
      starts[i] = h;
      h = shares[i] + (h - shares[i]) * std::exp(-(points[i + 1] - points[i]) / time_constant_us);
    }
    return h;
  };
  // The end is affine in the start with slope exp(-span / tau): from an idle GPU, the load a
  // step ends at is the fixed point's part that does not depend on the start.
  const double end = run_from(0.0);
  run_from(end / (1 - std::exp(-(points.back() - points.front()) / time_constant_us)));
  return starts;
}

std::vector<OpSample> op_samples(const MeasuredRun& run, int devices,
                                 const std::optional<SustainedLoad>& sustained) {
  const Concurrency c = concurrency(run);
  const std::vector<double> load =
      sustained ? periodic_load(c.points, c.shares, sustained->time_constant_us)
                : std::vector<double>{};
  std::vector<OpSample> samples;
  for (const Concurrency::Op& op : c.ops) {
    const Node& node = run.plan.node(op.node);
    if (node.duration_us <= 0 || op.pair) continue;
    OpSample sample{node.op, node.duration_us,
                    std::vector<double>(static_cast<std::size_t>(devices))};
    for (std::size_t i = op.first; i < op.last; ++i) {
      const double dt = c.points[i + 1] - c.points[i];
      sample.levels[level_of(c.running[i], devices)] +=
          sustained && !load.empty() ? sustained_work(*sustained, dt, c.shares[i], load[i]) : dt;
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

std::vector<CopySample> copy_samples(const MeasuredRun& run) {
  const TaskGraph& plan = run.plan;
  // Per device, its compute work by end (one compute stream, a pair as one: they do not overlap).
  std::map<int, std::vector<NodeTime>> busy;
  for (const ComputeSpan& span : compute_spans(run))
    busy[plan.node(span.node).device].push_back(span.time);
  for (auto& [device, times] : busy) {
    std::sort(times.begin(), times.end(),
              [](const NodeTime& a, const NodeTime& b) { return a.end_us < b.end_us; });
  }
  std::vector<CopySample> samples;
  for (int id = 0; id < plan.node_count(); ++id) {
    const Node& node = plan.node(id);
    if (node.kind != NodeKind::send || node.duration_us <= 0) continue;
    const NodeTime& t = run.times.at(static_cast<std::size_t>(id));
    double overlap = 0;
    if (const auto it = busy.find(node.device); it != busy.end()) {
      const std::vector<NodeTime>& ops = it->second;
      auto op = std::upper_bound(ops.begin(), ops.end(), t.start_us,
                                 [](double start, const NodeTime& o) { return start < o.end_us; });
      for (; op != ops.end() && op->start_us < t.end_us; ++op)
        overlap +=
            std::max(0.0, std::min(t.end_us, op->end_us) - std::max(t.start_us, op->start_us));
    }
    const double span = t.end_us - t.start_us;
    overlap = std::min(overlap, span);
    samples.push_back({node.duration_us, span - overlap, overlap});
  }
  return samples;
}

std::optional<std::vector<double>> fit_curve(const std::vector<const OpSample*>& samples,
                                             int devices, const std::vector<double>* fallback) {
  const auto n = static_cast<std::size_t>(devices);
  std::vector<double> total(n, 0.0);
  for (const OpSample* s : samples) {
    for (std::size_t k = 0; k < n; ++k)
      total[k] += s->levels[k];
  }
  double grand = 0;
  for (const double t : total)
    grand += t;
  std::vector<std::size_t> used;
  for (std::size_t k = 0; k < n; ++k) {
    if (total[k] >= kMinLevelShare * grand) used.push_back(k);
  }
  if (used.empty() || samples.empty()) return std::nullopt;
  // Each row scaled by 1 / d: relative error, target d / d = 1. A level whose rate comes out
  // non-positive (its few ops' times contradict the others', as noisy runs can) is not
  // identifiable from these runs: the one with the least time among them is left to the
  // fallback or its nearest level, and the rest fitted again.
  std::optional<std::vector<double>> rates;
  while (!used.empty()) {
    std::vector<std::pair<std::vector<double>, double>> rows;
    rows.reserve(samples.size());
    for (const OpSample* s : samples) {
      std::vector<double> row;
      row.reserve(used.size());
      for (const std::size_t k : used)
        row.push_back(s->levels[k] / s->profiled_us);
      rows.emplace_back(std::move(row), 1.0);
    }
    rates = least_absolute(rows);
    if (!rates) return std::nullopt;
    std::optional<std::size_t> drop;
    for (std::size_t i = 0; i < used.size(); ++i) {
      if (!((*rates)[i] > 0) && (!drop || total[used[i]] < total[used[*drop]])) drop = i;
    }
    if (!drop) break;
    used.erase(used.begin() + static_cast<std::ptrdiff_t>(*drop));
  }
  if (used.empty()) return std::nullopt;
  std::vector<double> fitted(n, 0.0);
  std::vector<char> is_fitted(n, 0);
  for (std::size_t i = 0; i < used.size(); ++i) {
    fitted[used[i]] = 1.0 / (*rates)[i];
    is_fitted[used[i]] = 1;
  }
  std::vector<double> curve(n);
  for (std::size_t k = 0; k < n; ++k) {
    if (is_fitted[k]) {
      curve[k] = fitted[k];
    } else if (fallback != nullptr) {
      curve[k] = Contention::factor(*fallback, k + 1);
    } else {
      // The nearest fitted level, the lower one on a tie.
      std::size_t nearest = used.front();
      for (const std::size_t u : used) {
        const auto distance = [&](std::size_t level) { return level > k ? level - k : k - level; };
        if (distance(u) < distance(nearest)) nearest = u;
      }
      curve[k] = fitted[nearest];
    }
  }
  return curve;
}

std::optional<CopySlowdown> fit_copy(const std::vector<CopySample>& samples, int min_copies) {
  if (samples.empty() || static_cast<int>(samples.size()) < min_copies) return std::nullopt;
  // d = T_idle * r_idle + T_busy * r_busy, each row divided by the send's measured time T (its
  // terms become the shares of T, at most 1) and weighted by its link time d: least absolute
  // deviations of d * (d / T). The long copies, BPipe's stash moves, weigh most (their length
  // decides what memory is held); a short send held up by something else (its thread
  // descheduled, a queue ahead of it: T many times d) is a row with a target near 0 and terms of
  // at most d, which pulls no more than its link time, where in microseconds its large T made it
  // the row the fit followed. A long send held up pulls by its own length.
  std::vector<std::pair<std::vector<double>, double>> rows;
  rows.reserve(samples.size());
  double idle = 0;
  double computing = 0;
  int with_idle = 0;
  int with_computing = 0;
  for (const CopySample& s : samples) {
    const double measured = s.sender_idle_us + s.sender_computing_us;
    if (!(measured > 0)) continue;
    const double weight = s.link_us / measured;
    rows.push_back(
        {{s.sender_idle_us * weight, s.sender_computing_us * weight}, s.link_us * weight});
    idle += rows.back().first[0];
    computing += rows.back().first[1];
    with_idle += s.sender_idle_us > 0 ? 1 : 0;
    with_computing += s.sender_computing_us > 0 ? 1 : 0;
  }
  // Each case with a share of the rows the fit weighs, and in a few sends: one send alone would
  // set its factor.
  if (std::min(idle, computing) < kMinLevelShare * (idle + computing) ||
      std::min(with_idle, with_computing) < kMinSendsPerCase)
    return std::nullopt;
  const std::optional<std::vector<double>> rates = least_absolute(rows);
  if (!rates || !((*rates)[0] > 0) || !((*rates)[1] > 0)) return std::nullopt;
  return CopySlowdown{1.0 / (*rates)[0], 1.0 / (*rates)[1]};
}

double op_error(const std::vector<OpSample>& samples, const Contention& contention) {
  if (samples.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  int timed = 0;
  for (const OpSample& s : samples) {
    const std::vector<double>& curve = contention.curve(to_string(s.op));
    // The profiled time the op gets done in its measured time and concurrency; its predicted
    // time at that concurrency is measured * d / done. An op the trace gives no time has no
    // error to count.
    double done = 0;
    for (std::size_t k = 0; k < s.levels.size(); ++k)
      done += s.levels[k] / Contention::factor(curve, k + 1);
    if (!(done > 0)) continue;
    sum += std::abs(s.profiled_us / done - 1);
    ++timed;
  }
  return timed == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / timed;
}

double separate_gpus_op_error(const MeasuredRun& run, const SustainedLoad& sustained) {
  const TaskGraph& plan = run.plan;
  std::vector<ComputeSpan> spans = compute_spans(run);
  // DeviceLoad takes a device's ops in order of start.
  std::stable_sort(spans.begin(), spans.end(), [](const ComputeSpan& a, const ComputeSpan& b) {
    return a.time.start_us < b.time.start_us;
  });
  // The step from its first node's start to its last node's end: the simulator's starts at 0 and
  // repeats from the loads its end leaves.
  double origin = std::numeric_limits<double>::infinity();
  double end = -origin;
  for (const NodeTime& t : run.times) {
    origin = std::min(origin, t.start_us);
    end = std::max(end, t.end_us);
  }
  if (spans.empty() || !(end > origin)) return std::numeric_limits<double>::quiet_NaN();
  const int devices = plan.meta.devices;
  std::vector<double> predicted(spans.size());
  const auto pass = [&](std::vector<double>& loads) {
    std::vector<DeviceLoad> device_loads = device_loads_from(loads, devices);
    for (std::size_t i = 0; i < spans.size(); ++i) {
      const ComputeSpan& span = spans[i];
      const auto device = static_cast<std::size_t>(plan.node(span.node).device);
      predicted[i] =
          device_loads.at(device).run(sustained, span.time.start_us - origin, span.work_us);
    }
    write_loads_at(device_loads, sustained, end - origin, loads);
    return end - origin;
  };
  std::vector<double> loads =
      periodic_loads(sustained, static_cast<std::size_t>(std::max(devices, 0)), pass);
  pass(loads);
  double sum = 0;
  int timed = 0;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const ComputeSpan& span = spans[i];
    const double measured = span.time.end_us - span.time.start_us;
    if (span.pair || !(span.work_us > 0) || !(measured > 0)) continue;
    sum += std::abs(predicted[i] / measured - 1);
    ++timed;
  }
  return timed == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / timed;
}

double copy_error(const std::vector<CopySample>& samples, const CopySlowdown& copy) {
  if (samples.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::vector<double> errors;
  errors.reserve(samples.size());
  for (const CopySample& s : samples) {
    errors.push_back(std::abs(
        (s.sender_idle_us / copy.sender_idle + s.sender_computing_us / copy.sender_computing) /
            s.link_us -
        1));
  }
  std::sort(errors.begin(), errors.end());
  return errors[errors.size() / 2];
}

std::vector<double> factor_grid(double min_factor, double max_factor) {
  std::set<double> grid{min_factor, max_factor};
  const auto steps = static_cast<int>(std::round(max_factor / kFactorStep));
  for (int i = 0; i <= steps; ++i) {
    const double f = std::round(kFactorStep * i * 100) / 100;
    if (f >= min_factor && f <= max_factor) grid.insert(f);
  }
  return {grid.begin(), grid.end()};
}

}  // namespace contention_fit

namespace {

using contention_fit::OpSample;

constexpr std::array<OpType, 4> kOpTypes = {OpType::F, OpType::B, OpType::P1, OpType::P2};

// The curves from every run's ops: one over all, and one per op type with min_ops ops or more.
std::optional<Contention> fit_curves(const std::vector<std::vector<OpSample>>& samples_by_run,
                                     int devices, int min_ops) {
  std::vector<const OpSample*> all;
  for (const auto& run : samples_by_run) {
    for (const OpSample& s : run)
      all.push_back(&s);
  }
  const std::optional<std::vector<double>> slowdown =
      contention_fit::fit_curve(all, devices, nullptr);
  if (!slowdown) return std::nullopt;
  Contention model;
  model.slowdown = *slowdown;
  // Per op type where it has enough ops of its own (backward GEMMs suffer more than forward).
  for (const OpType op : kOpTypes) {
    std::vector<const OpSample*> own;
    for (const OpSample* s : all) {
      if (s->op == op) own.push_back(s);
    }
    if (static_cast<int>(own.size()) < min_ops) continue;
    if (auto curve = contention_fit::fit_curve(own, devices, &model.slowdown))
      model.by_op.emplace(std::string(to_string(op)), std::move(*curve));
  }
  return model;
}

double mean_op_error(const std::vector<std::vector<OpSample>>& samples_by_run,
                     const Contention& model) {
  double sum = 0;
  for (const auto& run : samples_by_run)
    sum += contention_fit::op_error(run, model);
  return sum / static_cast<double>(samples_by_run.size());
}

[[noreturn]] void cannot_fit() {
  throw Error(
      "contention.slowdown: cannot be fitted from these runs (too few distinct concurrency "
      "levels, or no op time measured)");
}

// Each run's op samples, their cold work taken under `load` (none: the plain times).
std::vector<std::vector<OpSample>> samples_of_runs(const std::vector<MeasuredRun>& runs,
                                                   int devices,
                                                   const std::optional<SustainedLoad>& load) {
  std::vector<std::vector<OpSample>> samples_by_run;
  samples_by_run.reserve(runs.size());
  for (const MeasuredRun& run : runs)
    samples_by_run.push_back(contention_fit::op_samples(run, devices, load));
  return samples_by_run;
}

// The sustained-load term and the curves under it with the least mean op error over the runs.
Contention fit_sustained(const std::vector<MeasuredRun>& runs, int devices,
                         const ContentionFitOptions& options,
                         const std::function<void(const std::string&)>& progress) {
  const std::vector<double> factors =
      contention_fit::factor_grid(options.min_factor, options.max_factor);
  std::optional<Contention> best;
  double best_error = 0;
  std::size_t step = 0;
  for (const double tau : options.time_constants_us) {
    if (progress) {
      char line[120];
      std::snprintf(line, sizeof line, "sustained load: time constant %g ms (%zu of %zu)",
                    tau / 1e3, ++step, options.time_constants_us.size());
      progress(line);
    }
    for (const double factor : factors) {
      const SustainedLoad load{factor, tau};
      const std::vector<std::vector<OpSample>> samples_by_run =
          samples_of_runs(runs, devices, load);
      std::optional<Contention> model = fit_curves(samples_by_run, devices, options.min_ops);
      if (!model) continue;
      const double error = mean_op_error(samples_by_run, *model);
      if (!best || error < best_error - 1e-12) {
        model->sustained = load;
        best = std::move(model);
        best_error = error;
      }
    }
  }
  if (!best) cannot_fit();
  return *best;
}

}  // namespace

double simulated_makespan(const TaskGraph& plan, const std::optional<Contention>& contention,
                          const std::optional<OverlapModel>& overlap) {
  if (!contention && !overlap) return simulate(plan).makespan_us;
  TaskGraph copy = plan;
  if (contention) copy.meta.contention = *contention;
  if (overlap) copy.meta.overlap = *overlap;
  return simulate(copy).makespan_us;
}

OverlapFit fit_overlap(const std::vector<MeasuredRun>& runs) {
  std::vector<double> efficiencies;
  for (const MeasuredRun& run : runs) {
    const std::vector<double> pairs = pair_efficiencies(run.plan, run.times);
    efficiencies.insert(efficiencies.end(), pairs.begin(), pairs.end());
  }
  if (efficiencies.empty()) {
    throw Error(
        "overlap: no run has an overlapped pair whose two ops also ran alone (plan a "
        "dualpipe-v or dualpipe run)");
  }
  const int pairs = static_cast<int>(efficiencies.size());
  return {median(std::move(efficiencies)), pairs};
}

double measured_makespan(const TaskGraph& plan, const std::vector<NodeTime>& times) {
  return step_metrics(plan, times).makespan_us;
}

ContentionFit fit_contention(const std::vector<MeasuredRun>& runs, const Contention& given,
                             const ContentionFitOptions& options,
                             const std::function<void(const std::string&)>& progress) {
  if (runs.empty()) throw Error("runs: none given");
  int devices = 0;
  for (const MeasuredRun& run : runs) {
    if (run.times.size() != static_cast<std::size_t>(run.plan.node_count()))
      throw Error(run.name + ": the trace's node times do not match its plan");
    bool computes = false;
    for (const Node& node : run.plan.nodes())
      computes = computes || (node.kind == NodeKind::compute && node.duration_us > 0);
    if (!computes) throw Error(run.name + ": no compute op with a profiled time");
    devices = std::max(devices, run.plan.meta.devices);
  }
  const std::vector<std::vector<OpSample>> plain = samples_of_runs(runs, devices, std::nullopt);
  std::vector<std::vector<contention_fit::CopySample>> copies;
  std::vector<contention_fit::CopySample> all_copies;
  for (const MeasuredRun& run : runs) {
    copies.push_back(contention_fit::copy_samples(run));
    all_copies.insert(all_copies.end(), copies.back().begin(), copies.back().end());
  }
  const std::optional<CopySlowdown> copy = contention_fit::fit_copy(all_copies, options.min_ops);

  // A fit writes factors in [kMinFactor, kMaxSlowdown], as stored (rounded: a tiny one would be
  // stored as 0, which no profile holds); one outside is written nowhere.
  const auto outside = [](double factor) {
    return !(factor >= contention_fit::kMinFactor) || !(factor <= kMaxSlowdown);
  };
  std::string copy_note;
  if (copy && (outside(contention_fit::rounded(copy->sender_idle)) ||
               outside(contention_fit::rounded(copy->sender_computing)))) {
    // The link's modelled time is far from the measured sends: factors a profile cannot hold.
    copy_note = "copy factors " + limits::general_number(copy->sender_idle) +
                " (sender idle) and " + limits::general_number(copy->sender_computing) +
                " (sender computing): outside " +
                limits::general_number(contention_fit::kMinFactor) + " to " +
                limits::general_number(kMaxSlowdown) +
                ": the profile's link is far from the measured sends (its p2p)";
  }

  ContentionFit fit;
  if (options.copy_only) {
    if (given.empty()) throw Error("contention.slowdown: no compute curves to keep");
    if (!copy) {
      throw Error(
          "contention.copy: too few transfers, or too few beside (or away from) its sender's "
          "compute, to fit the copy factors");
    }
    if (!copy_note.empty()) throw Error("contention.copy: " + copy_note);
    fit.contention = given;
  } else if (options.sustained) {
    fit.contention = fit_sustained(runs, devices, options, progress);
    const std::set<double> taus(options.time_constants_us.begin(), options.time_constants_us.end());
    fit.sustained_fixed =
        contention_fit::factor_grid(options.min_factor, options.max_factor).size() == 1 &&
        taus.size() == 1;
  } else {
    if (given.empty() && given.sustained) {
      // Separate GPUs, each with its own load: the curves would put them on one GPU under its
      // shared load, a model the profile does not describe.
      throw Error(
          "contention.sustained: the profile's sustained load is of separate GPUs (it has no "
          "slowdown curves), not of stages sharing one; give --sustained to fit a shared GPU's "
          "term with the curves");
    }
    // A sustained-load term the profile measured (profiles/load_measurement.h) is kept, and the
    // curves fitted under it, as the simulator will apply both.
    std::optional<Contention> model =
        fit_curves(given.sustained ? samples_of_runs(runs, devices, given.sustained) : plain,
                   devices, options.min_ops);
    if (!model) cannot_fit();
    fit.contention = std::move(*model);
    fit.contention.sustained = given.sustained;
    fit.sustained_kept = given.sustained.has_value();
  }
  if (!options.copy_only) {
    fit.contention.slowdown = contention_fit::rounded(fit.contention.slowdown);
    for (auto& [op, curve] : fit.contention.by_op)
      curve = contention_fit::rounded(curve);
    const auto check = [&](const std::vector<double>& curve, const std::string& field) {
      for (std::size_t k = 0; k < curve.size(); ++k) {
        if (outside(curve[k])) {
          throw Error(field + ": the fit gives " + limits::general_number(curve[k]) + " with " +
                      std::to_string(k + 1) + " ops at once, outside " +
                      limits::general_number(contention_fit::kMinFactor) + " to " +
                      limits::general_number(kMaxSlowdown) +
                      ": the profile's times are far from the runs' (profile the hardware that "
                      "ran them)");
        }
      }
    };
    check(fit.contention.slowdown, "contention.slowdown");
    for (const auto& [op, curve] : fit.contention.by_op)
      check(curve, "contention.by_op." + op);
  }
  if (!copy_note.empty()) {
    fit.copy_note = copy_note;
  } else if (copy) {
    fit.contention.copy = CopySlowdown{contention_fit::rounded(copy->sender_idle),
                                       contention_fit::rounded(copy->sender_computing)};
    fit.copy_fitted = true;
  }
  // Copies the runs cannot fit say nothing against the factors the profile has: those stay.
  if (!fit.copy_fitted && given.copy) {
    fit.contention.copy = given.copy;
    fit.copy_kept = true;
  }

  // The curves alone: the op samples under the sustained term carry it already.
  Contention curves = fit.contention;
  curves.sustained.reset();
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const MeasuredRun& run = runs[r];
    RunFitReport report;
    report.name = run.name;
    report.ops = static_cast<int>(plain[r].size());
    // Before: the model the run was planned with (its curves under its sustained term).
    const Contention& planned = run.plan.meta.contention;
    Contention planned_curves = planned;
    planned_curves.sustained.reset();
    if (planned.sustained && planned.empty()) {
      // Separate GPUs: each device under its own load, as the simulator times them.
      report.op_error_before = contention_fit::separate_gpus_op_error(run, *planned.sustained);
    } else {
      report.op_error_before = contention_fit::op_error(
          planned.sustained ? contention_fit::op_samples(run, devices, planned.sustained)
                            : plain[r],
          planned_curves);
    }
    report.op_error_after = contention_fit::op_error(
        fit.contention.sustained
            ? contention_fit::op_samples(run, devices, fit.contention.sustained)
            : plain[r],
        curves);
    report.sends = static_cast<int>(copies[r].size());
    report.copy_error_before =
        contention_fit::copy_error(copies[r], planned.copy.value_or(CopySlowdown{}));
    report.copy_error_after = fit.contention.copy
                                  ? contention_fit::copy_error(copies[r], *fit.contention.copy)
                                  : std::numeric_limits<double>::quiet_NaN();
    report.measured_makespan_us = measured_makespan(run.plan, run.times);
    report.predicted_before_us = simulated_makespan(run.plan, std::nullopt);
    report.predicted_after_us = simulated_makespan(run.plan, fit.contention, options.overlap);
    fit.runs.push_back(std::move(report));
  }
  return fit;
}

double mean_step_error(const std::vector<RunFitReport>& runs, bool after) {
  double sum = 0;
  int counted = 0;
  for (const RunFitReport& r : runs) {
    const double predicted = after ? r.predicted_after_us : r.predicted_before_us;
    if (!(predicted > 0) || !(r.measured_makespan_us > 0)) continue;
    sum += std::abs(r.measured_makespan_us / predicted - 1);
    ++counted;
  }
  return counted > 0 ? sum / counted : 0;
}

std::string worse_steps_warning(const std::vector<RunFitReport>& runs) {
  constexpr double kPoint = 0.01;
  const double before = mean_step_error(runs, false);
  const double after = mean_step_error(runs, true);
  if (!(after > before + kPoint)) return "";
  char line[320];
  std::snprintf(line, sizeof line,
                "the fit predicts these runs' step times worse than the profile did (mean "
                "|error| %.1f %% before, %.1f %% after): the runs disagree with each other or "
                "with the ops' times (runs on a busy machine do); fit on more runs, or keep the "
                "profile",
                100 * before, 100 * after);
  return line;
}

}  // namespace pipeplan
