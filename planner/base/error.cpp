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

namespace {

// The length of the well-formed UTF-8 sequence at `i` of a character from U+00A0 up (not a C1
// control), or 0.
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  const auto at = [&](std::size_t k) {
    return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0U;
  };
  const unsigned lead = at(0);
  const auto continuation = [&](std::size_t k, unsigned low = 0x80, unsigned high = 0xbf) {
    return at(k) >= low && at(k) <= high;
  };
  if (lead >= 0xc2 && lead <= 0xdf) {
    return continuation(1) && !(lead == 0xc2 && at(1) < 0xa0) ? 2 : 0;
  }
  if (lead >= 0xe0 && lead <= 0xef) {
    const unsigned low = lead == 0xe0 ? 0xa0 : 0x80;
    const unsigned high = lead == 0xed ? 0x9f : 0xbf;
    return continuation(1, low, high) && continuation(2) ? 3 : 0;
  }
  if (lead >= 0xf0 && lead <= 0xf4) {
    const unsigned low = lead == 0xf0 ? 0x90 : 0x80;
    const unsigned high = lead == 0xf4 ? 0x8f : 0xbf;
    return continuation(1, low, high) && continuation(2) && continuation(3) ? 4 : 0;
  }
  return 0;
}

}  // namespace

std::string one_line(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (std::size_t i = 0; i < message.size();) {
    const char c = message[i];
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else if (const std::size_t length = byte >= 0x80 ? utf8_sequence(message, i) : 0;
               length > 0) {
      out.append(message.substr(i, length));
      i += length;
      continue;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      // A control character, or a byte that is no well-formed UTF-8: a terminal would take the
      // one for a command and show the other as garbage.
      constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
    ++i;
  }
  return out;
}

std::string field_name(std::string_view field) {
  return current_namer != nullptr ? current_namer(field) : std::string(field);
}

}  // namespace pipeplan
