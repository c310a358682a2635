#include "schedules/torch_csv_cells.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "planner/base/error.h"
#include "planner/base/limits.h"

namespace pipeplan::torch_csv {

namespace {

// PyTorch's _ComputationType names (str(_ComputationType)). Compute types become actions; the
// others have no task-graph node of their own: pipeplan derives every send and receive when it
// lowers the schedule, and FSDP's unshard/reshard and the gradient reduction after the last
// backward are outside the pipeline schedule (docs/reference/torch-csv.md).
constexpr std::string_view kCompute = "FIWB";
constexpr std::array<std::string_view, 11> kSkipped = {
    "SEND_F",      "RECV_F",      "SEND_B",      "RECV_B",      "UNSHARD",    "RESHARD",
    "REDUCE_GRAD", "WAIT_SEND_F", "WAIT_RECV_F", "WAIT_SEND_B", "WAIT_RECV_B"};
constexpr std::string_view kOverlap = "OVERLAP_F_B";
constexpr std::string_view kTypes =
    "F, I, W, B, OVERLAP_F_B; skipped: SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD, "
    "REDUCE_GRAD, WAIT_*";

// The listed types, and any wait torch adds (WAIT_REDUCE_GRAD after each REDUCE_GRAD in torch
// 2.15's default dumps, WAIT_SEND_F, ...): "WAIT_" and a name of capitals and underscores.
bool is_skipped(std::string_view type) {
  if (std::find(kSkipped.begin(), kSkipped.end(), type) != kSkipped.end()) return true;
  constexpr std::string_view kWait = "WAIT_";
  return type.size() > kWait.size() && type.starts_with(kWait) &&
         std::all_of(type.begin() + static_cast<std::ptrdiff_t>(kWait.size()), type.end(),
                     [](char c) { return (c >= 'A' && c <= 'Z') || c == '_'; });
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// The ASCII characters Python's str.strip() removes (str.isspace), as _Action.from_str strips
// every cell and sub-action: space, \t, \n, \v, \f, \r and the separators \x1c to \x1f.
bool is_python_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_python_space(text.front()))
    text.remove_prefix(1);
  while (!text.empty() && is_python_space(text.back()))
    text.remove_suffix(1);
  return text;
}

// A decimal number at the front of `rest` (advanced past it); nullopt when there is none.
// `too_big` is set when it has more digits than any limit allows.
std::optional<std::int64_t> take_number(std::string_view& rest, bool& too_big) {
  std::size_t digits = 0;
  while (digits < rest.size() && is_digit(rest[digits]))
    ++digits;
  if (digits == 0) return std::nullopt;
  too_big = digits > 12;
  std::int64_t value = 0;
  for (std::size_t i = 0; i < std::min<std::size_t>(digits, 12); ++i)
    value = value * 10 + (rest[i] - '0');
  rest.remove_prefix(digits);
  return value;
}

struct Parsed {
  bool compute = false;
  std::string type;
  std::int64_t stage = -1, microbatch = -1;
};

// One action "<stage><type>[<microbatch>]". Skipped kinds may leave out the micro-batch (PyTorch
// writes 0UNSHARD, 0REDUCE_GRAD); every action needs its stage (_Action.from_str's regex starts
// with one), and compute actions need both.
Parsed parse_action(std::string_view text, const Cell& at, std::string_view source) {
  std::string_view rest = text;
  bool too_big = false;
  Parsed p;
  if (auto stage = take_number(rest, too_big)) p.stage = *stage;
  if (too_big) bad_cell(source, at, "stage number out of range");
  std::size_t letters = 0;
  while (letters < rest.size() && !is_digit(rest[letters]))
    ++letters;
  p.type = std::string(rest.substr(0, letters));
  rest.remove_prefix(letters);
  if (auto mb = take_number(rest, too_big)) p.microbatch = *mb;
  if (too_big) bad_cell(source, at, "micro-batch number out of range");
  if (!rest.empty())
    bad_cell(source, at, "expected <stage><type><microbatch>, e.g. 0F3, or (a;b)OVERLAP_F_B");
  const bool skipped = is_skipped(p.type);
  if (!skipped && (p.type.size() != 1 || kCompute.find(p.type[0]) == std::string_view::npos)) {
    bad_cell(source, at,
             "unknown action type '" + p.type + "' (expected " + std::string(kTypes) + ")");
  }
  if (p.stage < 0) {
    bad_cell(source, at,
             skipped ? "expected a stage number first (PyTorch's loader reads no action "
                       "without one: 0" +
                           p.type + ", not " + p.type + ")"
                     : std::string("expected a stage number first"));
  }
  if (skipped) return p;
  if (p.microbatch < 0) bad_cell(source, at, "expected <stage><type><microbatch>, e.g. 0F3");
  if (p.stage >= limits::kMaxStages)
    bad_cell(source, at,
             limits::above_limit("stage " + std::to_string(p.stage), limits::kMaxStages - 1));
  if (p.microbatch >= limits::kMaxMicrobatches) {
    bad_cell(source, at,
             limits::above_limit("micro-batch " + std::to_string(p.microbatch),
                                 limits::kMaxMicrobatches - 1));
  }
  p.compute = true;
  return p;
}

void add_compute(std::vector<Cell>& cells, Cell cell, const Parsed& p) {
  cell.type = p.type[0];
  cell.stage = static_cast<int>(p.stage);
  cell.microbatch = static_cast<int>(p.microbatch);
  cells.push_back(std::move(cell));
}

void parse_cell(std::string_view text, Cell cell, std::string_view source, std::vector<Cell>& cells,
                Skipped& skipped) {
  const auto skip = [&](const std::string& type) {
    ++skipped.counts[type];
    ++skipped.total;
  };
  if (!text.starts_with('(')) {
    const Parsed p = parse_action(text, cell, source);
    if (p.compute) {
      add_compute(cells, std::move(cell), p);
    } else {
      skip(p.type);
    }
    return;
  }
  // "(a;b;...)TYPE": sub-actions run in the order written (DualPipeV's overlapped F and B).
  if (text.find('(', 1) != std::string_view::npos) bad_cell(source, cell, "nested sub-actions");
  const std::size_t close = text.find(')');
  if (close == std::string_view::npos) bad_cell(source, cell, "'(' without ')'");
  const std::string_view type = text.substr(close + 1);
  if (type != kOverlap) {
    bad_cell(source, cell,
             "unknown action type '" + std::string(type) + "' after sub-actions (expected " +
                 std::string(kOverlap) + ")");
  }
  std::string_view inner = text.substr(1, close - 1);
  int part = 0;
  while (true) {
    const std::size_t semicolon = inner.find(';');
    const std::string_view sub = trim(inner.substr(0, semicolon));
    if (!sub.empty()) {
      Cell c = cell;
      c.part = ++part;
      c.part_text = std::string(sub);
      const Parsed p = parse_action(sub, c, source);
      if (p.compute) {
        add_compute(cells, std::move(c), p);
      } else {
        skip(p.type);
      }
    }
    if (semicolon == std::string_view::npos) break;
    inner.remove_prefix(semicolon + 1);
  }
  if (part == 0) bad_cell(source, cell, "OVERLAP_F_B without sub-actions");
}

// Splits one line into cells as Python's csv reader (PyTorch's loader) does: a cell with a comma
// or a quote is quoted, and a quote inside is doubled. A quote opens a quoted cell only as the
// cell's very first character (csv.reader without skipinitialspace): after a space, or after a
// closing quote, it is text. Returns the cells, unquoted, not trimmed.
std::vector<std::string> split_cells(std::string_view line, std::string_view source, int row) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  bool cell_start = true;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    const bool at_start = std::exchange(cell_start, false);
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cells.back() += c;
      }
    } else if (c == '"' && at_start) {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
      cell_start = true;
    } else {
      cells.back() += c;
    }
  }
  if (quoted) {
    Cell at;
    at.row = row;
    at.column = static_cast<int>(cells.size());
    at.text = cells.back();
    bad_cell(source, at, "unterminated quote");
  }
  return cells;
}

