#include "planner/calibrate/recorded_run.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"

namespace pipeplan {

std::vector<std::string> split_command_line(std::string_view line, std::string_view source) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\'') {
      const std::size_t end = line.find('\'', i + 1);
      if (end == std::string_view::npos)
        throw Error(std::string(source) + ": the recorded command has an unterminated quote");
      word.append(line.substr(i + 1, end - i - 1));
      i = end;
    } else if (c == '"') {
      for (++i;; ++i) {
        if (i >= line.size())
          throw Error(std::string(source) + ": the recorded command has an unterminated quote");
        if (line[i] == '"') break;
        if (line[i] == '\\' && i + 1 < line.size() &&
            std::string_view("\"\\$`").find(line[i + 1]) != std::string_view::npos) {
          ++i;
        }
        word += line[i];
      }
    } else if (c == '\\' && i + 1 < line.size()) {
      word += line[++i];
    } else {
      word += c;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

std::vector<std::string> recorded_command(std::string_view text, std::string_view source) {
  constexpr std::string_view kHeader = "# command: ";
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    if (line.starts_with(kHeader)) return split_command_line(line.substr(kHeader.size()), source);
    at = end + 1;
  }
  throw Error(std::string(source) +
              ": no line '# command: pipeplan plan ...' (the command on the same line)");
}

RecordedPeaks recorded_peaks(std::string_view text, std::string_view source, int devices) {
  std::string body;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    if (!line.starts_with('#')) {
      body += line;
      body += '\n';
    }
    at = end + 1;
  }
  const nlohmann::json report = parse_json_text(body, source);
  const std::string context(source);
  RecordedPeaks peaks;
  if (report.is_object() && !report.contains("peak_memory") &&
      report.contains("peak_memory_bytes")) {
    // The CPU backend's report: the measured peaks in device order, no prediction.
    const nlohmann::json& bytes = report["peak_memory_bytes"];
    if (!bytes.is_array() || bytes.empty()) {
      throw Error(context + ": peak_memory_bytes must be a non-empty array");
    }
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      const std::optional<std::int64_t> b = int64_value(bytes[i]);
      if (!b || *b < 0) {
        throw Error(context + ": peak_memory_bytes[" + std::to_string(i) +
                    "] must be a whole number of bytes");
      }
      peaks.measured_bytes.push_back(*b);
    }
    if (bytes.size() != static_cast<std::size_t>(devices)) {
      throw Error(context + ": " + std::to_string(bytes.size()) + " devices' peaks for a plan of " +
                  std::to_string(devices) + " devices (peak_memory_bytes)");
    }
    return peaks;
  }
  if (!report.is_object() || !report.contains("peak_memory") || !report["peak_memory"].is_array() ||
      report["peak_memory"].empty()) {
    throw Error(context + ": no 'peak_memory' rows (CUDA report) or 'peak_memory_bytes' (CPU)");
  }
  // Per device: the row that gave it, its measured and its predicted peak.
  std::map<std::int64_t, std::tuple<std::size_t, std::int64_t, std::int64_t>> by_device;
  for (std::size_t i = 0; i < report["peak_memory"].size(); ++i) {
    const nlohmann::json& row = report["peak_memory"][i];
    const std::string where = context + ": peak_memory[" + std::to_string(i) + "]";
    if (!row.is_object()) throw Error(where + " must be an object");
    const std::int64_t device = require_integer(row, "device", where);
    if (device < 0 || device >= devices) {
      throw Error(where + ": field 'device' is " + std::to_string(device) + ", not one of the " +
                  std::to_string(devices) + " devices of the plan (0 to " +
                  std::to_string(devices - 1) + ")");
    }
    if (const auto it = by_device.find(device); it != by_device.end()) {
      throw Error(where + ": field 'device' is " + std::to_string(device) + " again (peak_memory[" +
                  std::to_string(std::get<0>(it->second)) + "] gave it)");
    }
    const std::int64_t measured = require_integer(row, "measured_bytes", where);
    if (measured < 0) {
      throw Error(where + ": field 'measured_bytes' is " + std::to_string(measured) + ", below 0");
    }
    // A peak is predicted for every device that holds anything: none is no prediction.
    const std::int64_t predicted = require_integer(row, "predicted_bytes", where);
    if (predicted <= 0) {
      throw Error(where + ": field 'predicted_bytes' is " + std::to_string(predicted) +
                  ", not above 0");
    }
    by_device[device] = {i, measured, predicted};
  }
  for (std::int64_t device = 0; device < devices; ++device) {
    const auto it = by_device.find(device);
    if (it == by_device.end()) {
      throw Error(context + ": peak_memory has no row for device " + std::to_string(device) +
                  " (the plan has " + std::to_string(devices) + " devices)");
    }
    peaks.measured_bytes.push_back(std::get<1>(it->second));
    peaks.predicted_bytes.push_back(std::get<2>(it->second));
  }
  return peaks;
}

double worst_memory_error_pct(const std::vector<std::int64_t>& predicted,
                              const std::vector<std::int64_t>& measured) {
  double worst = std::numeric_limits<double>::quiet_NaN();
  const std::size_t n = std::min(predicted.size(), measured.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (predicted[i] <= 0) continue;
    const double error =
        100 * (static_cast<double>(measured[i]) / static_cast<double>(predicted[i]) - 1);
    if (std::isnan(worst) || std::abs(error) > std::abs(worst)) worst = error;
  }
  return worst;
}

std::vector<std::string> run_labels(const std::vector<std::string>& prefixes) {
  namespace fs = std::filesystem;
  // The name of the folder `up` levels above the run.
  const auto folder = [](const std::string& prefix, int up) {
    fs::path p = fs::absolute(fs::path(prefix)).lexically_normal();
    for (int i = 0; i < up; ++i)
      p = p.parent_path();
    return p.filename().string();
  };
  std::vector<std::string> labels;
  labels.reserve(prefixes.size());
  for (const std::string& prefix : prefixes)
    labels.push_back(fs::path(prefix).filename().string());
  const auto add = [&](auto&& with) {
    const std::vector<std::string> before = labels;
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (std::count(before.begin(), before.end(), before[i]) > 1)
        labels[i] = with(prefixes[i], before[i]);
    }
  };
  add([&](const std::string& prefix, const std::string& label) {
    const std::string name = folder(prefix, 1);
    return name.substr(0, name.find('-')) + "/" + label;
  });
  add([&](const std::string& prefix, const std::string& label) {
    return folder(prefix, 2) + "/" + label;
  });
  // Runs whose folders share their names further up: one folder more each time, until the labels
  // differ. Runs whose folders agree all the way up (their names differ past the first word of
  // the folder the second step shortened) are named by their paths as given.
  for (int up = 3;; ++up) {
    bool shared = false;
    bool at_root = false;
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (std::count(labels.begin(), labels.end(), labels[i]) > 1) {
        shared = true;
        at_root = at_root || folder(prefixes[i], up).empty();
      }
    }
    if (!shared) break;
    if (at_root) {
      add([](const std::string& prefix, const std::string& /*label*/) { return prefix; });
      break;
    }
    add([&](const std::string& prefix, const std::string& label) {
      return folder(prefix, up) + "/" + label;
    });
  }
  return labels;
}

}  // namespace pipeplan
