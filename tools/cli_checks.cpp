#include "tools/cli_checks.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "planner/base/limits.h"
#include "tools/units.h"

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
            const std::optional<double> number = decimal_number(text);
            const double value = number.value_or(0);
            if (!number || !std::isfinite(value) || value <= above) {
              char bound[32];
              std::snprintf(bound, sizeof bound, "%g", above);
              return "'" + text + "' must be a finite decimal number above " + bound;
            }
            if (value > hi) return limits::above_limit(text, hi);
            return "";
          },
          "", "finite-range"};
}

CLI::Validator decimal_integer(bool is_signed) {
  return {[is_signed](std::string& text) -> std::string {
            const std::size_t digits = text.starts_with('-') ? 1 : 0;
            const bool all_digits =
                text.size() > digits &&
                std::all_of(text.begin() + static_cast<std::ptrdiff_t>(digits), text.end(),
                            [](char c) { return c >= '0' && c <= '9'; });
            if (!all_digits) return "'" + text + "' is not a decimal integer";
            if (digits == 1 && !is_signed) return "'" + text + "' must not be negative";
            if (digits == 1 && text.find_first_not_of('0', 1) == std::string::npos) {
              return "'" + text + "' is not a decimal integer (a zero has no sign)";
            }
            // CLI11 reads an unsigned value past 64 bits as the largest one: refused instead.
            if (!is_signed) {
              std::uint64_t value = 0;
              const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
              if (ec == std::errc::result_out_of_range) {
                return "'" + text + "' is above the limit of " +
                       std::to_string(std::numeric_limits<std::uint64_t>::max());
              }
            }
            return "";
          },
          "", "decimal-integer"};
}

void refuse_empty_values(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_size() == 0) continue;
    option->check(non_empty());
    // CLI11 reads 0x10 as 16 and wraps -1 into an unsigned option: integers are decimal only.
    const std::string type = option->get_type_name();
    if (type.starts_with("INT")) option->check(decimal_integer(true));
    if (type.starts_with("UINT")) option->check(decimal_integer(false));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    refuse_empty_values(*sub);
}

}  // namespace pipeplan
