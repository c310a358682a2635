#include "profiles/load_measurement.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/limits.h"
#include "planner/base/stats.h"
#include "profiles/json_reader.h"

namespace pipeplan {

namespace {

constexpr double kMinTimeConstantUs = 100;
constexpr int kStepsPerDecade = 8;
constexpr double kCoarseFactorStep = 0.1;
constexpr std::size_t kMaxSearchOps = 4000;  // ops the search weighs (all are reported)

// The load run as pieces of constant share between consecutive op boundaries.
struct Timeline {
  std::vector<double> at;     // breakpoints, µs, ascending, unique
  std::vector<double> share;  // share computing over [at[j], at[j + 1])
  struct Op {
    std::size_t type = 0;
    std::size_t first = 0, last = 0;  // pieces first..last-1
    double measured_us = 0;
  };
  std::vector<Op> ops;
  std::vector<std::string> types;
  std::vector<int> per_type;  // ops of each type
};

Timeline make_timeline(std::span<const TimedOp> ops, int devices) {
  if (devices < 1) throw Error("sustained load: devices must be at least 1");
  if (ops.empty()) throw Error("sustained load: the load run timed no op");
  Timeline t;
  std::map<std::string, std::size_t, std::less<>> type_index;
  std::vector<int> per_type;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const TimedOp& op = ops[i];
    if (!std::isfinite(op.start_us) || !std::isfinite(op.end_us) || op.start_us < 0) {
      throw Error("sustained load: op " + std::to_string(i) + " has no finite start and end");
    }
    if (op.end_us <= op.start_us) {
      throw Error("sustained load: op " + std::to_string(i) + " (" + op.op +
                  ") does not end after it starts");
    }
    t.at.push_back(op.start_us);
    t.at.push_back(op.end_us);
    if (type_index.emplace(op.op, t.types.size()).second) {
      t.types.push_back(op.op);
      per_type.push_back(0);
    }
    ++per_type[type_index.find(op.op)->second];
  }
  t.per_type = std::move(per_type);
  std::sort(t.at.begin(), t.at.end());
  t.at.erase(std::unique(t.at.begin(), t.at.end()), t.at.end());
  const auto index = [&](double x) {
    return static_cast<std::size_t>(std::lower_bound(t.at.begin(), t.at.end(), x) - t.at.begin());
  };
  std::vector<int> delta(t.at.size(), 0);
  for (const TimedOp& op : ops) {
    const std::size_t first = index(op.start_us), last = index(op.end_us);
    ++delta[first];
    --delta[last];
    t.ops.push_back({type_index.find(op.op)->second, first, last, op.end_us - op.start_us});
  }
  int running = 0;
  t.share.resize(t.at.size() - 1);
  for (std::size_t j = 0; j + 1 < t.at.size(); ++j) {
    running += delta[j];
    t.share[j] = std::min(1.0, static_cast<double>(running) / devices);
  }
  return t;
}

// The load H at each breakpoint (0 at the run's start, the GPU idle before it).
std::vector<double> load_course(const Timeline& t, const SustainedLoad& model) {
  std::vector<double> h(t.at.size(), 0);
  double load = 0;
  for (std::size_t j = 0; j + 1 < t.at.size(); ++j) {
    load = sustained_load_after(model, t.at[j + 1] - t.at[j], t.share[j], load);
    h[j + 1] = load;
  }
  return h;
}

// Each op's cold work under `model`.
std::vector<double> cold_work(const Timeline& t, const SustainedLoad& model,
                              const std::vector<double>& h, std::span<const std::size_t> which) {
  std::vector<double> work;
  work.reserve(which.size());
  for (const std::size_t i : which) {
    const Timeline::Op& op = t.ops[i];
    if (model.factor <= 0) {
      work.push_back(op.measured_us);
      continue;
    }
    double w = 0;
    for (std::size_t j = op.first; j < op.last; ++j)
      w += sustained_work(model, t.at[j + 1] - t.at[j], t.share[j], h[j]);
    work.push_back(w);
  }
  return work;
}

// Spread of the values around their type's mean: mean squared log deviation (the search's
// objective) and root mean square relative deviation in % (the report).
struct Spread {
  double log_mse = 0;
  double rms_pct = 0;
};

Spread spread(const Timeline& t, std::span<const std::size_t> which,
              const std::vector<double>& values) {
  std::vector<double> log_sum(t.types.size(), 0), sum(t.types.size(), 0);
  std::vector<int> count(t.types.size(), 0);
  for (std::size_t n = 0; n < which.size(); ++n) {
    const std::size_t type = t.ops[which[n]].type;
    log_sum[type] += std::log(values[n]);
    sum[type] += values[n];
    ++count[type];
  }
  Spread s;
  for (std::size_t n = 0; n < which.size(); ++n) {
    const std::size_t type = t.ops[which[n]].type;
    const double dl = std::log(values[n]) - log_sum[type] / count[type];
    const double dr = values[n] / (sum[type] / count[type]) - 1;
    s.log_mse += dl * dl;
    s.rms_pct += dr * dr;
  }
  const auto n = static_cast<double>(which.size());
  s.log_mse /= n;
  s.rms_pct = 100 * std::sqrt(s.rms_pct / n);
  return s;
}

struct Candidate {
  SustainedLoad model;
  double objective = std::numeric_limits<double>::infinity();
};

// The best factor for one time constant: a coarse grid, then a golden-section search around
// its best point.
Candidate best_factor(const Timeline& t, double tau, std::span<const std::size_t> which) {
  SustainedLoad model{0, tau};
  const std::vector<double> h = load_course(t, model);
  const auto objective = [&](double factor) {
    model.factor = factor;
    return spread(t, which, cold_work(t, model, h, which)).log_mse;
  };
  Candidate best{{0, tau}, objective(0)};
  const int coarse_steps = static_cast<int>(std::lround(kMaxFitFactor / kCoarseFactorStep));
  for (int step = 1; step <= coarse_steps; ++step) {
    const double f = step * kCoarseFactorStep;
    const double value = objective(f);
    if (value < best.objective) best = {{f, tau}, value};
  }
  const double phi = (std::sqrt(5.0) - 1) / 2;
  double lo = std::max(0.0, best.model.factor - kCoarseFactorStep);
  double hi = std::min(kMaxFitFactor, best.model.factor + kCoarseFactorStep);
  double x1 = hi - phi * (hi - lo), x2 = lo + phi * (hi - lo);
  double f1 = objective(x1), f2 = objective(x2);
  for (int i = 0; i < 30; ++i) {
    if (f1 < f2) {
      hi = x2;
      x2 = x1;
      f2 = f1;
      x1 = hi - phi * (hi - lo);
      f1 = objective(x1);
    } else {
      lo = x1;
      x1 = x2;
      f1 = f2;
      x2 = lo + phi * (hi - lo);
      f2 = objective(x2);
    }
  }
  const double x = (lo + hi) / 2;
  if (const double value = objective(x); value < best.objective) best = {{x, tau}, value};
  return best;
}

// Every op of the run, by index.
std::vector<std::size_t> every_op(const Timeline& t) {
  std::vector<std::size_t> all(t.ops.size());
  for (std::size_t i = 0; i < all.size(); ++i)
    all[i] = i;
  return all;
}

double median_of(const std::vector<double>& values) {
  return values.empty() ? 0.0 : median(values);
}

}  // namespace

