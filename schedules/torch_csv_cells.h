// The cells of a torch.distributed.pipelining schedule CSV, as PyTorch writes them
// (`_Action.__repr__`, `csv.writer`): the reader behind schedules/torch_csv.h. Internal to the
// schedules layer; docs/reference/torch-csv.md lists every form.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace pipeplan::torch_csv {

// One compute action read from the file. An OVERLAP_F_B cell gives one per sub-action, in
// order, with `part` 1, 2, ...; a plain cell has part 0.
struct Cell {
  int row = 0, column = 0;  // 1-based, for messages
  std::string text;         // the whole cell as written
  int part = 0;
  std::string part_text;  // the sub-action ("7B3") when part > 0
  char type = 'F';        // F, I, W, B
  int stage = 0, microbatch = 0;
  // "row 2 cell 5 ('(0F7;7B3)OVERLAP_F_B' part 2, '7B3')": where the action is written.
  std::string where() const;
};

// Cells with no task-graph node, by type (empty cells are not counted).
struct Skipped {
  std::map<std::string, int> counts;  // "SEND_F" -> 6, "UNSHARD" -> 2
  int total = 0;
};

struct Rows {
  std::vector<std::vector<Cell>> rows;  // one per rank, compute actions only
  Skipped skipped;
};

// Reads every row (CRLF, LF or lone CR line ends, quoted cells as Python's csv reader takes them:
// a quote opens one only as a cell's first character) and every cell, stripped as
// _Action.from_str strips it. Throws Error "<source> row R cell C ('text'): why" on a cell that
// is none of the documented forms (every action, skipped ones included, starts with its stage),
// on a UTF-8 byte-order mark (PyTorch's loader reads it as part of the first action), on stage or
// micro-batch numbers above planner/base/limits.h, and on a file above limits::kMaxCsvCells cells
// or limits::kMaxDevices rows.
Rows read_rows(std::string_view text, std::string_view source);

[[noreturn]] void bad_cell(std::string_view source, const Cell& cell, std::string_view why);

}  // namespace pipeplan::torch_csv
