#include "planner/base/io.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <system_error>

#include "planner/base/error.h"

namespace pipeplan {

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  const std::string text = read_text_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(path.string() + ": malformed JSON at byte " + std::to_string(e.byte));
  }
}

void write_file_atomic(const std::filesystem::path& path, std::string_view content) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(path.string() + ": cannot write file");
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      throw Error(path.string() + ": write failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error(path.string() + ": cannot replace file");
  }
}

const nlohmann::json& require_field(const nlohmann::json& object, std::string_view field,
                                    std::string_view context) {
  if (!object.is_object()) throw Error(std::string(context) + ": expected an object");
  auto it = object.find(field);
  if (it == object.end()) {
    throw Error(std::string(context) + ": missing field '" + std::string(field) + "'");
  }
  return *it;
}

double require_number(const nlohmann::json& object, std::string_view field,
                      std::string_view context) {
  const auto& value = require_field(object, field, context);
  if (!value.is_number() || !std::isfinite(value.get<double>())) {
    throw Error(std::string(context) + ": field '" + std::string(field) + "' must be a number");
  }
  return value.get<double>();
}

double require_nonnegative(const nlohmann::json& object, std::string_view field,
                           std::string_view context) {
  const double value = require_number(object, field, context);
  if (value < 0) {
    throw Error(std::string(context) + ": field '" + std::string(field) + "' must not be negative");
  }
  return value;
}

std::int64_t require_integer(const nlohmann::json& object, std::string_view field,
                             std::string_view context) {
  const auto& value = require_field(object, field, context);
  if (!value.is_number_integer()) {
    throw Error(std::string(context) + ": field '" + std::string(field) + "' must be an integer");
  }
  return value.get<std::int64_t>();
}

std::string require_string(const nlohmann::json& object, std::string_view field,
                           std::string_view context) {
  const auto& value = require_field(object, field, context);
  if (!value.is_string()) {
    throw Error(std::string(context) + ": field '" + std::string(field) + "' must be a string");
  }
  return value.get<std::string>();
}

void require_format(const nlohmann::json& json, std::string_view expected_format,
                    int expected_version, std::string_view source) {
  require_format(json, expected_format, expected_version, expected_version, source);
}

int require_format(const nlohmann::json& json, std::string_view expected_format, int oldest_version,
                   int newest_version, std::string_view source) {
  const std::string format = require_string(json, "format", source);
  if (format != expected_format) {
    throw Error(std::string(source) + ": field 'format' is '" + format + "', expected '" +
                std::string(expected_format) + "'");
  }
  const std::int64_t version = require_integer(json, "version", source);
  if (version < oldest_version || version > newest_version) {
    const std::string readable = oldest_version == newest_version
                                     ? "version " + std::to_string(newest_version)
                                     : "versions " + std::to_string(oldest_version) + " to " +
                                           std::to_string(newest_version);
    throw Error(std::string(source) + ": field 'version' is " + std::to_string(version) +
                ", this pipeplan reads " + readable);
  }
  return static_cast<int>(version);
}

}  // namespace pipeplan