std::vector<double> cold_work_of(std::span<const TimedOp> ops, int devices,
                                 const SustainedLoad& model) {
  const Timeline t = make_timeline(ops, devices);
  return cold_work(t, model, load_course(t, model), every_op(t));
}

SustainedMeasurement fit_sustained_load(std::span<const TimedOp> ops, int devices) {
  const Timeline t = make_timeline(ops, devices);
  for (std::size_t k = 0; k < t.types.size(); ++k) {
    if (t.per_type[k] < kMinOpsPerType) {
      throw Error("sustained load: " + std::to_string(t.per_type[k]) + " " + t.types[k] +
                  " op(s) timed, at least " + std::to_string(kMinOpsPerType) +
                  " needed (a longer load run)");
    }
  }
  const std::vector<std::size_t> all = every_op(t);
  std::vector<std::size_t> sample;  // every k-th op: the search's cost stays bounded
  const std::size_t stride = (all.size() + kMaxSearchOps - 1) / kMaxSearchOps;
  for (std::size_t i = 0; i < all.size(); i += stride)
    sample.push_back(i);

  Candidate best;
  const double decades = std::log10(kMaxTimeConstantUs / kMinTimeConstantUs);
  const int steps = static_cast<int>(std::lround(decades * kStepsPerDecade));
  const auto tau_at = [&](double step) {
    return kMinTimeConstantUs * std::pow(10.0, step / kStepsPerDecade);
  };
  int best_step = 0;
  for (int s = 0; s <= steps; ++s) {
    const Candidate c = best_factor(t, tau_at(s), sample);
    if (c.objective < best.objective) {
      best = c;
      best_step = s;
    }
  }
  for (int r = -4; r <= 4; ++r) {  // ninths of a step around the best time constant
    const double step = best_step + r / 9.0;
    if (r == 0 || step < 0 || step > steps) continue;
    const Candidate c = best_factor(t, tau_at(step), sample);
    if (c.objective < best.objective) best = c;
  }

  SustainedMeasurement m;
  m.devices = devices;
  const double end_us = t.at.back();
  m.seconds = end_us / 1e6;
  const SustainedLoad none{0, best.model.time_constant_us};
  const std::vector<double> measured = cold_work(t, none, {}, all);
  m.error_constant_pct = spread(t, all, measured).rms_pct;
  const std::vector<double> h = load_course(t, best.model);
  std::vector<double> cold = cold_work(t, best.model, h, all);
  m.error_model_pct = spread(t, all, cold).rms_pct;
  if (m.error_constant_pct - m.error_model_pct < kMinFitGainPct || best.model.factor <= 0) {
    m.model = {0, best.model.time_constant_us};
    cold = measured;
    m.error_model_pct = m.error_constant_pct;
  } else {
    m.model = best.model;
  }
  std::vector<std::vector<double>> cold_by(t.types.size()), steady_by(t.types.size());
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    const Timeline::Op& op = t.ops[i];
    cold_by[op.type].push_back(cold[i]);
    if (t.at[op.first] >= 0.75 * end_us) steady_by[op.type].push_back(op.measured_us);
  }
  for (std::size_t k = 0; k < t.types.size(); ++k) {
    m.ops[t.types[k]] = {median_of(cold_by[k]), median_of(steady_by[k]),
                         static_cast<int>(cold_by[k].size())};
  }
  return m;
}

