#include "profiles/contention.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"

namespace pipeplan {

const std::vector<double>& Contention::curve(std::string_view op) const {
  const auto it = by_op.find(op);
  return it != by_op.end() ? it->second : slowdown;
}

double Contention::factor(const std::vector<double>& curve, std::size_t running) {
  if (curve.empty() || running == 0) return 1.0;
  return curve[std::min(running, curve.size()) - 1];
}

nlohmann::json contention_to_json(const Contention& contention) {
  nlohmann::json j = {{"slowdown", contention.slowdown}, {"source", contention.source}};
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

bool is_slowdown(const nlohmann::json& v) {
  const double x = v.is_number() ? v.get<double>() : -1;
  return std::isfinite(x) && x > 0 && x <= kMaxSlowdown;
}

std::string slowdown_range() {
  return "(0, " + std::to_string(static_cast<int>(kMaxSlowdown)) + "]";
}

CopySlowdown read_copy(const nlohmann::json& json, const std::string& ctx) {
  if (!json.is_object()) throw Error(ctx + ": field 'contention.copy' must be an object");
  CopySlowdown copy;
  for (const auto& [key, value] : json.items()) {
    if (key != "sender_idle" && key != "sender_computing") {
      throw Error(ctx + ": field 'contention.copy' has key '" + key +
                  "'; its keys are sender_idle and sender_computing");
    }
    if (!is_slowdown(value)) {
      throw Error(ctx + ": field 'contention.copy." + key + "' must be a number in " +
                  slowdown_range());
    }
    (key == "sender_idle" ? copy.sender_idle : copy.sender_computing) = value.get<double>();
  }
  for (const char* key : {"sender_idle", "sender_computing"}) {
    if (!json.contains(key)) throw Error(ctx + ": field 'contention.copy." + key + "' is missing");
  }
  return copy;
}

SustainedLoad read_sustained(const nlohmann::json& json, const std::string& ctx) {
  if (!json.is_object()) throw Error(ctx + ": field 'contention.sustained' must be an object");
  for (const auto& [key, value] : json.items()) {
    if (key != "factor" && key != "time_constant_us") {
      throw Error(ctx + ": field 'contention.sustained' has key '" + key +
                  "'; its keys are factor and time_constant_us");
    }
  }
  const auto number = [&](const char* key) {
    const auto it = json.find(key);
    if (it == json.end())
      throw Error(ctx + ": field 'contention.sustained." + key + "' is missing");
    return it->is_number() ? it->get<double>() : std::nan("");
  };
  SustainedLoad sustained{number("factor"), number("time_constant_us")};
  if (!(sustained.factor >= 0 && sustained.factor <= kMaxSlowdown)) {
    throw Error(ctx + ": field 'contention.sustained.factor' must be a number in [0, " +
                std::to_string(static_cast<int>(kMaxSlowdown)) + "]");
  }
  if (!(sustained.time_constant_us > 0 && sustained.time_constant_us <= kMaxTimeConstantUs)) {
    throw Error(ctx + ": field 'contention.sustained.time_constant_us' must be a number in (0, " +
                std::to_string(static_cast<long long>(kMaxTimeConstantUs)) + "]");
  }
  return sustained;
}

std::vector<double> read_curve(const nlohmann::json& json, const std::string& field,
                               const std::string& ctx) {
  if (!json.is_array() || json.empty() || json.size() > kMaxContentionEntries) {
    throw Error(ctx + ": field '" + field + "' must be an array of 1 to " +
                std::to_string(kMaxContentionEntries) + " numbers");
  }
  std::vector<double> curve;
  for (const auto& v : json) {
    if (!is_slowdown(v))
      throw Error(ctx + ": field '" + field + "' must hold numbers in " + slowdown_range());
    curve.push_back(v.get<double>());
  }
  return curve;
}

}  // namespace

Contention contention_from_json(const nlohmann::json& json, std::string_view context) {
  const std::string ctx(context);
  if (!json.is_object()) throw Error(ctx + ": field 'contention' must be an object");
  const auto slowdown = json.find("slowdown");
  Contention c;
  c.slowdown =
      read_curve(slowdown != json.end() ? *slowdown : nlohmann::json(), "contention.slowdown", ctx);
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
