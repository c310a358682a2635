#include "profiles/overlap.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"

namespace pipeplan {

double overlapped_time_us(double a_us, double b_us, double efficiency) {
  return std::max(a_us, b_us) + (1 - efficiency) * std::min(a_us, b_us);
}

double overlap_efficiency_from(double a_us, double b_us, double pair_us) {
  const double shorter = std::min(a_us, b_us);
  if (!(shorter > 0)) return 0;
  return std::clamp((a_us + b_us - pair_us) / shorter, 0.0, 1.0);
}

nlohmann::json overlap_to_json(const OverlapModel& model) {
  return {{"efficiency", model.efficiency}, {"source", model.source}};
}

OverlapModel overlap_from_json(const nlohmann::json& json, std::string_view context) {
  const std::string ctx(context);
  if (!json.is_object()) throw Error(ctx + ": field 'overlap' must be an object");
  require_known_fields(json, {"efficiency", "source"}, ctx, "overlap", "an overlap model");
  OverlapModel model;
  const auto efficiency = json.find("efficiency");
  if (efficiency == json.end()) throw Error(ctx + ": field 'overlap.efficiency' is missing");
  if (!efficiency->is_number() || !std::isfinite(efficiency->get<double>()) ||
      efficiency->get<double>() < 0 || efficiency->get<double>() > 1) {
    throw Error(ctx + ": field 'overlap.efficiency' must be a number from 0 to 1");
  }
  model.efficiency = efficiency->get<double>();
  if (const auto source = json.find("source"); source != json.end()) {
    if (!source->is_string()) throw Error(ctx + ": field 'overlap.source' must be a string");
    model.source = source->get<std::string>();
  }
  return model;
}

}  // namespace pipeplan