std::optional<ClockSummary> summarize_clock(std::span<const ClockSample> samples, double seconds) {
  const double run_us = seconds * 1e6;
  std::vector<double> start, steady, power;
  int capped = 0, inside = 0;
  for (const ClockSample& s : samples) {
    if (!(s.t_us >= 0 && s.t_us <= run_us)) continue;
    ++inside;
    if (s.t_us <= 0.05 * run_us) start.push_back(s.sm_mhz);
    if (s.t_us >= 0.75 * run_us) {
      steady.push_back(s.sm_mhz);
      power.push_back(s.power_w);
      if (s.power_capped) ++capped;
    }
  }
  if (steady.empty()) return std::nullopt;
  if (start.empty()) {  // fewer samples than the first 5 % needs: the first one
    for (const ClockSample& s : samples) {
      if (s.t_us >= 0 && s.t_us <= run_us) {
        start.push_back(s.sm_mhz);
        break;
      }
    }
  }
  return ClockSummary{median(start), median(steady),
                      static_cast<double>(capped) / static_cast<double>(steady.size()),
                      median(power), inside};
}

Contention contention_from_bursts(const std::map<std::string, std::vector<double>>& median_us,
                                  std::string source) {
  if (median_us.empty()) throw Error("contention: no op was timed");
  const std::size_t stages = median_us.begin()->second.size();
  if (stages < 1 || stages > kMaxContentionEntries) {
    throw Error("contention: " + std::to_string(stages) + " concurrency levels; 1 to " +
                std::to_string(kMaxContentionEntries) + " expected");
  }
  for (const auto& [op, times] : median_us) {
    if (op != "F" && op != "B" && op != "P1" && op != "P2") {
      throw Error("contention: op '" + op + "' is not F, B, P1 or P2");
    }
    if (times.size() != stages) {
      throw Error("contention: " + op + " was timed at " + std::to_string(times.size()) +
                  " concurrency levels, the others at " + std::to_string(stages));
    }
    for (const double x : times) {
      if (!std::isfinite(x) || x <= 0) {
        throw Error("contention: a median time of " + op + " is not a positive number");
      }
    }
  }
  // The summed times of `ops` at each level over their sum alone.
  const auto curve_of = [&](const std::vector<std::string>& ops) {
    std::vector<double> curve(stages, 0);
    double alone = 0;
    for (const std::string& op : ops) {
      const auto& times = median_us.find(op)->second;
      alone += times[0];
      for (std::size_t k = 0; k < stages; ++k)
        curve[k] += times[k];
    }
    for (double& x : curve) {
      x /= alone;
      if (x > kMaxSlowdown) {
        throw Error("contention: a slowdown above " + limits::general_number(kMaxSlowdown) +
                    " was measured");
      }
    }
    return curve;
  };
  Contention c;
  std::vector<std::string> all;
  for (const auto& [op, times] : median_us) {
    c.by_op[op] = curve_of({op});
    all.push_back(op);
  }
  if (median_us.contains("P1") && median_us.contains("P2") && !median_us.contains("B")) {
    c.by_op["B"] = curve_of({"P1", "P2"});
  }
  c.slowdown = curve_of(all);
  c.source = std::move(source);
  return c;
}

