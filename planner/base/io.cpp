#include "planner/base/io.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "planner/base/error.h"
#include "planner/base/limits.h"

namespace pipeplan {

namespace {

bool is_number_char(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

// Whether JSON's number grammar lets `token` go on with `c`: the lexer would then have read a
// longer number (or failed), so `token` does not end before `c`. What ends it may still be
// malformed ("1e999.5"): the parser converts the number before it sees the next token.
bool continues_number(std::string_view token, char c) {
  const bool exponent = token.find_first_of("eE") != std::string_view::npos;
  const bool fraction = token.find('.') != std::string_view::npos;
  if (c >= '0' && c <= '9') return true;
  if (c == 'e' || c == 'E') return !exponent;
  if (c == '.') return !exponent && !fraction;
  return false;
}

// Calls visit(i) for each byte i of JSON `text` outside strings (a string's quotes and content
// are skipped) until it returns true; returns that byte, or npos.
template <typename Visit>
std::size_t scan_outside_strings(std::string_view text, Visit&& visit) {
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (visit(i)) {
      return i;
    }
  }
  return std::string_view::npos;
}

// Where `token` first stands as a number in `text` (outside strings, not part of a longer
// number); npos when it does not. The text before the number that overflowed is valid JSON
// (nlohmann stops at the first error), so the first such place is the one.
std::size_t find_number(std::string_view text, std::string_view token) {
  return scan_outside_strings(text, [&](std::size_t i) {
    return text.compare(i, token.size(), token) == 0 && (i == 0 || !is_number_char(text[i - 1])) &&
           (i + token.size() == text.size() || !continues_number(token, text[i + token.size()]));
  });
}

// The object key just before byte `at` ("key": <at>), or "" when the value is not one. A number
// inside an array of numbers is named by the array's key ("key": [1, 2, <at>).
std::string key_before(std::string_view text, std::size_t at) {
  std::size_t i = at;
  while (i > 0 && (is_number_char(text[i - 1]) || text[i - 1] == ',' || text[i - 1] == ' ' ||
                   text[i - 1] == '\t' || text[i - 1] == '\n' || text[i - 1] == '\r'))
    --i;
  if (i == 0 || text[i - 1] != '[')
    i = at;  // not in an array of numbers
  else
    --i;
  while (i > 0 &&
         (text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n' || text[i - 1] == '\r'))
    --i;
  if (i == 0 || text[i - 1] != ':') return "";
  --i;
  while (i > 0 &&
         (text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n' || text[i - 1] == '\r'))
    --i;
  if (i < 2 || text[i - 1] != '"') return "";
  const std::size_t end = i - 1;
  const std::size_t open = text.rfind('"', end - 1);
  // An escaped quote inside the key: where the key starts is not worth a parser here.
  if (open == std::string_view::npos || (open > 0 && text[open - 1] == '\\')) return "";
  return std::string(text.substr(open + 1, end - open - 1));
}

// A number that overflows a double (nlohmann's out_of_range.406): one line naming the
// number, its field and where it is (line, 1-based byte as in parse errors).
[[noreturn]] void number_out_of_range(std::string_view text, std::string_view source,
                                      const std::string& what) {
  // what(): "[json.exception.out_of_range.406] number overflow parsing '1e999'"
  std::string token;
  const std::size_t quote = what.find('\'');
  if (quote != std::string::npos && what.size() > quote + 1 && what.back() == '\'') {
    token = what.substr(quote + 1, what.size() - quote - 2);
  }
  std::string message = std::string(source) + ": ";
  const std::size_t at = token.empty() ? std::string_view::npos : find_number(text, token);
  const std::string key = at == std::string_view::npos ? "" : key_before(text, at);
  if (!key.empty()) message += "field '" + std::string(utf8_prefix(key, 80)) + "' ";
  if (token.size() > 40) token = token.substr(0, 40) + "...";
  message += "number " + (token.empty() ? std::string("") : "'" + token + "' ") +
             "is outside the range of a double";
  if (at != std::string_view::npos) {
    const auto line =
        1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
    message += " (line " + std::to_string(line) + ", byte " + std::to_string(at + 1) + ")";
  }
  throw Error(message);
}

// Refuses arrays and objects nested deeper than limits::kMaxJsonDepth before the parser sees
// them: nlohmann parses any depth, but printing, comparing or copying such a value recurses once
// per level. Brackets inside strings do not count; malformed text is left to the parser.
void check_json_depth(std::string_view text, std::string_view source) {
  int depth = 0;
  scan_outside_strings(text, [&](std::size_t i) {
    const char c = text[i];
    if (c == '[' || c == '{') {
      if (++depth > limits::kMaxJsonDepth) {
        throw Error(std::string(source) + ": " +
                    limits::above_limit("JSON nested " + std::to_string(depth) + " deep",
                                        limits::kMaxJsonDepth, "levels") +
                    " at byte " + std::to_string(i + 1));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
    return false;
  });
}

}  // namespace

std::string json_excerpt(const nlohmann::json& value, std::size_t max_chars) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > max_chars) text = std::string(utf8_prefix(text, max_chars)) + "...";
  return text;
}

namespace {

// The length of the control character at `i` of `text` (1, or 2 for a C1 in UTF-8), 0 if none.
std::size_t control_length(std::string_view text, std::size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  if (c < 0x20 || c == 0x7f) return 1;
  if (c == 0xc2 && i + 1 < text.size()) {
    const auto next = static_cast<unsigned char>(text[i + 1]);
    if (next >= 0x80 && next <= 0x9f) return 2;
  }
  return 0;
}

}  // namespace

std::size_t control_character_at(std::string_view text, std::string_view allowed) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (control_length(text, i) > 0 && allowed.find(text[i]) == std::string_view::npos) return i;
  }
  return std::string_view::npos;
}

std::string control_character_problem(std::string_view text, std::string_view allowed) {
  const std::size_t at = control_character_at(text, allowed);
  if (at == std::string_view::npos) return "";
  const unsigned code = control_length(text, at) == 2 ? static_cast<unsigned char>(text[at + 1])
                                                      : static_cast<unsigned char>(text[at]);
  char name[8];
  std::snprintf(name, sizeof name, "U+%04X", code);
  return "holds control character " + std::string(name) + " at byte " + std::to_string(at) +
         " (names and labels are printable text)";
}

void require_printable(std::string_view text, std::string_view field, std::string_view context) {
  if (const std::string problem = control_character_problem(text); !problem.empty()) {
    throw Error(std::string(context) + ": field '" + std::string(field) + "' " + problem);
  }
}

std::string printable_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t control = control_length(text, i);
    const std::size_t valid = control > 0 ? 0 : utf8_length(text, i);
    if (valid == 0) {
      out += '?';
      i += std::max<std::size_t>(control, 1);
    } else {
      out.append(text.substr(i, valid));
      i += valid;
    }
  }
  return out;
}

std::string json_text(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// Edits (insertions, deletions, substitutions) from a to b: a typo is one or two.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "<context>: field '<path>.<key>' is not a field of <what>", with the nearest of `known` at most
// two edits away: require_known_fields' error, and the streaming parser's.
[[noreturn]] void refuse_unknown_field(std::string_view key,
                                       std::span<const std::string_view> known,
                                       std::string_view context, std::string_view path,
                                       std::string_view what) {
  std::string message =
      std::string(context) + ": field '" +
      (path.empty() ? std::string(key) : std::string(path) + "." + std::string(key)) +
      "' is not a field of " + std::string(what);
  std::string_view nearest;
  std::size_t best = 3;  // at most two edits away
  for (const std::string_view field : known) {
    if (const std::size_t d = edit_distance(key, field); d < best) {
      best = d;
      nearest = field;
    }
  }
  if (!nearest.empty()) message += " (did you mean '" + std::string(nearest) + "'?)";
  throw Error(message);
}

}  // namespace

namespace {

// nlohmann's SAX events turned into a document as its own parser builds it, except that the
// arrays at the requested paths go into integer columns. A path is the keys from the top-level
// object down ("data_edges", "nodes.stream").
class ColumnSax {
 public:
  ColumnSax(std::string_view source, const std::vector<std::string>& paths, JsonColumns& out,
            const std::vector<KnownKeys>& known, std::string_view format)
      : source_(source), paths_(paths), out_(out), known_(known), format_(format) {}
  // Each element of the array at `path` goes to `element` once read, and is then dropped.
  void stream_elements(std::string path, const JsonElementSink* element) {
    stream_path_ = std::move(path);
    element_sink_ = element;
  }

