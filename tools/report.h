// Machine-readable metrics and the short text summary of a simulated plan.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"

namespace pipeplan {

// step_time_ms (= makespan), max_stage_span_ms, bubble_ratio, span_bubble_ratio,
// peak_memory_bytes (per device), memory_limit_bytes, tokens_per_s, mfu (PaLM model FLOPs;
// null when the model's FLOPs are unknown; mfu_of says against what), and per-device rows.
nlohmann::json metrics_json(const TaskGraph& graph, const SimResult& sim);
std::string short_summary(const TaskGraph& graph, const SimResult& sim);
// Pieces of it that `show`'s summary prints too: what the step leaves out or adds (no optimizer
// step, the data-parallel reduction, recomputation), one line each; the timing model beyond the
// profiled times (sustained load, contention curves, overlapped pairs); and, for a plan whose
// largest peak is above one GPU's HBM (planned without a limit), "more than the 80.00 GiB of one
// h100-sxm: it does not fit" ("" otherwise, and where the stages share one GPU).
std::string step_notes(const TaskGraph& graph);
std::string model_notes(const TaskGraph& graph);
std::string one_gpu_overflow_text(const PlanMeta& meta, const SimResult& sim);
// What a plan's MFU is measured against: "N whole GPUs", and, for stages that share one GPU
// (a profile with contention curves: emulated stages in green contexts), that they do, with
// `mfu` (when positive) against that one GPU: N times the figure of N GPUs.
std::string mfu_basis(const PlanMeta& meta, double mfu = 0);
// For stages that share one GPU, that sum against the GPU's HBM (gpus.json): "55.68 GiB of its
// 140.40 GiB", or "224.66 GiB, more than its 140.40 GiB: `run --emulate` cannot hold it"; "" for
// separate GPUs.
std::string shared_gpu_memory_text(const PlanMeta& meta, const SimResult& sim);
// The partition as Megatron-LM's layout and torchtitan's module lists (profiles/layout.h), two
// lines; empty for a plan without a stage split.
std::string layout_summary(const TaskGraph& graph);
// The same as JSON: {"megatron": ..., "megatron_placement": bool, "torchtitan": [[...], ...]}, or
// null.
nlohmann::json layout_json(const TaskGraph& graph);
// Whether a stream carries BPipe's stash moves (planner/plan/bpipe.h): evict and load sends and
// receives.
bool is_transfer_stream(const TaskGraph& graph, int stream);
// BPipe's stash moves per evictor/acceptor pair: "BPipe dev 0 -> dev 7: evicts 24 stashes,
// 77.81 GiB both ways, link 272.3 ms" a line each; empty without BPipe.
std::string transfer_summary(const TaskGraph& graph);
// The same as JSON: [{"evictor", "acceptor", "evictions", "bytes", "link_ms"}, ...], [] without.
nlohmann::json transfer_json(const TaskGraph& graph);

}  // namespace pipeplan
