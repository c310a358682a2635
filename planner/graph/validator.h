// Plan validation: the first broken rule, with the node where it broke.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "planner/graph/taskgraph.h"

namespace pipeplan {

struct Violation {
  int node = -1;
  std::string rule;     // "acyclic", "send-recv-match", "send-recv-order", "f-before-p1",
                        // "p1-before-p2", "coverage", "memory-limit", "stream", "overlap",
                        // "optimizer", "inputs", "transfer-order", "transfer-use",
                        // "schedule"
  std::string message;  // one line, names the node
};

std::optional<Violation> find_violation(const TaskGraph& graph);
// The same for a graph known to be acyclic (a simulation that ran every node proves it): the
// cycle check is skipped, every other rule checked in the same order.
std::optional<Violation> find_violation(const TaskGraph& graph, bool known_acyclic);

// load_plan, then find_violation: a plan that cannot run (a cycle, a node in no stream order, an
// unmatched send, ...) is refused as "<file>: invalid plan: <rule's message>", for the commands
// that read a plan to compare or export it rather than to validate it.
TaskGraph load_valid_plan(const std::filesystem::path& path);

// For the checks (here and planner/graph/bpipe_check.cpp): the violation of `rule` at `node` (-1
// for none), its message "<node name>: <what> (rule <rule>)"; and "12.34 GiB" (MiB, KiB or bytes
// below 0.01 GiB).
Violation make_violation(const TaskGraph& graph, int node, const std::string& rule,
                         const std::string& what);
std::string gib_text(double bytes);
// memory-limit where `device`'s parameters, gradients and optimizer state (meta.static_bytes)
// alone exceed its limit: "device 7 needs 87.37 GiB for parameters, gradients and optimizer
// state, above its limit 75.80 GiB", naming no node (no op is to blame).
std::optional<Violation> check_static_memory(const TaskGraph& graph, int device);
// Two sizes as gib_text writes them, each with its bytes beside where the two would read alike
// ("7.46 GiB (8005823488 bytes)" against "7.46 GiB (8005823487 bytes)"): a peak and the limit
// it is above.
std::pair<std::string, std::string> gib_texts_apart(double a, double b);
void validate(const TaskGraph& graph);  // throws Error with the violation's message
// The same, the message naming the file the plan came from ("p.json: invalid plan: ...").
void validate(const TaskGraph& graph, std::string_view source);

}  // namespace pipeplan
