// File helpers shared by every reader and writer: JSON parsing with one-line errors naming the
// file, and atomic writes (temporary file + rename) so nothing is left half-written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace pipeplan {

// Reads a whole input file. Only a regular file is read (a directory, FIFO, device or socket is
// refused without blocking on it); limits::kMaxFileBytes is checked before reading and again
// while reading; a NUL byte is refused with its offset (every format pipeplan reads is text).
// Every failure is one Error line naming the file. Inside a FileGuard the file is remembered as
// an input, so that no output of the same command replaces it.
// The path "-" reads standard input instead, named "stdin" in errors: a pipe, a socket or a
// redirected file (a terminal, device or directory is refused), once per command.
std::string read_text_file(const std::filesystem::path& path);
// How errors name an input: "stdin" for "-", else the path.
std::string input_name(const std::filesystem::path& path);
// read_text_file, then parse_json_text.
nlohmann::json read_json_file(const std::filesystem::path& path);
// Parses JSON text; every failure is one Error line naming `source`: malformed JSON with its
// byte, arrays and objects nested deeper than limits::kMaxJsonDepth (checked before parsing, so
// nothing that walks the value recurses without bound) with its byte, and a number outside the
// range of a double (nlohmann's out_of_range.406, e.g. 1e999) with its field, line and byte, and
// a key met twice in one object ("field 'layers.block.1.forward_us' appears twice in one
// object"), which a plain parse would resolve silently to the last.
nlohmann::json parse_json_text(std::string_view text, std::string_view source);
// JSON text whose large integer arrays are read straight into vectors: parse_json_columns.
struct JsonColumns {
  nlohmann::json json;  // the document without the arrays read as columns
  // Each column read, by its name ("nodes.stream", "streams[3].order"): the array's integers in
  // order.
  std::unordered_map<std::string, std::vector<std::int64_t>> columns;
  // The column at `path`, or nullptr when the document has none there.
  [[nodiscard]] const std::vector<std::int64_t>* column(const std::string& path) const;
};
// parse_json_text for documents with arrays of millions of integers: an array whose path (the
// keys from the top-level object down, joined by '.': "data_edges", "nodes.stream") is one of
// `paths` is read into JsonColumns::columns, not into the JSON value (16 bytes per element there,
// 8 here, and no per-element allocation). A path through an array's elements writes "[]" for
// them ("streams[].order"): each such array is a column of its own, named with the element's
// index ("streams[3].order"). Such an array must hold integers in int64's range only; anything
// else in it, or a second array at the same name, is one Error line naming it. The same errors
// as parse_json_text otherwise.
JsonColumns parse_json_columns(std::string_view text, std::string_view source,
                               const std::vector<std::string>& paths);
// The same, refusing as soon as it is met (before its value is read: a key of junk costs nothing)
// a key that `known` does not list for its object: `known` maps an object's path ("" the
// top-level object, "nodes") to its keys; objects it does not name take any. The error is
// require_known_fields' ("field 'nodes.x' is not a field of <what>").
struct KnownKeys {
  std::string path;
  std::vector<std::string_view> keys;
  std::string_view what;
};
// The keys are refused only in a file whose top-level "format" reads `format` (a file of another
// kind is left to the caller's format check), wherever that key is: once it has been read, as
// met; before, the first unknown key is kept and refused when "format" is read.
JsonColumns parse_json_columns(std::string_view text, std::string_view source,
                               const std::vector<std::string>& paths,
                               const std::vector<KnownKeys>& known, std::string_view format);
// parse_json_text for a document whose top-level array `key` holds very many small values (a
// trace's "traceEvents"): each element goes to `element` (value, index) as soon as it is read and
// is then dropped, so that the document is never whole in memory; the value returned holds the
// rest, with `key` an empty array. An error `element` throws ends the parse. The same errors as
// parse_json_text otherwise.
using JsonElementSink = std::function<void(nlohmann::json&&, std::size_t)>;
nlohmann::json parse_json_streaming(std::string_view text, std::string_view source,
                                    const std::string& key, const JsonElementSink& element);
// A JSON value as compact text, cut to `max_chars` ("..." marks a cut), for error messages.
std::string json_excerpt(const nlohmann::json& value, std::size_t max_chars = 40);

// Control characters in names and labels: C0 (U+0000 to U+001F), DEL (U+007F) and C1 (U+0080 to
// U+009F, two bytes in UTF-8), which a terminal takes as commands and Graphviz as syntax.
// The byte offset of the first in `text` that `allowed` does not list ("\n" for multi-line
// text), or npos.
std::size_t control_character_at(std::string_view text, std::string_view allowed = {});
// "" when `text` holds none, else what is wrong, for "<field> ...":
// "holds control character U+001B at byte 4 (names and labels are printable text)".
std::string control_character_problem(std::string_view text, std::string_view allowed = {});
// Refuses a string field holding one: "<context>: field '<field>' holds control character ...".
void require_printable(std::string_view text, std::string_view field, std::string_view context);
// `text` with every control character, and every byte that is no well-formed UTF-8, replaced
// by '?': for a name made from something else (a file name).
std::string printable_text(std::string_view text);
// `value` as JSON text (`indent` as nlohmann's dump: -1 compact), a string's bytes that are no
// UTF-8 written as U+FFFD rather than thrown at: what every written document and report uses.
std::string json_text(const nlohmann::json& value, int indent = -1);

