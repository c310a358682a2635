#include "profiles/profile.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"
#include "profiles/gpu.h"
#include "profiles/json_reader.h"

namespace pipeplan {

namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "pipeplan-profile";

LayerCost cost_from_json(const JsonReader& r) {
  LayerCost c;
  c.forward_us = r.time_us("forward_us", true);
  c.p1_us = r.time_us("p1_us", true);
  // 0 is allowed: a parameter-free layer kind has no weight gradient.
  c.p2_us = r.time_us("p2_us", false);
  const JsonReader concat = r.object("p2_concat_us");
  for (const auto& [key, value] : concat.raw().items()) {
    const int k = concat.positive_key(key, limits::kMaxMicrobatches);
    // k micro-batches in one call: at most k times the limit of one pass.
    c.p2_concat_us[k] =
        concat.at_most(key, concat.nonnegative(key), limits::kMaxLayerTimeUs * k, "us");
  }
  // k = 1 is p2_us itself (profile.h): a second, different time would give the fused backward
  // one weight-gradient time and the 2BP one another.
  if (const auto one = c.p2_concat_us.find(1);
      one != c.p2_concat_us.end() && one->second != c.p2_us)
    concat.fail("1", "(" + limits::general_number(one->second) + ") differs from p2_us (" +
                         limits::general_number(c.p2_us) + "), which it repeats");
  c.stash_bytes = r.bytes("stash_bytes");
  c.retained_bytes = r.bytes("retained_bytes");
  c.param_bytes = r.bytes("param_bytes");
  c.grad_bytes = r.bytes("grad_bytes");
  c.optimizer_bytes = r.bytes("optimizer_bytes");
  c.send_bytes = r.bytes("send_bytes");
  // Optional (profiles before working memory was measured have none: 0).
  if (r.raw().contains("forward_work_bytes")) c.forward_work_bytes = r.bytes("forward_work_bytes");
  if (r.raw().contains("p1_work_bytes")) c.p1_work_bytes = r.bytes("p1_work_bytes");
  // Optional (profiles before the optimizer step was profiled have none: 0).
  if (r.raw().contains("optimizer_us")) c.optimizer_us = r.time_us("optimizer_us", false);
  if (r.raw().contains("p2_work_bytes")) {
    const JsonReader work = r.object("p2_work_bytes");
    if (!work.raw().is_object()) r.fail("p2_work_bytes", "must be an object");
    for (const auto& [key, value] : work.raw().items())
      c.p2_work_bytes[work.positive_key(key, limits::kMaxMicrobatches)] = work.bytes(key);
  }
  r.only({"forward_us", "p1_us", "p2_us", "p2_concat_us", "stash_bytes", "retained_bytes",
          "param_bytes", "grad_bytes", "optimizer_bytes", "send_bytes", "forward_work_bytes",
          "p1_work_bytes", "p2_work_bytes", "optimizer_us"},
         "a layer cost");
  return c;
}

json cost_to_json(const LayerCost& c) {
  json concat = json::object();
  for (const auto& [k, us] : c.p2_concat_us)
    concat[std::to_string(k)] = us;
  json j{{"forward_us", c.forward_us},
         {"p1_us", c.p1_us},
         {"p2_us", c.p2_us},
         {"p2_concat_us", concat},
         {"stash_bytes", c.stash_bytes},
         {"retained_bytes", c.retained_bytes},
         {"param_bytes", c.param_bytes},
         {"grad_bytes", c.grad_bytes},
         {"optimizer_bytes", c.optimizer_bytes},
         {"send_bytes", c.send_bytes}};
  if (c.optimizer_us > 0) j["optimizer_us"] = c.optimizer_us;
  // Written only when known, so a profile without them reads back the same.
  if (c.forward_work_bytes > 0 || c.p1_work_bytes > 0 || !c.p2_work_bytes.empty()) {
    json work = json::object();
    for (const auto& [k, bytes] : c.p2_work_bytes)
      work[std::to_string(k)] = bytes;
    j["forward_work_bytes"] = c.forward_work_bytes;
    j["p1_work_bytes"] = c.p1_work_bytes;
    j["p2_work_bytes"] = work;
  }
  return j;
}

std::set<std::string> kinds_needed(const ModelConfig& model) {
  std::set<std::string> kinds;
  for (LayerKind k : model.layer_list())
    kinds.insert(std::string(to_string(k)));
  return kinds;
}

// What a layer's weights take, by the model's shape: its parameters (a tied LM head keeps its own
// copy, as the analytic model and Megatron-LM hold it) in one of the weight dtypes a profiler
// writes: bf16 (the analytic model, the CUDA profiler), f32 or f64 (the CPU backend). A profile
// whose costs are another model's (its `model` edited, or the costs copied from a profile of
// another shape) would otherwise plan that model's FLOPs at these costs' speed. A uniform model
// has no shape: nothing to check.
void check_param_bytes(const ModelConfig& model, const std::string& kind, int mbs,
                       const LayerCost& cost, const JsonReader& layers) {
  if (model.family == "uniform") return;
  const LayerKind layer = layer_kind_from_string(kind);
  const std::int64_t params =
      layer == LayerKind::block ? model.block_parameters()
      : layer == LayerKind::embedding
          ? model.embedding_parameters()
          : model.head_parameters() +
                (model.tied_embeddings ? std::int64_t{model.vocab} * model.hidden : 0);
  static constexpr std::pair<int, std::string_view> kDtypes[] = {
      {2, "bf16"}, {4, "f32"}, {8, "f64"}};
  for (const auto& [bytes, dtype] : kDtypes) {
    if (cost.param_bytes == bytes * params) return;
  }
  const auto bytes_in = [&](int index, std::string_view unit) {
    const auto& [bytes, dtype] = kDtypes[index];
    return std::to_string(bytes * params) + std::string(unit) + " in " + std::string(dtype);
  };
  layers.fail(kind + "." + std::to_string(mbs) + ".param_bytes",
              "(" + std::to_string(cost.param_bytes) + ") does not fit field 'model', whose " +
                  kind + " has " + std::to_string(params) +
                  " parameters: " + bytes_in(0, " bytes") + " (" + bytes_in(1, "") + ", " +
                  bytes_in(2, "") + "); the costs are of another model");
}

}  // namespace

