#include "schedules/torch_csv.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "planner/base/io.h"

namespace pipeplan {

// ---------------------------------------------------------------------------------------------
// Export.

std::string schedule_to_torch_csv(const Schedule& schedule) {
  std::string out;
  for (const std::vector<Action>& actions : schedule.per_device) {
    std::string row;
    for (const Action& action : actions) {
      const char type = action.op == OpType::F    ? 'F'
                        : action.op == OpType::B  ? 'B'
                        : action.op == OpType::P1 ? 'I'
                                                  : 'W';
      for (const int mb : action.microbatches) {  // a concatenated P2: one W per micro-batch
        if (!row.empty()) row += ',';
        row += std::to_string(action.stage) + type + std::to_string(mb);
      }
    }
    out += row + '\n';
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parsing and PyTorch's rules.

namespace {

struct Cell {
  int row = 0, column = 0;  // 1-based, for messages
  std::string text;
  char type = 'F';  // F, I, W, B
  int stage = 0, microbatch = 0;
};

[[noreturn]] void bad_cell(std::string_view source, int row, int column, std::string_view text,
                           std::string_view why) {
  throw Error(std::string(source) + " row " + std::to_string(row) + " cell " +
              std::to_string(column) + " ('" + std::string(text) + "'): " + std::string(why));
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r'))
    text.remove_suffix(1);
  return text;
}

std::optional<int> take_number(std::string_view& rest) {
  std::size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9')
    ++digits;
  if (digits == 0 || digits > 9) return std::nullopt;
  int value = 0;
  std::from_chars(rest.data(), rest.data() + digits, value);
  rest.remove_prefix(digits);
  return value;
}

bool is_comm(std::string_view type) {
  return type == "SEND_F" || type == "RECV_F" || type == "SEND_B" || type == "RECV_B";
}

// Parses one non-empty cell; nullopt for a communication action (skipped).
std::optional<Cell> parse_cell(std::string_view text, std::string_view source, int row,
                               int column) {
  std::string_view rest = text;
  const std::optional<int> stage = take_number(rest);
  if (!stage) bad_cell(source, row, column, text, "expected a stage number first");
  std::size_t letters = 0;
  while (letters < rest.size() && (rest[letters] < '0' || rest[letters] > '9'))
    ++letters;
  const std::string_view type = rest.substr(0, letters);
  rest.remove_prefix(letters);
  const std::optional<int> microbatch = take_number(rest);
  if (!microbatch || !rest.empty())
    bad_cell(source, row, column, text, "expected <stage><type><microbatch>, e.g. 0F3");
  if (is_comm(type)) return std::nullopt;
  if (type.size() != 1 || std::string_view("FIWB").find(type[0]) == std::string_view::npos)
    bad_cell(source, row, column, text,
             "unknown action type '" + std::string(type) + "' (expected F, I, W or B)");
  return Cell{row, column, std::string(text), type[0], *stage, *microbatch};
}

std::vector<std::vector<Cell>> parse_rows(std::string_view text, std::string_view source) {
  std::vector<std::vector<Cell>> rows;
  std::size_t last_nonblank = 0;  // rows up to this one are kept; trailing blank lines are not
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (!trim(line).empty()) last_nonblank = rows.size() + 1;
    std::vector<Cell> cells;
    std::size_t cell_start = 0;
    for (int column = 1;; ++column) {
      std::size_t comma = line.find(',', cell_start);
      if (comma == std::string_view::npos) comma = line.size();
      const std::string_view cell = trim(line.substr(cell_start, comma - cell_start));
      if (!cell.empty()) {
        if (auto parsed = parse_cell(cell, source, static_cast<int>(rows.size()) + 1, column))
          cells.push_back(std::move(*parsed));
      }
      if (comma == line.size()) break;
      cell_start = comma + 1;
    }
    rows.push_back(std::move(cells));
  }
  rows.resize(last_nonblank);
  if (rows.empty()) throw Error(std::string(source) + ": no rows (expected one row per rank)");
  return rows;
}

struct Seen {
  bool f = false, i = false, w = false, b = false;
};

// Order rules per (stage, micro-batch), in row order (each stage lives on one rank).
void check_order(const Cell& c, Seen& seen, std::string_view source) {
  const std::string which =
      " of stage " + std::to_string(c.stage) + " micro-batch " + std::to_string(c.microbatch);
  auto fail = [&](const std::string& why) { bad_cell(source, c.row, c.column, c.text, why); };
  switch (c.type) {
    case 'F':
      if (seen.f) fail("second F" + which);
      seen.f = true;
      break;
    case 'I':
    case 'B':
      if (!seen.f) fail(std::string(1, c.type) + " before F" + which);
      if (seen.i || seen.b) fail("second backward" + which);
      (c.type == 'I' ? seen.i : seen.b) = true;
      break;
    default:  // W
      if (seen.b) fail("W after a full backward B" + which);
      if (!seen.i) fail("W before I" + which);
      if (seen.w) fail("second W" + which);
      seen.w = true;
      break;
  }
}

struct Parsed {
  std::vector<std::vector<Cell>> rows;
  std::map<int, int> stage_rank;  // stage -> 0-based rank
  int stages = 0, microbatches = 0;
};

Parsed parse_and_check(std::string_view text, std::string_view source) {
  Parsed p{parse_rows(text, source), {}, 0, 0};
  std::map<std::pair<int, int>, Seen> seen;
  std::map<int, const Cell*> first_cell;  // per stage, to name it in count errors
  for (std::size_t r = 0; r < p.rows.size(); ++r) {
    for (const Cell& c : p.rows[r]) {
      const auto [it, fresh] = p.stage_rank.emplace(c.stage, static_cast<int>(r));
      if (!fresh && it->second != static_cast<int>(r))
        bad_cell(source, c.row, c.column, c.text,
                 "stage " + std::to_string(c.stage) + " already runs on rank " +
                     std::to_string(it->second) + " (row " + std::to_string(it->second + 1) + ")");
      first_cell.emplace(c.stage, &c);
      check_order(c, seen[{c.stage, c.microbatch}], source);
      p.stages = std::max(p.stages, c.stage + 1);
      p.microbatches = std::max(p.microbatches, c.microbatch + 1);
    }
  }
  if (p.stage_rank.empty()) throw Error(std::string(source) + ": no actions");
  for (int s = 0; s < p.stages; ++s) {
    if (!p.stage_rank.contains(s))
      throw Error(std::string(source) + ": stage " + std::to_string(s) +
                  " has no actions (stages 0.." + std::to_string(p.stages - 1) + " appear)");
  }
  // Counts: every stage runs every micro-batch forward and backward, and W after every I.
  for (int s = 0; s < p.stages; ++s) {
    for (int mb = 0; mb < p.microbatches; ++mb) {
      const Seen& st = seen[{s, mb}];
      std::string missing;
      if (!st.f)
        missing = "F";
      else if (!st.i && !st.b)
        missing = "I or B";
      else if (st.i && !st.w)
        missing = "W";
      if (missing.empty()) continue;
      const Cell& at = *first_cell[s];
      bad_cell(source, at.row, at.column, at.text,
               "stage " + std::to_string(s) + " has no " + missing + " for micro-batch " +
                   std::to_string(mb) + " of 0.." + std::to_string(p.microbatches - 1));
    }
  }
  return p;
}

}  // namespace

void check_torch_csv(std::string_view text, std::string_view source) {
  parse_and_check(text, source);
}

Schedule schedule_from_torch_csv(std::string_view text, std::string_view source,
                                 const TorchCsvImport& options) {
  const Parsed p = parse_and_check(text, source);
  Schedule schedule;
  schedule.family = "torch-csv";
  schedule.devices = static_cast<int>(p.rows.size());
  schedule.microbatches = p.microbatches;
  for (int s = 0; s < p.stages; ++s)
    schedule.stage_device.push_back(p.stage_rank.at(s));
  bool split = false;
  schedule.per_device.resize(p.rows.size());
  for (std::size_t r = 0; r < p.rows.size(); ++r) {
    std::vector<Action>& actions = schedule.per_device[r];
    for (const Cell& c : p.rows[r]) {
      const OpType op = c.type == 'F'   ? OpType::F
                        : c.type == 'B' ? OpType::B
                        : c.type == 'I' ? OpType::P1
                                        : OpType::P2;
      split = split || op == OpType::P1;
      if (op == OpType::P2 && options.join_consecutive_w && !actions.empty() &&
          actions.back().op == OpType::P2 && actions.back().stage == c.stage) {
        actions.back().microbatches.push_back(c.microbatch);
        continue;
      }
      actions.push_back({op, c.stage, {c.microbatch}});
    }
  }
  schedule.backward = split ? BackwardMode::twobp : BackwardMode::fused;
  try {
    check_schedule(schedule);
  } catch (const Error& e) {
    throw Error(std::string(source) + ": " + e.what());
  }
  return schedule;
}

Schedule load_torch_csv(const std::filesystem::path& path, const TorchCsvImport& options) {
  return schedule_from_torch_csv(read_text_file(path), path.string(), options);
}

void save_torch_csv(const Schedule& schedule, const std::filesystem::path& path) {
  write_file_atomic(path, schedule_to_torch_csv(schedule));
}

}  // namespace pipeplan