  bool null() { return value(nullptr); }
  bool boolean(bool v) { return value(v); }
  bool number_integer(std::int64_t v) {
    if (column_ == nullptr) return value(v);
    column_->push_back(v);
    return true;
  }
  bool number_unsigned(std::uint64_t v) {
    if (column_ == nullptr) return value(v);
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      refuse("holds an integer outside the range of int64");
    }
    column_->push_back(static_cast<std::int64_t>(v));
    return true;
  }
  bool number_float(double v, const std::string& text) {
    if (column_ != nullptr) {
      // Digits alone that nlohmann reads as a double are an integer beyond uint64's range.
      const bool digits =
          !text.empty() && text.find_first_not_of("-0123456789") == std::string::npos;
      refuse(digits ? "holds an integer outside the range of int64" : "must hold integers only");
    }
    return value(v);
  }
  bool string(std::string& v) {
    if (column_ != nullptr) refuse("must hold integers only");
    if (!known_.empty() && stack_.size() == 1 && key_ == "format" && v == format_) {
      checking_ = true;
      // A key met before "format" said what the file is: refused now that it has.
      if (pending_.known != nullptr)
        refuse_unknown_field(pending_.key, pending_.known->keys, source_, pending_.parent,
                             pending_.known->what);
    }
    return value(std::move(v));
  }
  bool binary(nlohmann::json::binary_t& /*v*/) { return false; }  // not in JSON text
  bool start_object(std::size_t /*size*/) {
    if (column_ != nullptr) refuse("must hold integers only");
    return open(nlohmann::json::object());
  }
  bool key(std::string& k) {
    // A key met twice in one object, which a DOM parser resolves silently (the last wins): a
    // profile with two forward_us would plan with whichever came last. (A column's key is in
    // no object: try_emplace below finds it twice.)
    if (!stack_.empty() && stack_.back().value->is_object() &&
        (stack_.back().value->contains(k) ||
         (!out_.columns.empty() && out_.columns.contains(column_key(k).second))))
      throw Error(std::string(source_) + ": field '" + path_to(k) +
                  "' appears twice in one object");
    // Before "format" has said what the file is, the first unknown key is kept, not refused:
    // a file of another kind is the caller's to name, and one of this kind is refused when its
    // "format" is met, wherever that is.
    if (!known_.empty() && (checking_ || pending_.known == nullptr) && !stack_.empty() &&
        stack_.back().value->is_object()) {
      const std::string path = path_to(k);
      const std::string parent =
          path.size() > k.size() ? path.substr(0, path.size() - k.size() - 1) : "";
      for (const KnownKeys& object : known_) {
        if (object.path != parent ||
            std::find(object.keys.begin(), object.keys.end(), k) != object.keys.end())
          continue;
        if (checking_) refuse_unknown_field(k, object.keys, source_, parent, object.what);
        pending_ = {k, parent, &object};
        break;
      }
    }
    key_ = k;
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t /*size*/) {
    if (column_ != nullptr) refuse("must hold integers only");
    if (const std::string path = column_path(); !path.empty()) {
      auto [it, added] = out_.columns.try_emplace(path);
      if (!added) {
        throw Error(std::string(source_) + ": field '" + path + "' appears twice");
      }
      column_ = &it->second;
      column_name_ = path;
      return true;
    }
    if (element_sink_ != nullptr && streamed_ == nullptr && !stream_path_.empty() &&
        !stack_.empty() && stack_.back().value->is_object() && stack_.size() == 1 &&
        key_ == stream_path_) {
      open(nlohmann::json::array());
      streamed_ = stack_.back().value;  // stays empty: its elements go to the sink
      streamed_depth_ = stack_.size();
      return true;
    }
    return open(nlohmann::json::array());
  }
  bool end_array() {
    if (column_ != nullptr) {
      column_ = nullptr;
      return true;
    }
    return close();
  }
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::json::exception& e) {
    error_byte_ = position;
    error_id_ = e.id;
    error_what_ = e.what();
    return false;
  }

