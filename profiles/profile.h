// Per-layer cost profile: time and memory of forward, p1 (input gradient) and p2 (weight
// gradient) per layer kind and micro-batch size. Versioned JSON; see
// docs/reference/profile-format.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "profiles/contention.h"
#include "profiles/link.h"
#include "profiles/load_measurement.h"
#include "profiles/model.h"
#include "profiles/overlap.h"

namespace pipeplan {

enum class Attention { materialized, recompute, flash };
std::string_view to_string(Attention attention);
Attention attention_from_string(std::string_view text);  // throws Error

// A p2 table (one call over k concatenated micro-batches -> time or bytes) read at k: the entry
// for k, else linear in k from the largest entry below it (its per-micro-batch value, k times);
// nullopt when there is none. The map form holds any keys, the vector form k = 1 .. size at
// index k - 1; both extend the same way, so layers and stages round alike.
template <typename Value>
std::optional<double> p2_table_at(const std::map<int, Value>& table, int k) {
  if (auto it = table.find(k); it != table.end()) return static_cast<double>(it->second);
  auto below = table.lower_bound(k);
  if (below == table.begin()) return std::nullopt;
  --below;
  return static_cast<double>(below->second) / below->first * k;
}
template <typename Value>
std::optional<double> p2_table_at(const std::vector<Value>& table, int k) {
  const int known = static_cast<int>(table.size());
  if (k < 1 || known == 0) return std::nullopt;
  if (k <= known) return static_cast<double>(table[static_cast<std::size_t>(k) - 1]);
  return static_cast<double>(table.back()) / known * k;
}

struct LayerCost {
  double forward_us = 0;
  double p1_us = 0;  // input gradient (dX)
  double p2_us = 0;  // weight gradient (dW) of one micro-batch
  // Time of one p2 call over k concatenated micro-batches; k = 1 is p2_us.
  std::map<int, double> p2_concat_us;
  std::int64_t stash_bytes = 0;      // allocated by F, held until p1
  std::int64_t retained_bytes = 0;   // X and dY of the linear ops, held from p1 until p2
  std::int64_t param_bytes = 0;      // bf16 weights
  std::int64_t grad_bytes = 0;       // fp32 gradient accumulators
  std::int64_t optimizer_bytes = 0;  // fp32 master weights + AdamW moments
  std::int64_t send_bytes = 0;       // activation sent to the next stage (= gradient sent back)
  // Working memory: bytes a pass holds while it runs above what it leaves (temporaries, cuBLAS
  // and attention workspaces, the head's logits, p2's joined inputs): the allocator's peak during
  // the pass minus the larger of its level before and after. 0 where not measured.
  std::int64_t forward_work_bytes = 0;
  std::int64_t p1_work_bytes = 0;
  std::map<int, std::int64_t> p2_work_bytes;  // k concatenated micro-batches -> bytes
  // One optimizer step over the layer's parameters (AdamW on fp32 master weights and moments,
  // then the gradients zeroed): measured, or estimated from HBM bandwidth (it is memory-bound).
  // 0 where not known: plans then have no optimizer step (planner/graph/taskgraph.h).
  double optimizer_us = 0;
  // Time of one p2 over k micro-batches: the measured/estimated entry for k, else linear in k
  // from the nearest smaller entry.
  double p2_time_us(int k) const;
  // Working memory of one p2 over k micro-batches, extended from the nearest smaller entry the
  // same way (the joined inputs grow with k); 0 when there is none.
  std::int64_t p2_work(int k) const;
};

struct Provenance {
  std::string source;  // "analytic", "measured" or "uniform"
  std::string gpu;     // e.g. "NVIDIA H100 80GB HBM3" or the gpus.json key for analytic
  std::string date;    // ISO 8601
  std::string command;
  std::string notes;
};

struct Profile {
  static constexpr int kVersion = 1;
  ModelConfig model;
  std::string gpu;  // gpus.json key
  int seq = 0;
  Attention attention = Attention::flash;
  Provenance provenance;
  P2pLink p2p;
  // Emulated stages sharing this GPU (an --sm-partition profile): optional, empty elsewhere.
  Contention contention;
  // An overlapped pair's time (DualPipe's F&B): measured, else the sequential default.
  OverlapModel overlap;
  // The GPU under a long load, measured by the profiler (its model is also in
  // `contention.sustained`, where the simulator reads it): absent where not measured.
  std::optional<SustainedMeasurement> sustained_load;
  // layer kind ("embedding", "block", "head") -> micro-batch size -> cost
  std::map<std::string, std::map<int, LayerCost>> layers;

  // Throws Error naming the kind and micro-batch size when absent.
  const LayerCost& cost(LayerKind kind, int mbs) const;
  // "" when every layer kind of `model` has a cost at `mbs`, else what the first one lacks:
  // "no cost for layer kind 'block' at micro-batch size 2 (sizes present: 1)" (cost()'s message
  // after its "profile has ").
  std::string missing_cost(const ModelConfig& model, int mbs) const;
  std::vector<int> micro_batch_sizes() const;  // sizes present for every layer kind
};

nlohmann::json profile_to_json(const Profile& profile);
// Throws Error naming the field (and `source`, e.g. a file name) on malformed input or a wrong
// format/version.
Profile profile_from_json(const nlohmann::json& json, std::string_view source);
Profile load_profile(const std::filesystem::path& path);
// Now, as a profile's provenance dates it: "2026-11-29T02:31:03Z".
std::string utc_now_iso();
void save_profile(const Profile& profile, const std::filesystem::path& path);  // atomic

}  // namespace pipeplan
