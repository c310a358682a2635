#include "tools/cli_checks.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

#include "planner/base/limits.h"

namespace pipeplan {

const CLI::Validator& non_empty() {
  static const CLI::Validator check(
      [](std::string& value) { return value.empty() ? std::string("must not be empty") : ""; }, "",
      "non-empty");
  return check;
}

CLI::Validator int_range(std::int64_t lo, std::int64_t hi) {
  return {[lo, hi](std::string& text) -> std::string {
            std::int64_t value = 0;
            const char* end = text.data() + text.size();
            const auto [ptr, ec] = std::from_chars(text.data(), end, value);
            if (ec == std::errc::result_out_of_range) {
              return text.front() == '-' ? "must be at least " + std::to_string(lo)
                                         : limits::above_limit(text, static_cast<double>(hi));
            }
            if (ec != std::errc() || ptr != end) return "";  // CLI11's conversion error
            if (value < lo) return "must be at least " + std::to_string(lo);
            if (value > hi) return limits::above_limit(text, static_cast<double>(hi));
            return "";
          },
          "", "int-range"};
}

CLI::Validator finite_range(double above, double hi) {
  return {[above, hi](std::string& text) -> std::string {
            char* end = nullptr;
            const double value = std::strtod(text.c_str(), &end);
            if (end == text.c_str() || *end != '\0') return "";  // CLI11's conversion error
            if (!std::isfinite(value) || value <= above) {
              char bound[32];
              std::snprintf(bound, sizeof bound, "%g", above);
              return "'" + text + "' must be a finite number above " + bound;
            }
            if (value > hi) return limits::above_limit(text, hi);
            return "";
          },
          "", "finite-range"};
}

void refuse_empty_values(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_size() != 0) option->check(non_empty());
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    refuse_empty_values(*sub);
}

}  // namespace pipeplan