// The files one command writes, written all or none. add() checks a target at once: it must be
// a regular file or not exist (a directory, device, FIFO or socket is refused, and so is a name
// ending in '/'), in a folder that exists and takes new files, and must not be a file this
// command read (by device and inode, links resolved) nor another output of it.
// commit() writes each file to a temporary created exclusively (O_EXCL, O_NOFOLLOW) beside its
// target and syncs it to disk, and only when every one is written renames them over their targets
// (their folders synced after): a failure leaves
// every target as it was and no temporary behind. A rename that fails (an immutable target, say)
// undoes the ones before it: each file replaced is kept under a second name (a hard link) until
// every rename has succeeded, and a target that cannot be kept so is renamed first (where two
// or more cannot be, the first to fail may follow one already replaced). A target that is a
// symbolic link is replaced by the file, never written through. Two commands writing one file at
// once: the file is the last successful one's, never a failed one's.
class OutputFiles {
 public:
  void add(const std::filesystem::path& path, std::string content);
  // The same without a copy: `content` must outlive commit().
  void add_view(const std::filesystem::path& path, std::string_view content);
  // Content written piece by piece as commit() produces it: `produce` is called once, in
  // commit(), with a function that appends a piece to the temporary file (so a large output is
  // never whole in memory). An exception from `produce` leaves every target as it was.
  using Writer = std::function<void(std::string_view)>;
  void add_stream(const std::filesystem::path& path, std::function<void(const Writer&)> produce);
  void commit();

 private:
  struct Pending {
    std::filesystem::path path;
    std::string owned;
    std::string_view borrowed;
    bool is_borrowed = false;
    std::function<void(const Writer&)> produce;  // set: streamed, `owned`/`borrowed` unused
    [[nodiscard]] std::string_view text() const { return is_borrowed ? borrowed : owned; }
  };
  void check_new(const std::filesystem::path& path) const;
  std::vector<Pending> pending_;
};
// The checks OutputFiles::add makes, alone: a command whose work is long checks its outputs before
// starting it, so that a bad target fails at once rather than after the work.
void check_output(const std::filesystem::path& path);
// One output: OutputFiles with a single file.
void write_file_atomic(const std::filesystem::path& path, std::string_view content);
// Unlinks the temporaries of outputs being written now, as SIGINT and SIGTERM do: for a process
// about to end without unwinding (std::_Exit). Async-signal-safe.
void remove_live_temporaries() noexcept;
// While one is alive, SIGINT, SIGTERM and SIGHUP (where pipeplan's handler has them) are held
// back, on whichever thread they arrive, and acted on when the last one ends: OutputFiles::commit
// holds one while it renames its outputs into place, so that they are all new or all old and no
// kept copy of a replaced file is left behind. Nests.
class SignalsHeld {
 public:
  SignalsHeld();
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;
  ~SignalsHeld();
};

// While one is alive (the command line holds one for each command), every file read through
// read_text_file and every file written is remembered, and an output that is one of them is
// refused: `plan --profile p.json -o p.json` fails instead of destroying its input. Nests.
class FileGuard {
 public:
  FileGuard();
  ~FileGuard();
  FileGuard(const FileGuard&) = delete;
  FileGuard& operator=(const FileGuard&) = delete;
};

// A JSON value as an int64: empty when it is not an integer or is an unsigned one past int64's
// range (which would otherwise read as a negative number). The one reading of a JSON integer
// that every field and array element goes through.
std::optional<std::int64_t> int64_value(const nlohmann::json& value);

// Field access with errors that name the field and the source, e.g.
// "plan.json: field 'nodes[3].duration_us' must be a number".
const nlohmann::json& require_field(const nlohmann::json& object, std::string_view field,
                                    std::string_view context);
double require_number(const nlohmann::json& object, std::string_view field,
                      std::string_view context);
double require_nonnegative(const nlohmann::json& object, std::string_view field,
                           std::string_view context);
std::int64_t require_integer(const nlohmann::json& object, std::string_view field,
                             std::string_view context);
std::string require_string(const nlohmann::json& object, std::string_view field,
                           std::string_view context);
// Refuses a key of `object` that `known` does not list, where a misspelt optional field would
// otherwise read as its default: "<context>: field '<path>.<key>' is not a field of <what>"
// and, for a near miss, "(did you mean '<field>'?)". `path` is the object's place ("" for the
// root).
void require_known_fields(const nlohmann::json& object,
                          std::initializer_list<std::string_view> known, std::string_view context,
                          std::string_view path, std::string_view what);
void require_known_fields(const nlohmann::json& object, std::span<const std::string_view> known,
                          std::string_view context, std::string_view path, std::string_view what);
// Checks {"format": expected_format, "version": expected_version}.
void require_format(const nlohmann::json& json, std::string_view expected_format,
                    int expected_version, std::string_view source);
// The same for a reader of versions oldest..newest; returns the file's version.
int require_format(const nlohmann::json& json, std::string_view expected_format, int oldest_version,
                   int newest_version, std::string_view source);

}  // namespace pipeplan
