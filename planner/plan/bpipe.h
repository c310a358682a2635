// BPipe (Kim et al., ICML 2023; re-evaluated in arXiv 2401.02088): memory balancing for
// 1F1B-family schedules by moving activation stashes between paired devices. Device x < P/2
// (the evictor) pairs with P - 1 - x (the acceptor). Whenever the evictor holds more stashes than
// its cap, it sends away the one it needs latest right after that forward; whenever a backward
// frees a slot, it loads back the evicted stash it needs next, so the load overlaps the compute
// before the backward that uses it.
//
// In the task graph (planner/graph/taskgraph.h) every move is a send/recv pair of kind
// Transfer::evict or Transfer::load (labelled "evict 0F3" / "load 0F3" for people) on the
// devices' `transfer` streams, in one order per pair (the evictor's compute order of the
// triggers):
//   evict: send on the evictor (data edge from the forward; frees the stash when it ends),
//          recv on the acceptor (allocates it when it starts);
//   load:  send on the acceptor (data edge from the evict recv; frees the stash when it ends),
//          recv on the evictor (data edge from the backward that freed the slot; allocates when it
//          starts; data edge to the backward that needs the stash: use after load).
// Memory therefore sums to zero on both ends: F +s, evict send -s, load recv +s, backward -s.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "planner/graph/taskgraph.h"
#include "profiles/partition.h"
#include "schedules/schedule.h"

namespace pipeplan {

enum class BpipeMode : std::uint8_t { off, on, automatic };
std::string_view to_string(BpipeMode mode);               // "off", "on", "auto"
BpipeMode bpipe_mode_from_string(std::string_view text);  // throws Error naming --bpipe

// One stash moved away and back. Positions index the evictor's device action list.
struct BpipeMove {
  int stage = 0;  // the evictor's stage whose stash moves
  int mb = 0;
  std::int64_t bytes = 0;
  int evict_after = 0;  // the forward after which it leaves
  int load_after = 0;   // the backward whose freed slot it returns into
  int needed_by = 0;    // the backward that reads it
};

struct BpipePair {
  int evictor = 0, acceptor = 0;
  int cap = 0;          // stashes the evictor keeps at most
  int max_evicted = 0;  // stashes the acceptor holds for it at most
  std::vector<BpipeMove> moves;
};

struct BpipePlan {
  std::vector<BpipePair> pairs;
  std::int64_t bytes_per_step() const;  // evict + load volume
};

// Two peaks closer than this fraction (and than half a stash) count as the same: a cap that
// lowers a pair's peak less moves stashes for nothing.
inline constexpr double kBpipeSamePeak = 0.005;

// The caps a pair may be given, both ends included.
struct CapRange {
  int min = 1;
  int max = std::numeric_limits<int>::max();
};

// The transfer plan for a lowered 1F1B plan (one stage per device). Caps are chosen per pair to
// minimise the larger of the two devices' order-based peak memory estimates (static, stashes and
// 2BP's retained X/dY). Throws Error naming --bpipe for other schedule families.
BpipePlan plan_bpipe(const TaskGraph& graph, const std::vector<StageCost>& costs);
// The same with pair x's cap (evictor x) chosen within ranges[x]; nullopt when a range leaves
// no cap that works. make_plan narrows the ranges when the simulated plan exceeds --memory.
std::optional<BpipePlan> plan_bpipe(const TaskGraph& graph, const std::vector<StageCost>& costs,
                                    std::span<const CapRange> ranges);
// Adds the transfer nodes, streams and edges of `plan` to `graph`.
void add_bpipe_transfers(TaskGraph& graph, const BpipePlan& plan);
// True when a node is a BPipe transfer (an evict or a load).
bool is_transfer(const TaskGraph& graph, int node);

}  // namespace pipeplan