  std::size_t error_byte() const { return error_byte_; }
  int error_id() const { return error_id_; }
  const std::string& error_what() const { return error_what_; }

 private:
  struct Frame {
    nlohmann::json* value;
    std::string key;  // this container's key in its parent object; "" under an array
  };

  [[noreturn]] void refuse(const std::string& what) const {
    throw Error(std::string(source_) + ": field '" + column_name_ + "' " + what);
  }

  // Where the next value goes: the root, the open array's end, the open object's key_, or the
  // element being read of the streamed array.
  nlohmann::json& slot() {
    if (stack_.empty()) return out_.json;
    nlohmann::json& parent = *stack_.back().value;
    if (&parent == streamed_) return element_;
    if (parent.is_array()) return parent.emplace_back();
    return parent[key_];
  }
  template <typename T>
  bool value(T&& v) {
    slot() = nlohmann::json(std::forward<T>(v));
    element_done();
    return true;
  }
  // A whole element of the streamed array has been read: hand it over.
  void element_done() {
    if (streamed_ == nullptr || stack_.size() != streamed_depth_) return;
    (*element_sink_)(std::move(element_), elements_++);
    element_ = nullptr;
  }
  bool open(nlohmann::json container) {
    const bool in_object = !stack_.empty() && stack_.back().value->is_object();
    std::string key = in_object ? key_ : std::string();
    nlohmann::json& at = slot();
    at = std::move(container);
    stack_.push_back({&at, std::move(key)});
    return true;
  }
  bool close() {
    if (stack_.back().value == streamed_) streamed_ = nullptr;  // the streamed array ends
    stack_.pop_back();
    element_done();
    return true;
  }
  // The path of key `k` of the open object, as the readers name fields ("layers.block.1.x";
  // "[]" for an array's element).
  std::string path_to(const std::string& k) const {
    std::string path;
    for (std::size_t i = 1; i < stack_.size(); ++i) {
      if (stack_[i - 1].value->is_array()) {
        path += "[]";
      } else {
        path += (path.empty() ? "" : ".") + stack_[i].key;
      }
    }
    return path + (path.empty() ? "" : ".") + k;
  }
  // Key `k` of the open object as a column's path ("streams[].order") and as the column's name
  // ("streams[3].order": each element of an array counted from 0).
  std::pair<std::string, std::string> column_key(const std::string& k) const {
    std::string path, name;
    for (std::size_t i = 1; i < stack_.size(); ++i) {
      const nlohmann::json& parent = *stack_[i - 1].value;
      if (parent.is_array()) {
        const std::size_t index = &parent == streamed_ ? elements_ : parent.size() - 1;
        path += "[]";
        name += "[" + std::to_string(index) + "]";
      } else {
        const std::string step = (path.empty() ? "" : ".") + stack_[i].key;
        path += step;
        name += step;
      }
    }
    const std::string step = (path.empty() ? "" : ".") + k;
    return {path + step, name + step};
  }
  // The name of an array about to open when its path is one of the requested columns, else "".
  std::string column_path() const {
    if (stack_.empty() || !stack_.back().value->is_object()) return "";
    auto [path, name] = column_key(key_);
    return std::find(paths_.begin(), paths_.end(), path) == paths_.end() ? "" : name;
  }

