#include "planner/base/error.h"

#include <cstdint>

namespace pipeplan {

namespace {

FieldNamer current_namer = nullptr;

}  // namespace

FieldNamer set_field_namer(FieldNamer namer) {
  const FieldNamer previous = current_namer;
  current_namer = namer;
  return previous;
}

std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned c = byte(0);
  if (c < 0x80) return 1;
  std::size_t length = 0;
  unsigned low = 0x80, high = 0xbf;  // the allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    length = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    length = 3;
    if (c == 0xe0) low = 0xa0;
    if (c == 0xed) high = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    length = 4;
    if (c == 0xf0) low = 0x90;
    if (c == 0xf4) high = 0x8f;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (byte(1) < low || byte(1) > high) return 0;
  for (std::size_t k = 2; k < length; ++k) {
    if (byte(k) < 0x80 || byte(k) > 0xbf) return 0;
  }
  return length;
}

std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t cut = max_bytes;
  // Back to the start of the character the cut falls in (a continuation byte is 10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0U) == 0x80U)
    --cut;
  return text.substr(0, cut);
}

namespace {

// Characters that are well-formed but act on the text around them: line and paragraph
// separators (a line break in many viewers), zero-width marks, direction overrides and isolates
// (which reorder what a terminal shows), and the byte-order mark.
bool invisible_format(std::uint32_t code) {
  return code == 0x061c || (code >= 0x200b && code <= 0x200f) ||
         (code >= 0x2028 && code <= 0x202e) || (code >= 0x2060 && code <= 0x2069) ||
         code == 0xfeff || (code >= 0xfff9 && code <= 0xfffb) ||
         (code >= 0xe0000 && code <= 0xe007f);
}

std::uint32_t code_point(std::string_view text, std::size_t i, std::size_t length) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[i + k]); };
  switch (length) {
    case 2:
      return ((byte(0) & 0x1fU) << 6) | (byte(1) & 0x3fU);
    case 3:
      return ((byte(0) & 0x0fU) << 12) | ((byte(1) & 0x3fU) << 6) | (byte(2) & 0x3fU);
    default:
      return ((byte(0) & 0x07U) << 18) | ((byte(1) & 0x3fU) << 12) | ((byte(2) & 0x3fU) << 6) |
             (byte(3) & 0x3fU);
  }
}

}  // namespace

std::string one_line(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (std::size_t i = 0; i < message.size();) {
    const char c = message[i];
    const auto byte = static_cast<unsigned char>(c);
    const std::size_t length = byte >= 0x80 ? utf8_length(message, i) : 0;
    const std::uint32_t code = length > 0 ? code_point(message, i, length) : byte;
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else if (length > 0 && code >= 0xa0) {  // a C1 control (U+0080 to U+009F) is escaped
      if (invisible_format(code)) {
        constexpr char kHex[] = "0123456789ABCDEF";
        const bool wide = code > 0xffff;  // \U and eight digits beyond the first plane
        out += wide ? "\\U" : "\\u";
        for (int shift = wide ? 28 : 12; shift >= 0; shift -= 4)
          out += kHex[(code >> static_cast<unsigned>(shift)) & 0xfU];
      } else {
        out.append(message.substr(i, length));
      }
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
