// Parsing and printing of sizes and lists given on the command line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipeplan {

inline constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

// "80GiB", "80G" (= GiB), "80GB" (10^9), "512MiB", "1e9" (bytes), at most 1 PiB
// (limits::kMaxMemoryBytes). Throws Error naming `option`.
double parse_bytes(std::string_view text, std::string_view option);
// A decimal number from 0 to 1 ("0.35", "1", "5e-1"). Throws Error naming `option`.
double parse_fraction(std::string_view text, std::string_view option);
// `text` whole as a decimal number, as every number option reads one: an optional '-', then the
// digits first (an optional fraction and exponent; no '+', hex, spaces, "inf" or "nan"); nullopt
// where it is none. Beyond a double's range: ±HUGE_VAL, or 0 on underflow.
std::optional<double> decimal_number(std::string_view text);
// A decimal number from `lo` to `hi` ("20", "0.5"). Throws Error naming `option` and the range.
double parse_number_in(std::string_view text, std::string_view option, double lo, double hi);
// "1,2,4" -> {1, 2, 4}; every entry a positive integer. Throws Error naming `option`.
std::vector<int> parse_int_list(std::string_view text, std::string_view option);
// The same for a list of candidates or sizes to measure, where a value given twice is a mistake:
// "--mbs: 1 is given twice in '1,1'".
std::vector<int> parse_candidate_list(std::string_view text, std::string_view option);
std::string format_gib(double bytes);  // gib_text: "12.34 GiB", "300.00 KiB"

// std::snprintf's text for `pattern` and `values`, at any length.
std::string printf_text(const char* pattern, auto... values) {
  const int length = std::snprintf(nullptr, 0, pattern, values...);
  if (length <= 0) return {};
  std::string text(static_cast<std::size_t>(length), '\0');
  std::snprintf(text.data(), text.size() + 1, pattern, values...);
  return text;
}

}  // namespace pipeplan