std::string_view to_string(Attention attention) {
  switch (attention) {
    case Attention::materialized:
      return "materialized";
    case Attention::recompute:
      return "recompute";
    case Attention::flash:
      return "flash";
  }
  return "flash";
}

Attention attention_from_string(std::string_view text) {
  if (text == "materialized") return Attention::materialized;
  if (text == "recompute") return Attention::recompute;
  if (text == "flash") return Attention::flash;
  throw FieldError("attention", "unknown attention '" + std::string(text) +
                                    "' (expected materialized, recompute, flash)");
}

double LayerCost::p2_time_us(int k) const {
  if (k < 1) throw Error("p2 over " + std::to_string(k) + " micro-batches: need at least 1");
  return p2_table_at(p2_concat_us, k).value_or(p2_us * k);  // k = 1 without an entry: p2_us
}

std::int64_t LayerCost::p2_work(int k) const {
  if (k < 1) throw Error("p2 over " + std::to_string(k) + " micro-batches: need at least 1");
  return std::llround(p2_table_at(p2_work_bytes, k).value_or(0));
}

namespace {

// The cost of `kind` at `mbs`, or nullptr with `missing` saying what the profile lacks.
const LayerCost* find_cost(const Profile& profile, LayerKind kind, int mbs, std::string& missing) {
  const std::string name(to_string(kind));
  auto kind_it = profile.layers.find(name);
  if (kind_it == profile.layers.end()) {
    missing = "no costs for layer kind '" + name + "'";
    return nullptr;
  }
  auto it = kind_it->second.find(mbs);
  if (it == kind_it->second.end()) {
    std::string present;
    for (const auto& [size, c] : kind_it->second) {
      present += (present.empty() ? "" : ", ") + std::to_string(size);
    }
    missing = "no cost for layer kind '" + name + "' at micro-batch size " + std::to_string(mbs) +
              " (sizes present: " + present + ")";
    return nullptr;
  }
  return &it->second;
}

}  // namespace

