#include "planner/base/limits.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "planner/base/error.h"

namespace pipeplan::limits {

namespace {

std::string number_text(double value) {
  char buffer[40];
  if (std::abs(value) < 1e18 && value == std::floor(value)) {
    std::snprintf(buffer, sizeof buffer, "%.0f", value);
  } else {
    std::snprintf(buffer, sizeof buffer, "%g", value);
  }
  return buffer;
}

}  // namespace

std::string above_limit(std::string_view what, double limit, std::string_view unit) {
  return std::string(what) + " is above the limit of " + number_text(limit) +
         (unit.empty() ? "" : " " + std::string(unit)) + " (docs/reference/limits.md)";
}

std::string bandwidth_problem(double gbps, std::string_view zero_means) {
  if (!(gbps > 0 && gbps < kMinBandwidthGBps)) return "";
  return "= " + general_number(gbps) + " is neither 0 (" + std::string(zero_means) +
         ") nor at least " + general_number(kMinBandwidthGBps) + " (docs/reference/limits.md)";
}

void check_limit(std::string_view field, std::int64_t value, std::int64_t limit) {
  if (value > limit) {
    throw FieldError(std::string(field),
                     above_limit(std::to_string(value), static_cast<double>(limit)));
  }
}

std::string general_number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

std::string general_number_beside(double value, double other) {
  char buffer[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
    if (value == other || std::strtod(buffer, nullptr) != other) break;
  }
  return buffer;
}

}  // namespace pipeplan::limits
