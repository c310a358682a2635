#include "planner/base/error.h"

namespace pipeplan {

namespace {

FieldNamer current_namer = nullptr;

}  // namespace

FieldNamer set_field_namer(FieldNamer namer) {
  const FieldNamer previous = current_namer;
  current_namer = namer;
  return previous;
}

std::string field_name(std::string_view field) {
  return current_namer != nullptr ? current_namer(field) : std::string(field);
}

}  // namespace pipeplan