const LayerCost& Profile::cost(LayerKind kind, int mbs) const {
  std::string missing;
  const LayerCost* found = find_cost(*this, kind, mbs, missing);
  if (found == nullptr) throw Error("profile has " + missing);
  return *found;
}

std::string Profile::missing_cost(const ModelConfig& for_model, int mbs) const {
  std::string missing;
  for (const LayerKind kind : for_model.layer_list()) {
    if (find_cost(*this, kind, mbs, missing) == nullptr) return missing;
  }
  return "";
}

std::vector<int> Profile::micro_batch_sizes() const {
  std::vector<int> sizes;
  const auto kinds = kinds_needed(model);
  if (kinds.empty()) return sizes;
  auto first = layers.find(*kinds.begin());
  if (first == layers.end()) return sizes;
  for (const auto& [mbs, c] : first->second) {
    bool everywhere = true;
    for (const auto& kind : kinds) {
      auto it = layers.find(kind);
      everywhere = everywhere && it != layers.end() && it->second.count(mbs) > 0;
    }
    if (everywhere) sizes.push_back(mbs);
  }
  return sizes;
}

json profile_to_json(const Profile& p) {
  json layers = json::object();
  for (const auto& [kind, by_mbs] : p.layers) {
    json entries = json::object();
    for (const auto& [mbs, c] : by_mbs)
      entries[std::to_string(mbs)] = cost_to_json(c);
    layers[kind] = entries;
  }
  json out{{"format", kFormat},
           {"version", Profile::kVersion},
           {"provenance",
            {{"source", p.provenance.source},
             {"gpu", p.provenance.gpu},
             {"date", p.provenance.date},
             {"command", p.provenance.command},
             {"notes", p.provenance.notes}}},
           {"model", model_to_json(p.model)},
           {"gpu", p.gpu},
           {"seq", p.seq},
           {"attention", to_string(p.attention)},
           {"p2p", {{"latency_us", p.p2p.latency_us}, {"bandwidth_GBps", p.p2p.bandwidth_GBps}}},
           {"layers", layers}};
  if (p.contention.has_model()) out["contention"] = contention_to_json(p.contention);
  if (!p.overlap.is_default()) out["overlap"] = overlap_to_json(p.overlap);
  if (p.sustained_load) out["sustained_load"] = sustained_measurement_to_json(*p.sustained_load);
  return out;
}

