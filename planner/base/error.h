// One typed error for everything the planner rejects. Its message is a single line that names
// the offending field, file or node, so the CLI can print it as-is and exit non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace pipeplan {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace pipeplan
