#include "profiles/contention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <utility>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/stats.h"

namespace pipeplan {

const std::vector<double>& Contention::curve(std::string_view op) const {
  const auto it = by_op.find(op);
  return it != by_op.end() ? it->second : slowdown;
}

double sustained_work(const SustainedLoad& load, double dt, double share, double h) {
  if (dt <= 0) return 0;
  if (load.factor <= 0) return dt;
  const double a = 1 + load.factor * share;
  const double b = load.factor * (h - share);
  const double tau = load.time_constant_us;
  return (dt + tau * std::log((a + b * std::exp(-dt / tau)) / (a + b))) / a;
}

double sustained_time(const SustainedLoad& load, double work, double share, double h) {
  if (work <= 0 || load.factor <= 0) return work;
  const double a = 1 + load.factor * share;
  const double b = load.factor * (h - share);
  const double tau = load.time_constant_us;
  // The rate 1 / (a + b exp(-t / tau)) lies between 1 / (a + max(b, 0)) and 1 / (a + min(b, 0)).
  double lo = work * (a + std::min(b, 0.0));
  double hi = work * (a + std::max(b, 0.0));
  double t = work * a;
  for (int i = 0; i < 100 && hi - lo > 1e-12 * hi; ++i) {
    const double excess = sustained_work(load, t, share, h) - work;
    if (std::abs(excess) <= 1e-12 * work) break;
    (excess > 0 ? hi : lo) = t;
    const double next = t - excess * (a + b * std::exp(-t / tau));  // Newton
    t = next > lo && next < hi ? next : (lo + hi) / 2;
  }
  return t;
}

double sustained_load_after(const SustainedLoad& load, double dt, double share, double h) {
  if (dt <= 0) return h;
  return share + (h - share) * std::exp(-dt / load.time_constant_us);
}

std::vector<DeviceLoad> device_loads_from(const std::vector<double>& loads, int devices) {
  std::vector<DeviceLoad> out;
  out.reserve(static_cast<std::size_t>(std::max(devices, 0)));
  for (int d = 0; d < devices; ++d) {
    const auto i = static_cast<std::size_t>(d);
    out.emplace_back(i < loads.size() ? loads[i] : 0.0);
  }
  return out;
}

void write_loads_at(const std::vector<DeviceLoad>& devices, const SustainedLoad& load, double end,
                    std::vector<double>& loads) {
  loads.resize(devices.size());
  for (std::size_t d = 0; d < devices.size(); ++d)
    loads[d] = devices[d].at(load, end);
}

double DeviceLoad::at(const SustainedLoad& load, double t) const {
  return t < busy_until_ ? sustained_load_after(load, t - start_, 1, h_)
                         : sustained_load_after(load, t - busy_until_, 0, h_end_);
}

double DeviceLoad::run(const SustainedLoad& load, double start, double work) {
  const double h = at(load, start);
  const double duration = sustained_time(load, work, 1, h);
  start_ = start;
  h_ = h;
  // An op that ends within the busy time before it leaves the load at its end as it was.
  if (start + duration > busy_until_) {
    busy_until_ = start + duration;
    h_end_ = sustained_load_after(load, duration, 1, h);
  }
  return duration;
}

std::vector<double> periodic_loads(const SustainedLoad& load, std::size_t count,
                                   const std::function<double(std::vector<double>&)>& pass) {
  constexpr std::size_t kMemory = 4;  // passes whose secant steps are mixed into the next start
  std::vector<double> start(count, 0.0);
  std::vector<double> end;
  // Per earlier pass: its secant step and where that step led (its start plus the step).
  std::deque<std::vector<double>> steps;
  std::deque<std::vector<double>> targets;
  for (int pass_index = 0; pass_index < kMaxPeriodicPasses; ++pass_index) {
    end = start;
    const double length = pass(end);
    double gap = 0;
    for (std::size_t i = 0; i < count; ++i)
      gap = std::max(gap, std::abs(end[i] - start[i]));
    if (gap <= kPeriodicLoadTolerance) break;
    const double slope = std::exp(-length / load.time_constant_us);
    if (slope <= kPeriodicLoadTolerance) break;
    std::vector<double> step(count);
    std::vector<double> target(count);
    for (std::size_t i = 0; i < count; ++i) {
      step[i] = (end[i] - start[i]) / (1 - slope);
      target[i] = start[i] + step[i];
    }
    std::vector<double> next = target;
    if (!steps.empty()) {
      // Anderson mixing: the steps' differences, and the combination that leaves the least step.
      std::vector<std::vector<double>> step_changes;
      std::vector<std::vector<double>> target_changes;
      for (std::size_t j = 0; j < steps.size(); ++j) {
        const std::vector<double>& later_step = j + 1 < steps.size() ? steps[j + 1] : step;
        const std::vector<double>& later_target = j + 1 < targets.size() ? targets[j + 1] : target;
        std::vector<double> ds(count);
        std::vector<double> dt(count);
        for (std::size_t i = 0; i < count; ++i) {
          ds[i] = later_step[i] - steps[j][i];
          dt[i] = later_target[i] - targets[j][i];
        }
        step_changes.push_back(std::move(ds));
        target_changes.push_back(std::move(dt));
      }
      // The combination gamma of the step changes closest to this step (least squares).
      std::vector<std::pair<std::vector<double>, double>> rows(count);
      for (std::size_t i = 0; i < count; ++i) {
        for (const std::vector<double>& change : step_changes)
          rows[i].first.push_back(change[i]);
        rows[i].second = step[i];
      }
      const std::vector<double> gamma = least_squares(rows).value_or(std::vector<double>{});
      for (std::size_t j = 0; j < gamma.size(); ++j) {
        for (std::size_t i = 0; i < count; ++i)
          next[i] -= gamma[j] * target_changes[j][i];
      }
    }
    steps.push_back(std::move(step));
    targets.push_back(std::move(target));
    if (steps.size() > kMemory) {
      steps.pop_front();
      targets.pop_front();
    }
    for (std::size_t i = 0; i < count; ++i)
      start[i] = std::clamp(next[i], 0.0, 1.0);
  }
  return end;
}

double Contention::factor(const std::vector<double>& curve, std::size_t running) {
  if (curve.empty() || running == 0) return 1.0;
  return curve[std::min(running, curve.size()) - 1];
}

double Contention::fastest_factor() const {
  double fastest = 1.0;
  for (const double f : slowdown)
    fastest = std::min(fastest, f);
  for (const auto& [op, curve] : by_op) {
    for (const double f : curve)
      fastest = std::min(fastest, f);
  }
  if (copy) fastest = std::min({fastest, copy->sender_idle, copy->sender_computing});
  return fastest;
}

nlohmann::json contention_to_json(const Contention& contention) {
  nlohmann::json j = {{"source", contention.source}};
  if (!contention.slowdown.empty()) j["slowdown"] = contention.slowdown;
  if (!contention.by_op.empty()) j["by_op"] = contention.by_op;
  if (contention.copy) {
    j["copy"] = {{"sender_idle", contention.copy->sender_idle},
                 {"sender_computing", contention.copy->sender_computing}};
  }
  if (contention.sustained) {
    j["sustained"] = {{"factor", contention.sustained->factor},
                      {"time_constant_us", contention.sustained->time_constant_us}};
  }
  return j;
}

namespace {

bool is_slowdown(double x) {
  return std::isfinite(x) && x > 0 && x <= kMaxSlowdown;
}

double number_or_nan(const nlohmann::json& v) {
  return v.is_number() ? v.get<double>() : std::nan("");
}

std::string slowdown_range() {
  return "(0, " + std::to_string(static_cast<int>(kMaxSlowdown)) + "]";
}

// One named number of a small object, and the range it must lie in.
struct NumberField {
  const char* key;
  bool (*valid)(double);
  std::string range;
};

// The numbers of `contention.<field>`, an object with exactly the keys `fields` name (in their
// order): one line naming the field for a non-object, an unknown or missing key, or a number out
// of its range.
template <std::size_t N>
std::array<double, N> read_numbers(const nlohmann::json& json, const std::string& field,
                                   const std::array<NumberField, N>& fields,
                                   const std::string& ctx) {
  const std::string name = "contention." + field;
  if (!json.is_object()) throw Error(ctx + ": field '" + name + "' must be an object");
  std::array<std::string_view, N> keys{};
  std::string listed;
  for (std::size_t i = 0; i < N; ++i) {
    keys[i] = fields[i].key;
    listed += (i == 0 ? "" : i + 1 == N ? " and " : ", ") + std::string(fields[i].key);
  }
  require_known_fields(json, keys, ctx, name,
                       "contention." + field + " (its keys: " + listed + ")");
  std::array<double, N> numbers{};
  for (std::size_t i = 0; i < N; ++i) {
    const auto it = json.find(fields[i].key);
    const std::string full = name + "." + fields[i].key;
    if (it == json.end()) throw Error(ctx + ": field '" + full + "' is missing");
    const double x = number_or_nan(*it);
    if (!fields[i].valid(x))
      throw Error(ctx + ": field '" + full + "' must be a number in " + fields[i].range);
    numbers[i] = x;
  }
  return numbers;
}

CopySlowdown read_copy(const nlohmann::json& json, const std::string& ctx) {
  const auto [idle, computing] =
      read_numbers<2>(json, "copy",
                      {{{"sender_idle", is_slowdown, slowdown_range()},
                        {"sender_computing", is_slowdown, slowdown_range()}}},
                      ctx);
  return CopySlowdown{.sender_idle = idle, .sender_computing = computing};
}

SustainedLoad read_sustained(const nlohmann::json& json, const std::string& ctx) {
  const auto [factor, time_constant_us] = read_numbers<2>(
      json, "sustained",
      {{{"factor", [](double x) { return x >= 0 && x <= kMaxSlowdown; },
         "[0, " + std::to_string(static_cast<int>(kMaxSlowdown)) + "]"},
        {"time_constant_us", [](double x) { return x > 0 && x <= kMaxTimeConstantUs; },
         "(0, " + std::to_string(static_cast<long long>(kMaxTimeConstantUs)) + "]"}}},
      ctx);
  return SustainedLoad{.factor = factor, .time_constant_us = time_constant_us};
}

std::vector<double> read_curve(const nlohmann::json& json, const std::string& field,
                               const std::string& ctx) {
  if (!json.is_array() || json.empty() || json.size() > kMaxContentionEntries) {
    throw Error(ctx + ": field '" + field + "' must be an array of 1 to " +
                std::to_string(kMaxContentionEntries) + " numbers");
  }
  std::vector<double> curve;
  for (const auto& v : json) {
    if (!is_slowdown(number_or_nan(v)))
      throw Error(ctx + ": field '" + field + "' must hold numbers in " + slowdown_range());
    curve.push_back(v.get<double>());
  }
  return curve;
}

}  // namespace

Contention contention_from_json(const nlohmann::json& json, std::string_view context) {
  const std::string ctx(context);
  if (!json.is_object()) throw Error(ctx + ": field 'contention' must be an object");
  require_known_fields(json, {"source", "slowdown", "by_op", "copy", "sustained"}, ctx,
                       "contention", "a contention model");
  const auto slowdown = json.find("slowdown");
  Contention c;
  // Without a curve only a sustained term is there: separate GPUs, each with its own clock.
  if (slowdown != json.end() || !json.contains("sustained")) {
    c.slowdown = read_curve(slowdown != json.end() ? *slowdown : nlohmann::json(),
                            "contention.slowdown", ctx);
  } else {
    for (const char* field : {"by_op", "copy"}) {
      if (json.contains(field)) {
        throw Error(ctx + ": field 'contention." + field +
                    "' needs 'contention.slowdown' (stages sharing one GPU)");
      }
    }
  }
  if (const auto by_op = json.find("by_op"); by_op != json.end()) {
    if (!by_op->is_object()) throw Error(ctx + ": field 'contention.by_op' must be an object");
    for (const auto& [op, curve] : by_op->items()) {
      if (op != "F" && op != "B" && op != "P1" && op != "P2") {
        throw Error(ctx + ": field 'contention.by_op' has key '" + op +
                    "'; the op types are F, B, P1 and P2");
      }
      c.by_op[op] = read_curve(curve, "contention.by_op." + op, ctx);
    }
  }
  if (const auto copy = json.find("copy"); copy != json.end()) c.copy = read_copy(*copy, ctx);
  if (const auto sustained = json.find("sustained"); sustained != json.end()) {
    c.sustained = read_sustained(*sustained, ctx);
  }
  const auto source = json.find("source");
  if (source != json.end()) {
    if (!source->is_string()) throw Error(ctx + ": field 'contention.source' must be a string");
    c.source = source->get<std::string>();
  }
  return c;
}

}  // namespace pipeplan
