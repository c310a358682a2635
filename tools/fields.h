// The core names a bad value by its request field (planner/base/error.h's FieldError: `devices`,
// `memory_limit_bytes`, …); the CLI names the flag that set it. One table for every command.
#pragma once

#include <string>
#include <string_view>

namespace pipeplan {

// The flag for a core field ("devices" -> "--stages"); the field itself when no flag sets it.
std::string flag_for_field(std::string_view field);

}  // namespace pipeplan
