// The typed errors for everything pipeplan rejects. A message is a single line that names the
// offending field, file or node, so the CLI can print it as-is and exit non-zero.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace pipeplan {

// `message` with its control characters written as escapes (`\n`, `\r`, `\t`, `\x01`), and
// every byte that is no well-formed UTF-8 as `\xff`: an error that quotes its input (a JSON
// string "a\nb", a CSV cell) stays one line of text.
std::string one_line(std::string_view message);
// The length of the well-formed UTF-8 sequence at `i` of `text` (1 to 4), 0 if the bytes there
// are none (a stray continuation byte, a truncated or overlong sequence, a surrogate, above
// U+10FFFF).
std::size_t utf8_length(std::string_view text, std::size_t i);
// The first `max_bytes` of `text` or fewer, never ending inside a UTF-8 character: where a
// message cuts what it quotes ("..." after it), no half character is left to escape.
std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes);

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(one_line(message)) {}
};

// How a field appears in messages. The core names a field as its request struct does
// (`microbatches`, `devices`, `memory_limit_bytes`); a front end that sets fields some other way
// (the CLI: tools/fields.h maps `devices` to `--stages`) installs its own namer, so that messages
// the core composes from several errors (a search's infeasible candidates) read in its terms.
using FieldNamer = std::string (*)(std::string_view field);
// Installs `namer` (nullptr: the field as it is) and returns the previous one. Not synchronised:
// install before planning starts.
FieldNamer set_field_namer(FieldNamer namer);
std::string field_name(std::string_view field);

// A bad value of one request field: what() is "<field_name(field)>: <detail>".
class FieldError : public Error {
 public:
  FieldError(std::string field, std::string detail)
      : Error(field_name(field) + ": " + detail),
        field_(std::move(field)),
        detail_(std::move(detail)) {}
  const std::string& field() const { return field_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string field_;
  std::string detail_;
};

// A broken invariant of pipeplan's own (a generated schedule that stalls, a generated plan that
// fails validation): never the input's fault. what() starts with "internal: "; the CLI prints it
// as "pipeplan: internal error: ..." and exits 3; the fuzz targets (tests/fuzz) treat one as a
// finding.
class InternalError : public Error {
 public:
  static constexpr std::string_view kPrefix = "internal: ";
  explicit InternalError(const std::string& message) : Error(std::string(kPrefix) + message) {}
};

}  // namespace pipeplan
