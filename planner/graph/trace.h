// Chrome / Perfetto JSON trace of a simulated task graph (opens in ui.perfetto.dev and
// chrome://tracing). One process per device, one thread per stream, one complete slice per node,
// a memory counter per device and flow arrows for every transfer. docs/reference/trace-format.md
// describes the tracks, names and args.
#pragma once

#include <filesystem>
#include <string_view>

#include <nlohmann/json.hpp>

#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"

namespace pipeplan {

// {"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}; ts/dur in microseconds.
// Throws Error when `sim` does not carry one time per node of `graph`.
nlohmann::json perfetto_trace(const TaskGraph& graph, const SimResult& sim, std::string_view title);

// Writes perfetto_trace() atomically (temporary file + rename).
void write_perfetto_trace(const TaskGraph& graph, const SimResult& sim,
                          const std::filesystem::path& path, std::string_view title);

}  // namespace pipeplan