Profile profile_from_json(const json& j, std::string_view source) {
  if (!j.is_object()) throw Error(std::string(source) + ": expected a JSON object");
  require_format(j, kFormat, Profile::kVersion, source);
  const JsonReader root(j, source, "");
  root.only({"format", "version", "provenance", "model", "gpu", "seq", "attention", "p2p", "layers",
             "contention", "overlap", "sustained_load"},
            "a profile");
  Profile p;

  const JsonReader prov = root.object("provenance");
  prov.only({"source", "gpu", "date", "command", "notes"}, "a profile's provenance");
  p.provenance.source = prov.string("source");
  if (p.provenance.source != "analytic" && p.provenance.source != "measured" &&
      p.provenance.source != "uniform") {
    prov.fail("source", "must be 'analytic', 'measured' or 'uniform'");
  }
  p.provenance.gpu = prov.string("gpu");
  p.provenance.date = prov.string("date");
  // Both go into a plan's meta.profile_source, which the plan reader checks the same way.
  for (const auto& [field, text] :
       {std::pair{"gpu", &p.provenance.gpu}, {"date", &p.provenance.date}}) {
    if (const std::string problem = control_character_problem(*text); !problem.empty())
      prov.fail(field, problem);
  }
  p.provenance.command = prov.string("command");
  p.provenance.notes = prov.string("notes");

  p.model = model_from_json(root.get("model"), source, "model");
  p.gpu = root.string("gpu");
  if (const std::string problem = control_character_problem(p.gpu); !problem.empty()) {
    root.fail("gpu", problem);
  }
  if (p.gpu.empty() && p.model.family != "uniform") {
    // The plan would take --gpu's default for the memory limit and the peak FLOPs.
    root.fail("gpu", "is empty; only a uniform model's profile has no GPU");
  }
  if (!p.gpu.empty()) {
    try {
      static_cast<void>(find_gpu(p.gpu));
    } catch (const FieldError& e) {
      root.fail("gpu", "names " + e.detail());
    }
  }
  const std::optional<std::int64_t> seq = int64_value(root.get("seq"));
  if (!seq || *seq < 1) root.fail("seq", "must be a positive integer");
  root.at_most("seq", static_cast<double>(*seq), limits::kMaxSeq);
  p.seq = static_cast<int>(*seq);
  // A learned position table has a row per position: no token past its last row has one.
  if (p.model.learned_positions > 0 && p.seq > p.model.learned_positions) {
    root.fail("seq", "(" + std::to_string(p.seq) + ") is above the " +
                         std::to_string(p.model.learned_positions) + " learned positions of " +
                         p.model.name);
  }
  try {
    p.attention = attention_from_string(root.string("attention"));
  } catch (const Error&) {
    root.fail("attention", "must be 'materialized', 'recompute' or 'flash'");
  }
  const JsonReader p2p = root.object("p2p");
  p2p.only({"latency_us", "bandwidth_GBps"}, "a profile's link");
  p.p2p.latency_us =
      p2p.at_most("latency_us", p2p.nonnegative("latency_us"), limits::kMaxLinkLatencyUs, "us");
  p.p2p.bandwidth_GBps = p2p.at_most("bandwidth_GBps", p2p.nonnegative("bandwidth_GBps"),
                                     limits::kMaxBandwidthGBps, "GB/s");
  if (const std::string problem = limits::bandwidth_problem(p.p2p.bandwidth_GBps, "latency only");
      !problem.empty())
    p2p.fail("bandwidth_GBps", problem);
  if (const auto c = j.find("contention"); c != j.end()) {
    p.contention = contention_from_json(*c, source);
  }
  if (const auto o = j.find("overlap"); o != j.end()) p.overlap = overlap_from_json(*o, source);
  if (const auto s = j.find("sustained_load"); s != j.end()) {
    p.sustained_load = sustained_measurement_from_json(*s, source);
  }

  const JsonReader layers = root.object("layers");
  const auto needed = kinds_needed(p.model);
  for (const auto& [kind, entries] : layers.raw().items()) {
    if (needed.count(kind) == 0) {
      layers.fail(kind, p.model.family == "uniform"
                            ? "is not a layer kind of a uniform model (only 'block')"
                            : "is not a layer kind (embedding, block, head)");
    }
    const JsonReader by_mbs = layers.object(kind);
    if (by_mbs.raw().empty()) layers.fail(kind, "has no micro-batch sizes");
    for (const auto& [key, value] : by_mbs.raw().items()) {
      const int mbs = by_mbs.positive_key(key, limits::kMaxMicroBatchSize);
      p.layers[kind][mbs] = cost_from_json(by_mbs.object(key));
      check_param_bytes(p.model, kind, mbs, p.layers[kind][mbs], layers);
    }
  }
  for (const auto& kind : needed) {
    if (p.layers.count(kind) == 0) layers.fail(kind, "is missing");
  }
  return p;
}

Profile load_profile(const std::filesystem::path& path) {
  return profile_from_json(read_json_file(path), input_name(path));
}

void save_profile(const Profile& profile, const std::filesystem::path& path) {
  write_file_atomic(path, json_text(profile_to_json(profile), 2) + "\n");
}

std::string utc_now_iso() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

}  // namespace pipeplan
