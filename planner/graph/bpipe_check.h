// Validator rules for BPipe transfers (planner/plan/bpipe.h); planner/graph/validator.cpp runs them
// after its own rules, so the graph is known to be acyclic, matched and covered.
//   transfer-order:  (runs before the cycle check, for the specific message) a device's transfer
//   stream to q pairs element-wise with q's stream to it
//                    (the k-th node meets the k-th node), or the transfers deadlock;
//   transfer-use:    an evict send waits for the forward that made the stash, a load send for
//                    the evict recv that brought it, and the backward that reads the stash waits
//                    for the load recv (so a load always completes before its use);
//   memory-limit:    with transfers, static memory over a device's limit is reported as without
//                    them (check_static_memory); then memory is checked on the simulated
//                    timeline of every device at every instant. An order-based or time-free
//                    bound cannot place a transfer against the other device's compute: it would
//                    either miss real overlaps or, made conservative, reject every balanced
//                    plan. The simulation is the same one the planner reports, so what validates
//                    is what is predicted.
#pragma once

#include <optional>

#include "planner/graph/taskgraph.h"
#include "planner/graph/validator.h"

namespace pipeplan {

bool has_transfers(const TaskGraph& graph);
std::optional<Violation> check_transfer_order(const TaskGraph& graph);
std::optional<Violation> check_transfer_use(const TaskGraph& graph);
std::optional<Violation> check_transfer_memory(const TaskGraph& graph);

}  // namespace pipeplan
