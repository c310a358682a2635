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

std::string one_line(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (const char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
  }
  return out;
}

std::string field_name(std::string_view field) {
  return current_namer != nullptr ? current_namer(field) : std::string(field);
}

}  // namespace pipeplan
