// Reading one object of a profile's JSON with errors that name the field's place in the file
// ("<source>: field 'layers.block.1.p2_us' must ..."): profiles/profile.cpp and the records it
// holds (profiles/load_measurement.cpp). Internal to the profiles library.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"

namespace pipeplan {

// Reads one JSON object whose place in the document is `path` ("" for the root). Errors read
// "<source>: field '<path>.<field>' must ...", so a user can find the value in the file.
class JsonReader {
 public:
  JsonReader(const nlohmann::json& object, std::string_view source, std::string path)
      : object_(object), source_(source), path_(std::move(path)) {
    if (!object_.is_object()) {
      throw Error(std::string(source_) + ": field '" + path_ + "' must be an object");
    }
  }

  std::string path_of(std::string_view field) const {
    return path_.empty() ? std::string(field) : path_ + "." + std::string(field);
  }
  [[noreturn]] void fail(std::string_view field, std::string_view what) const {
    throw Error(std::string(source_) + ": field '" + path_of(field) + "' " + std::string(what));
  }
  const nlohmann::json& get(std::string_view field) const {
    auto it = object_.find(field);
    if (it == object_.end()) fail(field, "is missing");
    return *it;
  }
  JsonReader object(std::string_view field) const {
    return JsonReader(get(field), source_, path_of(field));
  }
  std::string string(std::string_view field) const {
    const nlohmann::json& v = get(field);
    if (!v.is_string()) fail(field, "must be a string");
    return v.get<std::string>();
  }
  double number(std::string_view field) const {
    const nlohmann::json& v = get(field);
    if (!v.is_number() || !std::isfinite(v.get<double>())) fail(field, "must be a finite number");
    return v.get<double>();
  }
  double nonnegative(std::string_view field) const {
    const double x = number(field);
    if (x < 0) fail(field, "must not be negative");
    return x;
  }
  double positive(std::string_view field) const {
    const double x = nonnegative(field);
    if (x == 0) fail(field, "must be positive");
    return x;
  }
  // At most `max`; above it names the limit (planner/base/limits.h).
  double at_most(std::string_view field, double x, double max, std::string_view unit = {}) const {
    if (x > max) fail(field, limits::above_limit("(" + limits::general_number(x) + ")", max, unit));
    return x;
  }
  // A time of one layer's pass, µs: finite, >= 0 (> 0 when `positive`), at most 1000 s.
  double time_us(std::string_view field, bool is_positive) const {
    return at_most(field, is_positive ? positive(field) : nonnegative(field),
                   limits::kMaxLayerTimeUs, "us");
  }
  std::int64_t bytes(std::string_view field) const {
    const nlohmann::json& v = get(field);
    if (!v.is_number_integer()) fail(field, "must be an integer number of bytes");
    if (v.is_number_unsigned() &&
        v.get<std::uint64_t>() >
            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      fail(field, limits::above_limit("(" + std::to_string(v.get<std::uint64_t>()) + ")",
                                      static_cast<double>(limits::kMaxLayerBytes), "bytes"));
    }
    const std::int64_t x = v.get<std::int64_t>();
    if (x < 0) fail(field, "must not be negative");
    if (x > limits::kMaxLayerBytes) {
      fail(field, limits::above_limit("(" + std::to_string(x) + ")",
                                      static_cast<double>(limits::kMaxLayerBytes), "bytes"));
    }
    return x;
  }
  // A key that must be a decimal integer in 1..max ("1", "16").
  int positive_key(const std::string& key, int max) const {
    int value = 0;
    const char* end = key.data() + key.size();
    auto [ptr, ec] = std::from_chars(key.data(), end, value);
    if (ec != std::errc() || ptr != end || value < 1 || key[0] == '0') {
      if (ec == std::errc::result_out_of_range) fail(key, limits::above_limit("the key", max));
      fail(key, "has a key that is not a positive integer");
    }
    if (value > max) fail(key, limits::above_limit("the key", max));
    return value;
  }
  bool has(std::string_view field) const { return object_.contains(field); }
  // Refuses a key `known` does not list: "field '<path>.<key>' is not a field of <what>".
  void only(std::initializer_list<std::string_view> known, std::string_view what) const {
    require_known_fields(object_, known, source_, path_, what);
  }
  // A number from `lo` to `hi`, else "must be a number from <lo> to <hi>".
  double number_in(std::string_view field, double lo, double hi) const {
    const nlohmann::json& v = get(field);
    const double x = v.is_number() ? v.get<double>() : std::nan("");
    if (!std::isfinite(x) || x < lo || x > hi) {
      fail(field, "must be a number from " + limits::general_number(lo) + " to " +
                      limits::general_number(hi));
    }
    return x;
  }
  // An integer from `lo` to `hi`, else "must be an integer from <lo> to <hi>".
  int integer_in(std::string_view field, int lo, int hi) const {
    const nlohmann::json& v = get(field);
    if (!v.is_number_integer() || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi) {
      fail(field, "must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
    }
    return static_cast<int>(v.get<std::int64_t>());
  }
  const nlohmann::json& raw() const { return object_; }
  const std::string& path() const { return path_; }

 private:
  const nlohmann::json& object_;
  std::string_view source_;
  std::string path_;
};

}  // namespace pipeplan
