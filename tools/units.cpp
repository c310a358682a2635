#include "tools/units.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "planner/base/error.h"
#include "planner/base/limits.h"
#include "planner/graph/validator.h"

namespace pipeplan {

namespace {

// The decimal number at the front of `s` (digits, an optional fraction and exponent: no sign, no
// hex, no "inf" or "nan", no spaces) and where it ends; ec set when there is none.
struct Leading {
  double value = 0;
  const char* ptr = nullptr;
  std::errc ec{};
};
Leading leading_decimal(const std::string& s) {
  Leading out;
  const char* end = s.data() + s.size();
  const auto [ptr, ec] =
      s.empty() || std::isdigit(static_cast<unsigned char>(s[0])) == 0
          ? std::from_chars_result{s.data(), std::errc::invalid_argument}
          : std::from_chars(s.data(), end, out.value, std::chars_format::general);
  out.ptr = ptr;
  out.ec = ec;
  return out;
}

}  // namespace

double parse_bytes(std::string_view text, std::string_view option) {
  const std::string s(text);
  // A decimal number and a unit.
  const auto [value, ptr, ec] = leading_decimal(s);
  const char* end = s.data() + s.size();
  if (ec != std::errc()) {
    throw Error(std::string(option) + ": '" + s + "' is not a size (e.g. 80GiB)");
  }
  std::string unit(ptr, end);
  for (char& c : unit)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // A number without a unit would be bytes: "--memory 80" meant as GiB plans against 80 bytes.
  // Only 0, which needs none, is taken without one.
  if (unit.empty() && value == 0) return 0;
  if (unit.empty()) {
    throw Error(std::string(option) + ": '" + s + "' has no unit (" + s + "GiB, " + s + "GB or " +
                s + "B for bytes)");
  }
  double scale = 0;
  if (unit == "b")
    scale = 1;
  else if (unit == "k" || unit == "kib")
    scale = 1024.0;
  else if (unit == "m" || unit == "mib")
    scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "p" || unit == "pib")
    scale = 1024.0 * 1024 * 1024 * 1024 * 1024;
  else if (unit == "kb")
    scale = 1e3;
  else if (unit == "mb")
    scale = 1e6;
  else if (unit == "gb")
    scale = 1e9;
  else if (unit == "tb")
    scale = 1e12;
  else if (unit == "pb")
    scale = 1e15;
  if (scale == 0 || !std::isfinite(value) || value < 0) {
    throw Error(std::string(option) + ": '" + s + "' is not a size (e.g. 80GiB)");
  }
  if (value * scale > limits::kMaxMemoryBytes) {
    throw Error(std::string(option) + ": '" + s +
                "' is above the limit of 1 PiB per device (docs/reference/limits.md)");
  }
  return value * scale;
}

std::optional<double> decimal_number(std::string_view text) {
  const bool negative = text.starts_with('-');
  const std::string digits(text.substr(negative ? 1 : 0));
  const auto [value, ptr, ec] = leading_decimal(digits);
  if (ptr != digits.data() + digits.size() ||
      (ec != std::errc() && ec != std::errc::result_out_of_range))
    return std::nullopt;
  // Out of a double's range: strtod says which way (HUGE_VAL, or 0 on underflow).
  const double magnitude =
      ec == std::errc::result_out_of_range ? std::strtod(digits.c_str(), nullptr) : value;
  return negative ? -magnitude : magnitude;
}

double parse_fraction(std::string_view text, std::string_view option) {
  return parse_number_in(text, option, 0, 1);
}

double parse_number_in(std::string_view text, std::string_view option, double lo, double hi) {
  const std::string s(text);
  const auto [value, ptr, ec] = leading_decimal(s);
  if (ec != std::errc() || ptr != s.data() + s.size() || !(value >= lo && value <= hi)) {
    throw Error(std::string(option) + ": '" + s + "' is not a number from " +
                limits::general_number(lo) + " to " + limits::general_number(hi));
  }
  return value;
}

std::vector<int> parse_int_list(std::string_view text, std::string_view option) {
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = text.substr(pos, comma - pos);
    int value = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || value < 1) {
      throw Error(std::string(option) + ": '" + std::string(text) +
                  "' must be a comma-separated list of positive integers");
    }
    out.push_back(value);
    pos = comma + 1;
  }
  return out;
}

std::vector<int> parse_candidate_list(std::string_view text, std::string_view option) {
  std::vector<int> out = parse_int_list(text, option);
  if (out.size() > static_cast<std::size_t>(limits::kMaxSizeCandidates)) {
    throw Error(std::string(option) + ": " + std::to_string(out.size()) +
                " sizes given, above the limit of " + std::to_string(limits::kMaxSizeCandidates) +
                " entries (docs/reference/limits.md)");
  }
  std::vector<int> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  if (const auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end()) {
    throw Error(std::string(option) + ": " + std::to_string(*twice) + " is given twice in '" +
                std::string(text) + "'");
  }
  return out;
}

std::string format_gib(double bytes) {
  return gib_text(bytes);
}

}  // namespace pipeplan
