// Chrome / Perfetto JSON trace of a simulated task graph (opens in ui.perfetto.dev and
// chrome://tracing). One process per device, one thread per stream (and one more per device for
// the second op of its overlapped pairs), one complete slice per node, a memory counter per device
// and flow arrows for every transfer. docs/reference/trace-format.md describes the tracks, names
// and args.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/base/io.h"
#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"

namespace pipeplan {

// Where a node's slice is drawn: pid = device + 1; tid = stream index + 1, except the second node
// of an overlapped pair (Node::overlaps_next), which runs at the same time as the first and so
// is on its device's "compute (overlapped)" thread, tid = streams + 1 + device. Traces written
// before that thread existed have it on its stream's tid (`stream_tid`).
struct SliceTrack {
  int pid = 0;
  int tid = 0;
  int stream_tid = 0;  // tid of the node's stream
};
std::vector<SliceTrack> slice_tracks(const TaskGraph& graph);
// A node's slice name: its label for a compute node, "send 0F3→1" / "recv 0F3←0" for a
// send/recv (label, arrow, peer device).
std::string slice_name(const Node& node);

// {"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}; ts/dur in microseconds.
// Throws Error when `sim` does not carry one time per node of `graph`.
nlohmann::json perfetto_trace(const TaskGraph& graph, const SimResult& sim, std::string_view title);

// json_text(perfetto_trace()) + "\n", handed to `write` piece by piece as it is produced (a
// trace of a million nodes is never whole in memory): for OutputFiles::add_stream.
void write_perfetto_trace(const TaskGraph& graph, const SimResult& sim, std::string_view title,
                          const OutputFiles::Writer& write);
// The same into `path` atomically (temporary file + rename).
void write_perfetto_trace(const TaskGraph& graph, const SimResult& sim,
                          const std::filesystem::path& path, std::string_view title);

}  // namespace pipeplan