  std::string_view source_;
  const std::vector<std::string>& paths_;
  JsonColumns& out_;
  const std::vector<KnownKeys>& known_;
  std::string_view format_;
  bool checking_ = false;  // the top-level "format" has read format_
  // The first key `known_` does not list, met while checking_ was still false.
  struct Unknown {
    std::string key, parent;
    const KnownKeys* known = nullptr;
  } pending_;
  std::vector<Frame> stack_;
  std::string key_;
  std::vector<std::int64_t>* column_ = nullptr;
  std::string column_name_;
  std::string stream_path_;
  const JsonElementSink* element_sink_ = nullptr;
  nlohmann::json* streamed_ = nullptr;  // the streamed array while it is open
  std::size_t streamed_depth_ = 0;      // stack_.size() with it on top
  nlohmann::json element_;              // its element being read
  std::size_t elements_ = 0;
  std::size_t error_byte_ = 0;
  int error_id_ = 0;
  std::string error_what_;
};

}  // namespace

const std::vector<std::int64_t>* JsonColumns::column(const std::string& path) const {
  const auto it = columns.find(path);
  return it == columns.end() ? nullptr : &it->second;
}

JsonColumns parse_json_columns(std::string_view text, std::string_view source,
                               const std::vector<std::string>& paths) {
  return parse_json_columns(text, source, paths, {}, {});
}

