#include "tools/report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "profiles/data_parallel.h"
#include "profiles/gpu.h"
#include "profiles/layout.h"
#include "profiles/recompute.h"
#include "tools/units.h"

namespace pipeplan {

namespace {

// Whether the plan places virtual stage s on device s mod P, as Megatron's interleaving does.
bool megatron_placement(const TaskGraph& graph) {
  const Schedule& s = graph.schedule;
  for (int stage = 0; stage < s.stage_count(); ++stage) {
    if (s.stage_device[static_cast<std::size_t>(stage)] != stage % s.devices) return false;
  }
  return true;
}

bool has_split(const TaskGraph& graph) {
  return !graph.meta.stage_layers.empty() && graph.meta.model.layers > 0 &&
         static_cast<int>(graph.meta.stage_layers.size()) == graph.schedule.stage_count();
}

// Byte counts as whole bytes (a limit derived from GiB and a reserve can be fractional).
std::vector<std::int64_t> whole_bytes(const std::vector<double>& bytes) {
  std::vector<std::int64_t> out;
  out.reserve(bytes.size());
  for (const double b : bytes)
    out.push_back(static_cast<std::int64_t>(std::floor(b)));
  return out;
}

}  // namespace

nlohmann::json layout_json(const TaskGraph& graph) {
  if (!has_split(graph)) return nullptr;
  const PlanMeta& m = graph.meta;
  // Two copies of the model (dualpipe) share one cut: the layout is the model's stages, once.
  const std::vector<StageLayers> cut(m.stage_layers.begin(),
                                     m.stage_layers.begin() + graph.schedule.model_stage_count());
  return {{"megatron", megatron_layout(m.model, cut)},
          {"megatron_placement", graph.schedule.replicas == 1 && megatron_placement(graph)},
          {"torchtitan", module_names_per_stage(m.model, cut)}};
}

std::string layout_summary(const TaskGraph& graph) {
  const nlohmann::json layout = layout_json(graph);
  if (layout.is_null()) return "";
  std::string out = "Megatron-LM: --pipeline-model-parallel-layout '" +
                    layout["megatron"].get<std::string>() + "'";
  if (graph.schedule.replicas != 1) {
    out += " (the model's cut, once: " + graph.meta.schedule +
           " also runs a second copy of it from the last device back, which Megatron does not)";
  } else if (!layout["megatron_placement"].get<bool>()) {
    out += " (Megatron runs virtual stage s on rank s mod " + std::to_string(graph.meta.devices) +
           "; this plan's " + graph.meta.schedule + " places them otherwise)";
  }
  return out + "\ntorchtitan: module_fqns_per_model_part = " + json_text(layout["torchtitan"]) +
         "\n";
}

nlohmann::json metrics_json(const TaskGraph& graph, const SimResult& sim) {
  const PlanMeta& m = graph.meta;
  nlohmann::json devices = nlohmann::json::array();
  for (std::size_t d = 0; d < sim.devices.size(); ++d) {
    const DeviceMetrics& dm = sim.devices[d];
    nlohmann::json stages = nlohmann::json::array();
    for (int s = 0; s < graph.schedule.stage_count(); ++s) {
      if (graph.schedule.stage_device[static_cast<std::size_t>(s)] == static_cast<int>(d)) {
        stages.push_back(s);
      }
    }
    devices.push_back({{"device", d},
                       {"stages", stages},
                       {"busy_ms", dm.busy_us / 1e3},
                       {"optimizer_ms", dm.optimizer_us / 1e3},
                       {"span_ms", dm.span_us / 1e3},
                       {"bubble_ratio", dm.bubble_ratio},
                       {"peak_memory_bytes", dm.peak_memory_bytes},
                       {"static_bytes", d < m.static_bytes.size() ? m.static_bytes[d] : 0}});
  }
  nlohmann::json j = {{"model", m.model.name},
                      {"gpu", m.gpu},
                      {"schedule", m.schedule},
                      {"backward", std::string(to_string(m.backward))},
                      {"devices", m.devices},
                      {"tensor_parallel", m.tensor_parallel},
                      {"data_parallel", m.data_parallel.replicas},
                      {"recompute", recompute_to_json(m.recompute)},
                      {"chunks", m.chunks},
                      {"microbatches", m.microbatches},
                      {"mbs", m.mbs},
                      {"seq", m.seq},
                      {"p2_concat", m.p2_concat},
                      {"step_time_ms", sim.makespan_us / 1e3},
                      {"max_stage_span_ms", sim.max_stage_span_us / 1e3},
                      {"bubble_ratio", sim.bubble_ratio},
                      {"span_bubble_ratio", sim.span_bubble_ratio},
                      {"peak_memory_bytes", sim.peak_memory_bytes()},
                      {"memory_limit_bytes", whole_bytes(m.memory_limit_bytes)},
                      {"tokens_per_s", sim.tokens_per_s},
                      {"mfu_kind", "PaLM model FLOPs"},
                      {"per_device", devices},
                      {"profile", m.profile_source}};
  if (!m.contention.empty()) j["shared_gpu_memory_bytes"] = sim.shared_gpu_memory_bytes();
  if (m.data_parallel.replicas > 1) {
    j["data_parallel_sync"] = {{"optimizer", std::string(to_string(m.data_parallel.optimizer))},
                               {"bandwidth_GBps", m.data_parallel.link.bandwidth_GBps},
                               {"latency_us", m.data_parallel.link.latency_us}};
  }
  j["mfu"] = sim.mfu > 0 ? nlohmann::json(sim.mfu) : nlohmann::json(nullptr);
  j["mfu_of"] = mfu_basis(m, sim.mfu);
  const std::string above_peak = mfu_above_peak_note(m, sim);
  j["mfu_above_peak"] = above_peak.empty() ? nlohmann::json(nullptr) : nlohmann::json(above_peak);
  j["layout"] = layout_json(graph);
  j["bpipe"] = transfer_json(graph);
  if (const std::size_t pairs = overlap_pairs(graph).size(); pairs > 0) {
    j["overlap"] = {
        {"pairs", pairs}, {"efficiency", m.overlap.efficiency}, {"source", m.overlap.source}};
  }
  return j;
}

std::string shared_gpu_memory_text(const PlanMeta& meta, const SimResult& sim) {
  if (meta.contention.empty()) return "";
  const auto sum = static_cast<double>(sim.shared_gpu_memory_bytes());
  std::string text = format_gib(sum);
  if (const double hbm = shared_gpu_hbm_bytes(meta); hbm > 0) {
    text += !over_shared_gpu_hbm(meta, sim)
                ? " of its " + format_gib(hbm)
                : ", more than its " + format_gib(hbm) + ": `run --emulate` cannot hold it";
  }
  return text;
}

bool is_transfer_stream(const TaskGraph& graph, int stream) {
  return graph.streams()[static_cast<std::size_t>(stream)].role == StreamRole::transfer;
}

namespace {

struct PairTraffic {
  int evictor = -1, acceptor = -1, evictions = 0;
  std::int64_t bytes = 0;
  double link_us = 0;
};

// BPipe's stash moves (planner/plan/bpipe.h), the sends of transfer streams, by device pair.
std::vector<PairTraffic> stash_traffic(const TaskGraph& graph) {
  std::map<std::pair<int, int>, PairTraffic> pairs;  // (lower device, higher device)
  for (const Node& node : graph.nodes()) {
    if (node.kind != NodeKind::send || !is_transfer_stream(graph, node.stream)) continue;
    PairTraffic& pair = pairs[std::minmax(node.device, node.peer)];
    if (node.transfer == Transfer::evict) {
      pair.evictor = node.device;
      ++pair.evictions;
    }
    pair.bytes += node.bytes;
    pair.link_us += node.duration_us;
  }
  std::vector<PairTraffic> out;
  for (auto [devices, pair] : pairs) {
    if (pair.evictor < 0) pair.evictor = devices.first;
    pair.acceptor = pair.evictor == devices.first ? devices.second : devices.first;
    out.push_back(pair);
  }
  return out;
}

}  // namespace

std::string transfer_summary(const TaskGraph& graph) {
  std::string out;
  for (const PairTraffic& pair : stash_traffic(graph)) {
    out += "BPipe dev " + std::to_string(pair.evictor) + " -> dev " +
           std::to_string(pair.acceptor) + ": evicts " + std::to_string(pair.evictions) +
           (pair.evictions == 1 ? " stash, " : " stashes, ") +
           format_gib(static_cast<double>(pair.bytes)) + " both ways, link " +
           printf_text("%.1f ms", pair.link_us / 1000) + "\n";
  }
  return out;
}

nlohmann::json transfer_json(const TaskGraph& graph) {
  nlohmann::json out = nlohmann::json::array();
  for (const PairTraffic& pair : stash_traffic(graph)) {
    out.push_back({{"evictor", pair.evictor},
                   {"acceptor", pair.acceptor},
                   {"evictions", pair.evictions},
                   {"bytes", pair.bytes},
                   {"link_ms", pair.link_us / 1000}});
  }
  return out;
}

std::string mfu_basis(const PlanMeta& meta, double mfu) {
  const std::int64_t t = meta.tensor_parallel;
  const std::int64_t d = meta.data_parallel.replicas;
  const std::int64_t gpus = d * t * meta.devices;
  std::string basis = "of " + std::to_string(gpus) + " whole GPU" + (gpus == 1 ? "" : "s");
  if (d > 1 || t > 1) {
    basis += ": ";
    if (d > 1) basis += std::to_string(d) + " data-parallel replicas of ";
    basis += std::to_string(meta.devices) + " stage" + (meta.devices == 1 ? "" : "s");
    if (t > 1) basis += " of " + std::to_string(t) + " tensor-parallel GPUs";
  }
  // The P stages of a profile with contention curves are green contexts of one GPU: the MFU
  // against it is P times the figure, whatever the replicas and tensor-parallel GPUs (each such
  // group of P stages is one GPU).
  if (!meta.contention.empty()) {
    const std::int64_t shared = d * t;
    basis += shared == 1
                 ? "; the stages share one GPU (emulated)"
                 : "; each " + std::to_string(meta.devices) + " stages share one GPU (emulated), " +
                       std::to_string(shared) + " such GPUs";
    if (mfu > 0) {
      basis += printf_text(shared == 1 ? ": %.1f %% of that one" : ": %.1f %% of each",
                           mfu * 100 * static_cast<double>(meta.devices));
    }
  }
  return basis;
}

// What the step leaves out or adds beyond the pipeline's ops: no optimizer step in the plan,
// the data-parallel reduction, activation recomputation.
std::string step_notes(const TaskGraph& graph) {
  const PlanMeta& m = graph.meta;
  std::string out;
  const auto nodes = graph.nodes();
  const bool optimizer_steps =
      nodes.empty() || std::any_of(nodes.begin(), nodes.end(), [](const Node& n) {
        return n.kind == NodeKind::compute && n.op == OpType::O;
      });
  if (!optimizer_steps) {
    out +=
        "optimizer step: not in the plan (the profile gives it no time; `pipeplan profile` "
        "measures it, the analytic model estimates it): the step time leaves it out\n";
  }
  if (m.data_parallel.replicas > 1) {
    const std::string reduction = m.data_parallel.optimizer == DataParallelOptimizer::sharded
                                      ? "reduce-scatter and its parameters' all-gather"
                                      : "all-reduce";
    out += "data parallel: " + data_parallel_text(m.data_parallel) +
           (optimizer_steps
                ? "; each optimizer step holds its gradients' " + reduction +
                      ", not overlapped with the backward pass (an upper bound)\n"
                : "; the gradients' " + reduction + " is left out with the optimizer step\n");
  }
  if (m.recompute.any()) {
    out += "activation recompute: " + recompute_text(m.recompute) +
           "; a recomputing block keeps its input and re-runs its forward before its p1 (MFU "
           "counts model FLOPs, not the recomputed forward); Megatron-LM: " +
           megatron_recompute_args(m.recompute) + "\n";
  }
  return out;
}

// The timing model beyond each op's profiled time: a sustained-load term, a shared GPU's
// contention curves, overlapped pairs.
std::string model_notes(const TaskGraph& graph) {
  const PlanMeta& m = graph.meta;
  char line[512];
  std::string out;
  if (m.contention.empty() && m.contention.sustained) {  // separate GPUs, each its own clock
    const SustainedLoad& sustained = *m.contention.sustained;
    std::snprintf(line, sizeof line,
                  "sustained load per GPU: x(1 + %.3g H), H its busy share averaged over %.3g "
                  "ms\n",
                  sustained.factor, sustained.time_constant_us / 1e3);
    out += line;
  } else if (!m.contention.empty()) {  // stages sharing one GPU: say the model behind the step
    out += "contention (ops at once: slowdown):";
    for (std::size_t k = 0; k < m.contention.slowdown.size(); ++k) {
      std::snprintf(line, sizeof line, " %zu: %.3g", k + 1, m.contention.slowdown[k]);
      out += line;
    }
    if (!m.contention.by_op.empty()) out += ", per op type for";
    for (const auto& [op, curve] : m.contention.by_op)
      out += " " + op;
    if (const auto& copy = m.contention.copy) {
      std::snprintf(line, sizeof line,
                    "; copies between stages: %.3g x link time, %.3g x beside the sender's compute",
                    copy->sender_idle, copy->sender_computing);
      out += line;
    }
    if (const auto& sustained = m.contention.sustained) {
      std::snprintf(line, sizeof line,
                    "; sustained load: x(1 + %.3g H), H over %.3g ms (the slowdowns at H = 0)",
                    sustained->factor, sustained->time_constant_us / 1e3);
      out += line;
    }
    out += "\n";
  }
  if (const std::size_t pairs = overlap_pairs(graph).size(); pairs > 0) {
    // The one assumption behind the pairs' times: say it, and where it comes from.
    std::snprintf(
        line, sizeof line,
        "overlapped F&B: %zu pairs, each max(F, B) + %.3g x min(F, B) (overlap "
        "efficiency %.3g: %s)\n",
        pairs, 1 - m.overlap.efficiency, m.overlap.efficiency,
        m.overlap.source.empty() ? "not measured, the ops in sequence" : m.overlap.source.c_str());
    out += line;
  }
  return out;
}

std::string one_gpu_overflow_text(const PlanMeta& m, const SimResult& sim) {
  if (!m.contention.empty()) return "";  // stages sharing one GPU: shared_gpu_memory_text says it
  const std::int64_t max_peak = sim.largest_peak_memory_bytes();
  // (A --uniform plan's bytes are no model's: it fits or not by its --memory alone.)
  const double hbm = m.model.family == "uniform" ? 0.0 : gpu_hbm_bytes(m.gpu);
  if (!(hbm > 0 && static_cast<double>(max_peak) > hbm)) return "";
  // Planned without a limit (--memory 0, or one above the GPU's): say it cannot run as is.
  return "more than the " + format_gib(hbm) + " of one " + m.gpu + ": it does not fit";
}

std::string short_summary(const TaskGraph& graph, const SimResult& sim) {
  const PlanMeta& m = graph.meta;
  const std::vector<std::int64_t> peaks = sim.peak_memory_bytes();
  std::string out;
  // With tensor parallelism: "on 8 stages x 4 a100-80g" (32 GPUs); with data parallelism
  // "on 2 replicas x 8 stages x 4 a100-80g" (64 GPUs).
  const std::string gpus =
      (m.data_parallel.replicas > 1 ? std::to_string(m.data_parallel.replicas) + " replicas x "
                                    : std::string()) +
      (m.tensor_parallel > 1 ? std::to_string(m.devices) + " stages x " +
                                   std::to_string(m.tensor_parallel) + " " + m.gpu
                             : std::to_string(m.devices) + " x " + m.gpu);
  // A model's name is as long as its file's path: no fixed buffer.
  out += m.model.name + " on " + gpus + ": " + m.schedule + ", backward " +
         std::string(to_string(m.backward)) +
         printf_text(", m=%d, mbs=%d, seq=%d", m.microbatches, m.mbs, m.seq) +
         (m.chunks > 1 ? ", chunks=" + std::to_string(m.chunks) : "") + "\n";
  std::string mfu = "n/a";
  if (sim.mfu > 0) {
    char value[32];
    std::snprintf(value, sizeof value, "%.1f %%", sim.mfu * 100);
    mfu = std::string(value) + " (PaLM, " + mfu_basis(m, sim.mfu) + ")";
  }
  out +=
      printf_text(
          "step time %.3f ms (largest stage span %.3f ms), bubble %.1f %% (of the stage span %.1f "
          "%%), %.0f tokens/s, MFU ",
          sim.makespan_us / 1e3, sim.max_stage_span_us / 1e3, sim.bubble_ratio * 100,
          sim.span_bubble_ratio * 100, sim.tokens_per_s) +
      mfu + "\n";
  if (const std::string note = mfu_above_peak_note(m, sim); !note.empty())
    out += "note: " + note + "\n";
  // A tensor-parallel device's GPUs each hold 1/T of its layers: the profile's bytes are per GPU.
  out += m.tensor_parallel > 1
             ? "peak memory per GPU (each stage's " + std::to_string(m.tensor_parallel) + " alike):"
             : "peak memory per device:";
  for (const auto p : peaks)
    out += " " + format_gib(static_cast<double>(p));
  out += " (max " + format_gib(static_cast<double>(sim.largest_peak_memory_bytes()));
  if (const std::string held = shared_gpu_memory_text(m, sim); !held.empty()) {
    out += "; the stages' one GPU holds their sum, " + held;
  } else if (const std::string over = one_gpu_overflow_text(m, sim); !over.empty()) {
    out += ", " + over;
  }
  out += ")\n";
  out += step_notes(graph);
  out += layout_summary(graph);
  out += transfer_summary(graph);
  out += model_notes(graph);
  return out;
}

}  // namespace pipeplan
