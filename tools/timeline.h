// Terminal views of a simulated plan: a per-device timeline of the compute streams and a
// summary table (busy time, bubbles, memory, step time, throughput, MFU).
#pragma once

#include <string>

#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"

namespace pipeplan {

// A time-scale header, one row per device (its compute stream scaled to the width), then a
// legend. Ops are drawn as runs of one letter per op type (F forward, b p1, w p2, B fused
// backward) with the micro-batch number inside runs of three cells or more; '·' is idle.
// A device with BPipe transfers gets one more row per peer under its compute row, labelled
// "↔<peer>", with e (evict: the stash goes to the acceptor) and l (load: it comes back) and the
// micro-batch number; the evictor's and the acceptor's rows show the two ends of each move.
// Every line is at most `width` visible characters; `color` adds ANSI 256-colour backgrounds
// (and nothing else: without it the output has no escape codes). Throws Error when `width`
// leaves fewer than 8 columns for the timeline or `sim` does not match `graph`.
std::string render_timeline(const TaskGraph& graph, const SimResult& sim, int width, bool color);
// The narrowest `width` render_timeline takes for this plan (a label column, then 8 lanes).
int timeline_min_width(const TaskGraph& graph, const SimResult& sim);

// Per-device work (F, B, W), bubble and peak memory against the limit (peaks include what a device
// holds for its BPipe peer), one line per BPipe pair (moves, bytes both ways, link time), then
// the step-time totals, tokens/s and MFU (PaLM model FLOPs). Lines fit in 80 columns.
std::string render_summary(const TaskGraph& graph, const SimResult& sim);

}  // namespace pipeplan