JsonColumns parse_json_columns(std::string_view text, std::string_view source,
                               const std::vector<std::string>& paths,
                               const std::vector<KnownKeys>& known, std::string_view format) {
  check_json_depth(text, source);
  JsonColumns out;
  ColumnSax sax(source, paths, out, known, format);
  if (!nlohmann::json::sax_parse(text, &sax)) {
    if (sax.error_id() == 406) number_out_of_range(text, source, sax.error_what());
    throw Error(std::string(source) + ": malformed JSON at byte " +
                std::to_string(sax.error_byte()));
  }
  return out;
}

nlohmann::json parse_json_streaming(std::string_view text, std::string_view source,
                                    const std::string& key, const JsonElementSink& element) {
  check_json_depth(text, source);
  JsonColumns out;
  // ColumnSax keeps references to its lists: they must outlive it (a temporary would not).
  const std::vector<std::string> no_columns;
  const std::vector<KnownKeys> no_checks;
  ColumnSax sax(source, no_columns, out, no_checks, {});
  sax.stream_elements(key, &element);
  if (!nlohmann::json::sax_parse(text, &sax)) {
    if (sax.error_id() == 406) number_out_of_range(text, source, sax.error_what());
    throw Error(std::string(source) + ": malformed JSON at byte " +
                std::to_string(sax.error_byte()));
  }
  return std::move(out.json);
}

nlohmann::json parse_json_text(std::string_view text, std::string_view source) {
  // nlohmann's own DOM parser, but for keys met twice in one object, which it takes silently.
  return parse_json_columns(text, source, {}).json;
}

const nlohmann::json& require_field(const nlohmann::json& object, std::string_view field,
                                    std::string_view context) {
  if (!object.is_object()) throw Error(std::string(context) + ": expected an object");
  auto it = object.find(field);
  if (it == object.end()) {
    throw Error(std::string(context) + ": missing field '" + std::string(field) + "'");
  }
  return *it;
}

double require_number(const nlohmann::json& object, std::string_view field,
                      std::string_view context) {
  const auto& value = require_field(object, field, context);
  if (!value.is_number() || !std::isfinite(value.get<double>())) {
    throw Error(std::string(context) + ": field '" + std::string(field) + "' must be a number");
  }
  return value.get<double>();
}

double require_nonnegative(const nlohmann::json& object, std::string_view field,
                           std::string_view context) {
  const double value = require_number(object, field, context);
  if (value < 0) {
    throw Error(std::string(context) + ": field '" + std::string(field) + "' must not be negative");
  }
  return value;
}