// A blank line after the last rank (row `last_rank` + 1 on): PyTorch's csv reader gives it as an
// empty row, which its loader takes for one more rank. With no rank before it, the file has none.
[[noreturn]] void trailing_blank(std::string_view source, std::size_t last_rank) {
  if (last_rank == 0) throw Error(std::string(source) + ": no rows (expected one row per rank)");
  throw Error(std::string(source) + " row " + std::to_string(last_rank + 1) +
              ": a blank line after the last rank (PyTorch's csv reader takes it for a rank with "
              "no actions: remove it)");
}

bool all_blank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), is_python_space);
}

constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";

}  // namespace

std::string Cell::where() const {
  std::string out =
      "row " + std::to_string(row) + " cell " + std::to_string(column) + " ('" + text + "'";
  if (part > 0) out += " part " + std::to_string(part) + ", '" + part_text + "'";
  return out + ")";
}

[[noreturn]] void bad_cell(std::string_view source, const Cell& cell, std::string_view why) {
  std::string text =
      cell.text.size() > 80 ? std::string(utf8_prefix(cell.text, 80)) + "..." : cell.text;
  Cell shown = cell;
  shown.text = std::move(text);
  throw Error(std::string(source) + " " + shown.where() + ": " + std::string(why));
}

Rows read_rows(std::string_view text, std::string_view source) {
  // PyTorch's _load_csv opens the file without utf-8-sig: the mark is the first action's first
  // character, and no action matches with it.
  if (text.starts_with(kByteOrderMark)) {
    const std::string_view rest = text.substr(kByteOrderMark.size());
    Cell at;
    at.row = 1;
    at.column = 1;
    at.text = std::string(trim(rest.substr(0, rest.find_first_of(",\r\n"))));
    bad_cell(source, at,
             "the file starts with a UTF-8 byte-order mark, which PyTorch's loader reads as part "
             "of this action (it opens the file without utf-8-sig): save the file without it");
  }
  Rows out;
  std::size_t last_nonblank = 0;  // rows up to this one: ranks, a blank one idle
  std::int64_t cells_read = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    // A line ends at "\n", "\r\n" or a lone "\r", as Python's csv reader (and so PyTorch's
    // loader) takes them.
    std::size_t end = text.find_first_of("\r\n", start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + (end + 1 < text.size() && text[end] == '\r' && text[end + 1] == '\n' ? 2 : 1);
    const int row = static_cast<int>(out.rows.size()) + 1;
    const bool blank = trim(line).empty();
    if (row > limits::kMaxDevices) {
      // Blank to the end: the blank lines after the last rank (or a file of blank lines alone).
      if (blank && all_blank(text.substr(start))) trailing_blank(source, last_nonblank);
      throw Error(std::string(source) + " row " + std::to_string(row) + ": " +
                  limits::above_limit("ranks", limits::kMaxDevices));
    }
    if (!blank) last_nonblank = out.rows.size() + 1;
    std::vector<Cell> cells;
    int column = 0;
    for (const std::string& raw : split_cells(line, source, row)) {
      ++column;
      if (++cells_read > limits::kMaxCsvCells) {
        throw Error(std::string(source) + " row " + std::to_string(row) + ": " +
                    limits::above_limit("cells", limits::kMaxCsvCells));
      }
      const std::string_view cell = trim(raw);
      if (cell.empty()) continue;  // PyTorch's idle None
      Cell at;
      at.row = row;
      at.column = column;
      at.text = std::string(cell);
      // A quote left in the text (one after a space, or doubled inside a quoted cell) reaches
      // _Action.from_str, which matches no action with it.
      if (cell.find('"') != std::string_view::npos) {
        bad_cell(source, at,
                 "'\"' in the action (Python's csv reader takes a quote as text unless it is "
                 "the cell's first character)");
      }
      parse_cell(cell, std::move(at), source, cells, out.skipped);
    }
    out.rows.push_back(std::move(cells));
  }
  if (out.rows.size() > last_nonblank || last_nonblank == 0) trailing_blank(source, last_nonblank);
  return out;
}

}  // namespace pipeplan::torch_csv
