#include "profiles/gpu.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"

#ifndef PIPEPLAN_DEFAULT_DATA_DIR
#define PIPEPLAN_DEFAULT_DATA_DIR "profiles"
#endif

namespace pipeplan {

namespace {

using nlohmann::json;

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Errors read "<file>: field 'gpus[2].peak_bf16_tflops' must be ...".
struct GpuReader {
  const json& object;
  const std::string& source;
  std::string prefix;

  [[noreturn]] void fail(std::string_view field, std::string_view what) const {
    throw Error(source + ": field '" + prefix + "." + std::string(field) + "' " +
                std::string(what));
  }
  const json& get(std::string_view field) const {
    auto it = object.find(field);
    if (it == object.end()) fail(field, "is missing");
    return *it;
  }
  std::string string(std::string_view field) const {
    const json& v = get(field);
    if (!v.is_string()) fail(field, "must be a string");
    return v.get<std::string>();
  }
  // A number in [lo, hi] (docs/reference/limits.md); `positive` refuses 0 as well.
  double number(std::string_view field, bool positive, double hi, double lo = 0) const {
    const json& v = get(field);
    if (!v.is_number() || !std::isfinite(v.get<double>())) fail(field, "must be a number");
    const double x = v.get<double>();
    if (positive && x <= 0) fail(field, "must be positive");
    if (x < 0) fail(field, "must not be negative");
    if (x < lo)
      fail(field, "= " + limits::general_number(x) + " is below the least of " +
                      limits::general_number(lo) + " (docs/reference/limits.md)");
    if (x > hi)
      fail(field, limits::above_limit("(" + limits::general_number_beside(x, hi) + ")", hi));
    return x;
  }
  // A field the format lets out: absent reads as 0 (docs/reference/gpus-json.md).
  double number_or_zero(std::string_view field, double hi) const {
    return object.contains(field) ? number(field, false, hi) : 0.0;
  }
};

GpuSpec gpu_from_json(const json& j, const std::string& source, std::size_t index) {
  const GpuReader r{j, source, "gpus[" + std::to_string(index) + "]"};
  if (!j.is_object()) throw Error(source + ": field '" + r.prefix + "' must be an object");
  require_known_fields(
      j,
      {"name", "description", "aliases", "peak_bf16_tflops", "hbm_gib", "hbm_bandwidth_GBps",
       "nvlink_bandwidth_GBps", "pcie_bandwidth_GBps", "p2p_latency_us", "notes"},
      source, r.prefix, "a GPU");
  GpuSpec g;
  g.name = lower(r.string("name"));
  if (g.name.empty()) r.fail("name", "must not be empty");
  if (const std::string problem = control_character_problem(g.name); !problem.empty()) {
    r.fail("name", problem);
  }
  g.description = r.string("description");
  const json& aliases = r.get("aliases");
  if (!aliases.is_array()) r.fail("aliases", "must be an array of strings");
  for (const auto& a : aliases) {
    if (!a.is_string()) r.fail("aliases", "must be an array of strings");
    g.aliases.push_back(lower(a.get<std::string>()));
    if (g.aliases.back().empty()) {
      r.fail("aliases[" + std::to_string(g.aliases.size() - 1) + "]", "must not be empty");
    }
    if (const std::string problem = control_character_problem(g.aliases.back()); !problem.empty())
      r.fail("aliases", problem);
  }
  g.peak_bf16_tflops =
      r.number("peak_bf16_tflops", true, limits::kMaxGpuTflops, limits::kMinGpuTflops);
  g.hbm_bytes =
      r.number("hbm_gib", true, limits::kMaxMemoryBytes / kBytesPerGiB, limits::kMinGpuMemoryGiB) *
      kBytesPerGiB;
  g.hbm_bandwidth_GBps =
      r.number("hbm_bandwidth_GBps", true, limits::kMaxBandwidthGBps, limits::kMinBandwidthGBps);
  // 0: no NVLink
  g.nvlink_bandwidth_GBps = r.number_or_zero("nvlink_bandwidth_GBps", limits::kMaxBandwidthGBps);
  if (const std::string problem = limits::bandwidth_problem(g.nvlink_bandwidth_GBps, "no NVLink");
      !problem.empty())
    r.fail("nvlink_bandwidth_GBps", problem);
  g.pcie_bandwidth_GBps =
      r.number("pcie_bandwidth_GBps", true, limits::kMaxBandwidthGBps, limits::kMinBandwidthGBps);
  g.p2p_latency_us = r.number_or_zero("p2p_latency_us", limits::kMaxLinkLatencyUs);
  return g;
}

}  // namespace

std::filesystem::path data_dir() {
  if (const char* env = std::getenv("PIPEPLAN_DATA_DIR"); env != nullptr && *env != '\0') {
    return std::filesystem::path(env);
  }
  return std::filesystem::path(PIPEPLAN_DEFAULT_DATA_DIR);
}

std::vector<GpuSpec> load_gpus(const std::filesystem::path& gpus_json) {
  return gpus_from_json(read_json_file(gpus_json), gpus_json.string());
}

std::vector<GpuSpec> gpus_from_json(const nlohmann::json& j, const std::string& source) {
  require_format(j, "pipeplan-gpus", 1, source);
  require_known_fields(j, {"format", "version", "notes", "gpus"}, source, "", "a GPU list");
  const json& list = require_field(j, "gpus", source);
  if (!list.is_array()) throw Error(source + ": field 'gpus' must be an array");
  if (list.size() > static_cast<std::size_t>(limits::kMaxGpuEntries)) {
    throw Error(
        source + ": field 'gpus' " +
        limits::above_limit(std::to_string(list.size()) + " entries", limits::kMaxGpuEntries));
  }
  std::vector<GpuSpec> gpus;
  // Every name and alias seen so far (lower-case, as --gpu is looked up), with the GPU and the
  // field that have it: one lookup per name.
  std::unordered_map<std::string, std::pair<std::size_t, std::string>> owner;
  for (std::size_t i = 0; i < list.size(); ++i) {
    GpuSpec g = gpu_from_json(list[i], source, i);
    // Each name with the field that gives it: the one repeating another is named.
    std::vector<std::pair<std::string, std::string>> names = {{g.name, "name"}};
    for (std::size_t a = 0; a < g.aliases.size(); ++a)
      names.emplace_back(g.aliases[a], "aliases[" + std::to_string(a) + "]");
    for (const auto& [n, field] : names) {
      const auto [it, fresh] = owner.try_emplace(n, i, field);
      if (fresh) continue;
      const auto& [other, other_field] = it->second;
      throw Error(source + ": field 'gpus[" + std::to_string(i) + "]." + field + "' ('" + n +
                  "') repeats " +
                  (other == i ? "its own " + other_field : "a name of '" + gpus[other].name + "'"));
    }
    gpus.push_back(std::move(g));
  }
  return gpus;
}

GpuSpec find_gpu(std::string_view name_or_alias) {
  const auto gpus = load_gpus(data_dir() / "gpus.json");
  const std::string key = lower(name_or_alias);
  std::string known;
  for (const auto& g : gpus) {
    if (g.name == key || std::count(g.aliases.begin(), g.aliases.end(), key) > 0) return g;
    known += (known.empty() ? "" : ", ") + g.name;
    for (const auto& a : g.aliases)
      known += "|" + a;
  }
  throw FieldError("gpu", "unknown GPU '" + std::string(name_or_alias) + "'; known: " + known);
}

double gpu_hbm_bytes(std::string_view key) {
  try {
    return find_gpu(key).hbm_bytes;
  } catch (const Error&) {
    return 0;
  }
}

P2pLink node_link(const GpuSpec& gpu) {
  return {gpu.p2p_latency_us,
          gpu.nvlink_bandwidth_GBps > 0 ? gpu.nvlink_bandwidth_GBps : gpu.pcie_bandwidth_GBps};
}

}  // namespace pipeplan
