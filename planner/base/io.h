// File helpers shared by every reader and writer: JSON parsing with one-line errors naming the
// file, and atomic writes (temporary file + rename) so nothing is left half-written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace pipeplan {

// Both throw Error naming the file: missing, a directory, above limits::kMaxFileBytes (checked
// before reading), or unreadable.
std::string read_text_file(const std::filesystem::path& path);
// read_text_file, then parse_json_text.
nlohmann::json read_json_file(const std::filesystem::path& path);
// Parses JSON text; every failure is one Error line naming `source`: malformed JSON with its
// byte, and a number outside the range of a double (nlohmann's out_of_range.406, e.g. 1e999)
// with its field, line and byte.
nlohmann::json parse_json_text(std::string_view text, std::string_view source);
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

// Field access with errors that name the field and the source, e.g.
// "plan.json: field 'nodes[3].duration_us' must be a number".
const nlohmann::json& require_field(const nlohmann::json& object, std::string_view field,
                                    std::string_view context);
double require_number(const nlohmann::json& object, std::string_view field,
                      std::string_view context);
double require_nonnegative(const nlohmann::json& object, std::string_view field,
                           std::string_view context);
std::int64_t require_integer(const nlohmann::json& object, std::string_view field,
                             std::string_view context);
std::string require_string(const nlohmann::json& object, std::string_view field,
                           std::string_view context);
// Checks {"format": expected_format, "version": expected_version}.
void require_format(const nlohmann::json& json, std::string_view expected_format,
                    int expected_version, std::string_view source);
// The same for a reader of versions oldest..newest; returns the file's version.
int require_format(const nlohmann::json& json, std::string_view expected_format, int oldest_version,
                   int newest_version, std::string_view source);

}  // namespace pipeplan