nlohmann::json sustained_measurement_to_json(const SustainedMeasurement& m) {
  nlohmann::json ops = nlohmann::json::object();
  for (const auto& [op, t] : m.ops)
    ops[op] = {{"burst_us", t.burst_us}, {"steady_us", t.steady_us}, {"count", t.count}};
  nlohmann::json j = {
      {"devices", m.devices},
      {"seconds", m.seconds},
      {"ops", ops},
      {"model", {{"factor", m.model.factor}, {"time_constant_us", m.model.time_constant_us}}},
      {"error_pct", {{"constant", m.error_constant_pct}, {"model", m.error_model_pct}}},
      {"source", m.source}};
  if (m.clock) {
    j["clock"] = {{"start_mhz", m.clock->start_mhz},
                  {"steady_mhz", m.clock->steady_mhz},
                  {"power_capped", m.clock->power_capped},
                  {"steady_power_w", m.clock->steady_power_w},
                  {"samples", m.clock->samples}};
  }
  return j;
}

namespace {

constexpr double kMaxClockMhz = 1e5;
constexpr double kMaxPowerW = 1e5;
constexpr double kMaxLoadSeconds = 1e6;
constexpr int kMaxCount = 1'000'000'000;

}  // namespace

SustainedMeasurement sustained_measurement_from_json(const nlohmann::json& json,
                                                     std::string_view context) {
  const JsonReader root(json, context, "sustained_load");
  root.only({"devices", "seconds", "ops", "model", "error_pct", "source", "clock"},
            "a sustained-load measurement");
  SustainedMeasurement m;
  m.devices = root.integer_in("devices", 1, static_cast<int>(kMaxContentionEntries));
  m.seconds = root.number_in("seconds", 0, kMaxLoadSeconds);
  const JsonReader ops = root.object("ops");
  for (const auto& [op, value] : ops.raw().items()) {
    if (op != "F" && op != "B" && op != "P1" && op != "P2") {
      ops.fail(op, "is not an op type (F, B, P1 or P2)");
    }
    const JsonReader t = ops.object(op);
    t.only({"burst_us", "steady_us", "count"}, "an op's sustained-load times");
    m.ops[op] = {t.number_in("burst_us", 0, limits::kMaxLayerTimeUs),
                 t.number_in("steady_us", 0, limits::kMaxLayerTimeUs),
                 t.integer_in("count", 0, kMaxCount)};
  }
  const JsonReader model = root.object("model");
  model.only({"factor", "time_constant_us"}, "a sustained-load model");
  m.model.factor = model.number_in("factor", 0, kMaxSlowdown);
  m.model.time_constant_us = model.number_in("time_constant_us", 0, kMaxTimeConstantUs);
  if (m.model.time_constant_us <= 0) model.fail("time_constant_us", "must be positive");
  const JsonReader error = root.object("error_pct");
  error.only({"constant", "model"}, "a sustained-load fit's errors");
  m.error_constant_pct = error.number_in("constant", 0, limits::kMaxLayerTimeUs);
  m.error_model_pct = error.number_in("model", 0, limits::kMaxLayerTimeUs);
  if (root.has("clock")) {
    const JsonReader clock = root.object("clock");
    clock.only({"start_mhz", "steady_mhz", "power_capped", "steady_power_w", "samples"},
               "a clock summary");
    m.clock = ClockSummary{clock.number_in("start_mhz", 0, kMaxClockMhz),
                           clock.number_in("steady_mhz", 0, kMaxClockMhz),
                           clock.number_in("power_capped", 0, 1),
                           clock.number_in("steady_power_w", 0, kMaxPowerW),
                           clock.integer_in("samples", 0, kMaxCount)};
  }
  const nlohmann::json& source = root.get("source");
  if (!source.is_string()) root.fail("source", "must be a string");
  m.source = source.get<std::string>();
  return m;
}

}  // namespace pipeplan