std::optional<std::int64_t> int64_value(const nlohmann::json& value) {
  if (!value.is_number_integer()) return std::nullopt;
  if (value.is_number_unsigned() &&
      value.get<std::uint64_t>() >
          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return std::nullopt;
  }
  return value.get<std::int64_t>();
}

std::int64_t require_integer(const nlohmann::json& object, std::string_view field,
                             std::string_view context) {
  const auto& value = require_field(object, field, context);
  if (value.is_number_float()) {
    // An integer too large for uint64 (99999999999999999999) reads as a double: out of range,
    // not "not an integer".
    constexpr double kBeyond = 9223372036854775808.0;  // 2^63
    const double x = value.get<double>();
    if (x >= kBeyond || x < -kBeyond) {
      throw Error(std::string(context) + ": field '" + std::string(field) + "' is " +
                  json_excerpt(value) + ", " +
                  (x > 0 ? "above the largest" : "below the smallest") + " integer read (" +
                  std::to_string(x > 0 ? std::numeric_limits<std::int64_t>::max()
                                       : std::numeric_limits<std::int64_t>::min()) +
                  ")");
    }
  }
  if (!value.is_number_integer()) {
    throw Error(std::string(context) + ": field '" + std::string(field) + "' must be an integer");
  }
  const std::optional<std::int64_t> v = int64_value(value);
  if (!v) {
    throw Error(std::string(context) + ": field '" + std::string(field) + "' is " +
                std::to_string(value.get<std::uint64_t>()) + ", above the largest integer read (" +
                std::to_string(std::numeric_limits<std::int64_t>::max()) + ")");
  }
  return *v;
}

std::string require_string(const nlohmann::json& object, std::string_view field,
                           std::string_view context) {
  const auto& value = require_field(object, field, context);
  if (!value.is_string()) {
    throw Error(std::string(context) + ": field '" + std::string(field) + "' must be a string");
  }
  return value.get<std::string>();
}

void require_known_fields(const nlohmann::json& object,
                          std::initializer_list<std::string_view> known, std::string_view context,
                          std::string_view path, std::string_view what) {
  require_known_fields(object, std::span(known.begin(), known.size()), context, path, what);
}

void require_known_fields(const nlohmann::json& object, std::span<const std::string_view> known,
                          std::string_view context, std::string_view path, std::string_view what) {
  if (!object.is_object()) return;  // the caller's own check names a non-object
  for (const auto& item : object.items()) {
    if (std::find(known.begin(), known.end(), item.key()) == known.end())
      refuse_unknown_field(item.key(), known, context, path, what);
  }
}

void require_format(const nlohmann::json& json, std::string_view expected_format,
                    int expected_version, std::string_view source) {
  require_format(json, expected_format, expected_version, expected_version, source);
}

int require_format(const nlohmann::json& json, std::string_view expected_format, int oldest_version,
                   int newest_version, std::string_view source) {
  if (json.is_object() && !json.contains("format") && json.contains("traceEvents")) {
    // The usual mix-up: a measured or predicted trace given where a plan or profile goes.
    throw Error(std::string(source) + ": a trace (it has 'traceEvents' and no 'format'), not a '" +
                std::string(expected_format) + "' file");
  }
  const std::string format = require_string(json, "format", source);
  if (format != expected_format) {
    throw Error(std::string(source) + ": field 'format' is '" + format + "', expected '" +
                std::string(expected_format) + "'");
  }
  const std::int64_t version = require_integer(json, "version", source);
  if (version < oldest_version || version > newest_version) {
    const std::string readable = oldest_version == newest_version
                                     ? "version " + std::to_string(newest_version)
                                     : "versions " + std::to_string(oldest_version) + " to " +
                                           std::to_string(newest_version);
    throw Error(std::string(source) + ": field 'version' is " + std::to_string(version) +
                ", this pipeplan reads " + readable);
  }
  return static_cast<int>(version);
}

}  // namespace pipeplan
