// Plan validation: the first broken rule, with the node where it broke.
#pragma once

#include <optional>
#include <string>

#include "planner/taskgraph.h"

namespace pipeplan {

struct Violation {
  int node = -1;
  std::string rule;     // "acyclic", "send-recv-match", "send-recv-order", "f-before-p1",
                        // "p1-before-p2", "coverage", "memory-limit", "stream"
  std::string message;  // one line, names the node
};

std::optional<Violation> find_violation(const TaskGraph& graph);
void validate(const TaskGraph& graph);  // throws Error with the violation's message

}  // namespace pipeplan
