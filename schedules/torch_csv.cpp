#include "schedules/torch_csv.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"
#include "schedules/deadlock.h"
#include "schedules/torch_csv_cells.h"

namespace pipeplan {

// ---------------------------------------------------------------------------------------------
// Export.

std::string schedule_to_torch_csv(const Schedule& schedule) {
  // torch.distributed.pipelining maps each stage index to one rank and feeds every micro-batch
  // through every stage: two copies of the model have no CSV form.
  if (schedule.replicas != 1) {
    throw Error(
        "torch CSV: schedule '" + schedule.family + "' holds " + std::to_string(schedule.replicas) +
        " copies of the model, which PyTorch's pipeline CSV cannot express (one rank per "
        "stage, every micro-batch through every stage)" +
        (schedule.family == "auto" ? "; plan with --auto-copies 1 to keep auto to one" : ""));
  }
  std::string out;
  for (const std::vector<Action>& actions : schedule.per_device) {
    std::string row;
    bool in_pair = false;
    for (const Action& action : actions) {
      const char type = action.op == OpType::F    ? 'F'
                        : action.op == OpType::B  ? 'B'
                        : action.op == OpType::P1 ? 'I'
                                                  : 'W';
      // An overlapped pair is one cell, "(0F7;7B3)OVERLAP_F_B", as ScheduleDualPipeV writes it.
      if (in_pair) {
        row += ';' + std::to_string(action.stage) + type +
               std::to_string(action.microbatches.front()) + ")OVERLAP_F_B";
        in_pair = false;
        continue;
      }
      if (action.overlaps_next) {
        if (!row.empty()) row += ',';
        row +=
            '(' + std::to_string(action.stage) + type + std::to_string(action.microbatches.front());
        in_pair = true;
        continue;
      }
      for (const int mb : action.microbatches) {  // a concatenated P2: one W per micro-batch
        if (!row.empty()) row += ',';
        row += std::to_string(action.stage) + type + std::to_string(mb);
      }
    }
    if (in_pair) row += ")OVERLAP_F_B";  // a pair cut short (check_schedule refuses it)
    out += row + '\n';
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// PyTorch's rules, on the cells as written.

namespace {

using torch_csv::bad_cell;
using torch_csv::Cell;

struct Seen {
  bool f = false, i = false, w = false, b = false;
  const Cell* last = nullptr;  // the latest of them, to name it when its partner is missing
};

// Order rules per (stage, micro-batch), in row order (each stage lives on one rank).
void check_order(const Cell& c, Seen& seen, std::string_view source) {
  const std::string which =
      " of stage " + std::to_string(c.stage) + " micro-batch " + std::to_string(c.microbatch);
  auto fail = [&](const std::string& why) { bad_cell(source, c, why); };
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
  torch_csv::Rows rows;
  std::map<int, int> stage_rank;  // stage -> 0-based rank
  int stages = 0, microbatches = 0;
};

Parsed parse_and_check(std::string_view text, std::string_view source) {
  Parsed p{torch_csv::read_rows(text, source), {}, 0, 0};
  std::map<std::pair<int, int>, Seen> seen;
  std::map<int, const Cell*> first_cell;  // per stage, for a micro-batch it has no cell of
  for (std::size_t r = 0; r < p.rows.rows.size(); ++r) {
    for (const Cell& c : p.rows.rows[r]) {
      const auto [it, fresh] = p.stage_rank.emplace(c.stage, static_cast<int>(r));
      if (!fresh && it->second != static_cast<int>(r))
        bad_cell(source, c,
                 "stage " + std::to_string(c.stage) + " already runs on rank " +
                     std::to_string(it->second) + " (row " + std::to_string(it->second + 1) + ")");
      first_cell.emplace(c.stage, &c);
      Seen& st = seen[{c.stage, c.microbatch}];
      check_order(c, st, source);
      st.last = &c;
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
  // Every (stage, micro-batch) below must appear: bounded before the loop walks them.
  const std::int64_t pairs = std::int64_t{p.stages} * p.microbatches;
  if (pairs > limits::kMaxStageMicrobatches) {
    throw Error(std::string(source) + ": " +
                limits::above_limit(std::to_string(p.stages) + " stages x " +
                                        std::to_string(p.microbatches) + " micro-batches",
                                    static_cast<double>(limits::kMaxStageMicrobatches)));
  }
  // Counts: every stage runs every micro-batch forward and backward, and W after every I.
  for (int s = 0; s < p.stages; ++s) {
    for (int mb = 0; mb < p.microbatches; ++mb) {
      const auto it = seen.find({s, mb});
      const Seen st = it == seen.end() ? Seen{} : it->second;
      std::string missing;
      if (!st.f)
        missing = "F";
      else if (!st.i && !st.b)
        missing = "I or B";
      else if (st.i && !st.w)
        missing = "W";
      if (missing.empty()) continue;
      // The action whose partner is missing (the F without a backward, the I without its W);
      // with no F, no action of the micro-batch is there (the order rules saw to it).
      bad_cell(source, st.last != nullptr ? *st.last : *first_cell[s],
               "stage " + std::to_string(s) + " has no " + missing + " for micro-batch " +
                   std::to_string(mb) + " of 0.." + std::to_string(p.microbatches - 1));
    }
  }
  // PyTorch's runtime keeps the losses in the order the last stage computes them and reads them
  // back by micro-batch: its forwards must run in micro-batch order (else a step fails, or takes
  // one micro-batch's loss for another's).
  const int last = p.stages - 1;
  int next = 0;
  for (const Cell& c : p.rows.rows[static_cast<std::size_t>(p.stage_rank.at(last))]) {
    if (c.stage != last || c.type != 'F') continue;
    if (c.microbatch != next) {
      bad_cell(source, c,
               "the last stage (" + std::to_string(last) + ") runs the forward of micro-batch " +
                   std::to_string(c.microbatch) + " where micro-batch " + std::to_string(next) +
                   "'s is due: PyTorch's runtime reads the losses back by micro-batch in the "
                   "order the last stage computed them, so its forwards must run in micro-batch "
                   "order");
    }
    ++next;
  }
  return p;
}

bool same_cell(const Cell& a, const Cell& b) {
  return a.part > 0 && b.part > 0 && a.row == b.row && a.column == b.column;
}

// The per-rank orders as PyTorch's runtime runs them, for the deadlock check. It starts an
// OVERLAP_F_B cell once the inputs from other stages of all its sub-actions are there
// (`_add_send_recv`, `_ready_to_schedule`) and then runs them one after another; an input from
// the sub-action's own stage (a B or I's forward, a W's I) is never waited for, as the order
// rules put it earlier in the row. So a sub-action that needs nothing from another stage and
// takes an input from an earlier sub-action of its cell (the last stage's F, then that F's own B)
// runs after the rest of its cell, on its own; the rest start together. Any other input one
// sub-action needs from another of its cell is a deadlock, as in PyTorch.
struct RuntimeOrder {
  Schedule schedule;  // the imported one, each cell's actions in runtime order
  std::vector<std::vector<const Cell*>> cell_of;
  std::vector<std::vector<int>> starts_together;  // find_deadlock's groups (pairs included)
  int group_size(int device, int position) const {
    return std::max(
        1, starts_together[static_cast<std::size_t>(device)][static_cast<std::size_t>(position)]);
  }
};

RuntimeOrder runtime_order(const Schedule& imported,
                           const std::vector<std::vector<const Cell*>>& cell_of) {
  RuntimeOrder out{imported, cell_of, {}};
  out.starts_together.resize(cell_of.size());
  for (std::size_t r = 0; r < cell_of.size(); ++r) {
    const std::vector<Action>& actions = imported.per_device[r];
    const std::vector<const Cell*>& cells = cell_of[r];
    std::vector<Action>& ordered = out.schedule.per_device[r];
    std::vector<const Cell*>& ordered_cells = out.cell_of[r];
    ordered.clear();
    ordered_cells.clear();
    out.starts_together[r].assign(cells.size(), 1);
    for (std::size_t i = 0; i < cells.size();) {
      std::size_t end = i + 1;
      while (end < cells.size() && same_cell(*cells[end], *cells[i]))
        ++end;
      std::vector<std::size_t> together, after;
      for (std::size_t j = i; j < end; ++j) {
        const std::vector<Action> inputs = action_inputs(actions[j], imported);
        const bool other_stage = std::any_of(inputs.begin(), inputs.end(), [&](const Action& in) {
          return in.stage != actions[j].stage;
        });
        const bool from_cell = std::any_of(inputs.begin(), inputs.end(), [&](const Action& in) {
          return std::any_of(actions.begin() + static_cast<std::ptrdiff_t>(i),
                             actions.begin() + static_cast<std::ptrdiff_t>(j),
                             [&](const Action& earlier) { return produces(earlier, in); });
        });
        (from_cell && !other_stage ? after : together).push_back(j);
      }
      out.starts_together[r][ordered.size()] = static_cast<int>(together.size());
      for (const std::vector<std::size_t>* part : {&together, &after}) {
        for (const std::size_t j : *part) {
          ordered.push_back(actions[j]);
          ordered.back().overlaps_next = false;  // the groups above say what starts together
          ordered_cells.push_back(cells[j]);
        }
      }
      i = end;
    }
  }
  return out;
}

// From the cell that closes the cycle around it: "closes a dependency cycle (a deadlock): it
// waits for row 1 cell 5 ('0F1'), which runs after row 1 cell 4 ('0B0'), which waits for row 2
// cell 5 ('1B0'), which runs after this cell". Each stuck rank is named by the sub-action of
// its cell that waits (the first that needs the input, as find_deadlock checks them).
[[noreturn]] void report_deadlock(const Deadlock& deadlock, std::string_view source,
                                  const RuntimeOrder& order) {
  const auto cell = [&](int device, int position) {
    return order.cell_of[static_cast<std::size_t>(device)][static_cast<std::size_t>(position)];
  };
  const auto waiting = [&](const DeadlockStep& step) {
    const std::vector<Action>& actions =
        order.schedule.per_device[static_cast<std::size_t>(step.device)];
    const int end = step.position + order.group_size(step.device, step.position);
    for (int i = step.position; i < end && i < static_cast<int>(actions.size()); ++i) {
      const std::vector<Action> inputs =
          action_inputs(actions[static_cast<std::size_t>(i)], order.schedule);
      for (const Action& in : inputs) {
        if (produces(step.waits_for, in)) return cell(step.device, i);
      }
    }
    return cell(step.device, step.position);
  };
  const std::vector<DeadlockStep>& steps = deadlock.steps;
  const std::size_t k = steps.size();
  constexpr std::size_t kShown = 6;  // hops spelled out; a longer cycle ends in "..."
  const Cell* closing = waiting(steps.back());
  std::string why = "closes a dependency cycle (a deadlock): it";
  for (std::size_t hop = 0; hop < k; ++hop) {
    const DeadlockStep& step = steps[(k - 1 + hop) % k];  // the closing step first
    const DeadlockStep& next = steps[hop % k];            // the device producing its input
    const Cell* producer = cell(next.device, step.producer_position);
    const Cell* stuck = waiting(next);
    const bool last = hop + 1 == k;  // `stuck` is the closing cell
    why += std::string(hop == 0 ? "" : ", which") + " waits for ";
    if (last && producer != stuck && same_cell(*producer, *stuck)) {
      why += "part " + std::to_string(producer->part) + " ('" + producer->part_text +
             "') of this cell, which starts only once the inputs of all its parts are there";
      break;
    }
    why += producer->where();
    if (last) {
      why += producer == stuck ? ", which is this cell" : ", which runs after this cell";
      break;
    }
    if (hop + 1 == kShown) {
      why += ", ...";
      break;
    }
    if (producer != stuck && same_cell(*producer, *stuck)) {
      why += ", which starts only with part " + std::to_string(stuck->part) + " ('" +
             stuck->part_text + "') of its cell";
    } else if (producer != stuck) {
      why += ", which runs after " + stuck->where();
    }
  }
  bad_cell(source, *closing, why);
}

// Whether cells[i] opens an overlapped pair: the first of exactly two compute sub-actions of one
// OVERLAP_F_B cell, an F then a B or I (DualPipeV's form). Other OVERLAP_F_B cells run their
// sub-actions in the order written.
bool overlapped_pair(const std::vector<Cell>& cells, std::size_t i) {
  const Cell& c = cells[i];
  if (c.part != 1 || i + 1 >= cells.size()) return false;
  const Cell& next = cells[i + 1];
  const bool same_cell = next.row == c.row && next.column == c.column && next.part == 2;
  const bool two_parts =
      i + 2 >= cells.size() || cells[i + 2].column != c.column || cells[i + 2].row != c.row;
  return same_cell && two_parts && c.type == 'F' && (next.type == 'B' || next.type == 'I') &&
         (next.stage != c.stage || next.microbatch != c.microbatch);
}

}  // namespace

void check_torch_csv(std::string_view text, std::string_view source) {
  parse_and_check(text, source);
}

Schedule schedule_from_torch_csv(std::string_view text, std::string_view source,
                                 const TorchCsvImport& options, TorchCsvReport* report) {
  const Parsed p = parse_and_check(text, source);
  Schedule schedule;
  schedule.family = "torch-csv";
  schedule.devices = static_cast<int>(p.rows.rows.size());
  schedule.microbatches = p.microbatches;
  for (int s = 0; s < p.stages; ++s)
    schedule.stage_device.push_back(p.stage_rank.at(s));
  bool split = false;
  schedule.per_device.resize(p.rows.rows.size());
  // The cell of every action, for the deadlock message (a joined W: its first cell).
  std::vector<std::vector<const Cell*>> cell_of(p.rows.rows.size());
  for (std::size_t r = 0; r < p.rows.rows.size(); ++r) {
    std::vector<Action>& actions = schedule.per_device[r];
    const std::vector<Cell>& cells = p.rows.rows[r];
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const Cell& c = cells[i];
      const OpType op = c.type == 'F'   ? OpType::F
                        : c.type == 'B' ? OpType::B
                        : c.type == 'I' ? OpType::P1
                                        : OpType::P2;
      split = split || op == OpType::P1;
      if (op == OpType::P2 && options.join_consecutive_w && !actions.empty() &&
          actions.back().op == OpType::P2 && actions.back().stage == c.stage &&
          (options.max_join <= 0 ||
           static_cast<int>(actions.back().microbatches.size()) < options.max_join)) {
        actions.back().microbatches.push_back(c.microbatch);
        continue;
      }
      actions.push_back({op, c.stage, {c.microbatch}});
      actions.back().overlaps_next = overlapped_pair(cells, i);
      cell_of[r].push_back(&c);
    }
  }
  schedule.backward = split ? BackwardMode::twobp : BackwardMode::fused;
  try {
    check_schedule(schedule);
  } catch (const Error& e) {
    throw Error(std::string(source) + ": " + e.what());
  }
  const RuntimeOrder order = runtime_order(schedule, cell_of);
  if (const auto deadlock = find_deadlock(order.schedule, &order.starts_together))
    report_deadlock(*deadlock, source, order);
  if (report != nullptr) {
    report->skipped = p.rows.skipped.counts;
    report->skipped_total = p.rows.skipped.total;
    report->actions = 0;
    report->cells_in_sequence = 0;
    for (const auto& row : p.rows.rows) {
      report->actions += static_cast<int>(row.size());
      for (std::size_t i = 0; i < row.size(); ++i) {
        // The second compute sub-action of a cell, unless the cell is an overlapped pair.
        if (i > 0 && same_cell(row[i - 1], row[i]) && (i < 2 || !same_cell(row[i - 2], row[i])) &&
            !overlapped_pair(row, i - 1))
          ++report->cells_in_sequence;
      }
    }
  }
  return schedule;
}

std::string TorchCsvReport::skipped_text() const {
  std::string out;
  for (const auto& [type, count] : skipped)
    out += (out.empty() ? "" : ", ") + std::to_string(count) + " " + type;
  return out;
}

Schedule load_torch_csv(const std::filesystem::path& path, const TorchCsvImport& options,
                        TorchCsvReport* report) {
  return schedule_from_torch_csv(read_text_file(path), input_name(path), options, report);
}

// ---------------------------------------------------------------------------------------------
// The side file.

namespace {

constexpr std::string_view kLayersFormat = "pipeplan-torch-csv-layers";
constexpr int kLayersVersion = 2;

std::string hex64(std::uint64_t value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4)
    out[static_cast<std::size_t>(i)] = kDigits[value & 0xF];
  return out;
}

std::optional<std::uint64_t> from_hex64(std::string_view text) {
  if (text.size() != 16) return std::nullopt;
  std::uint64_t value = 0;
  for (const char c : text) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    value = value << 4 | static_cast<std::uint64_t>(digit);
  }
  return value;
}

// "52 bytes, FNV-1a 64 1f2e..."
std::string tie_text(const TorchCsvTie& tie) {
  return std::to_string(tie.bytes) + " bytes, FNV-1a 64 " + hex64(tie.fnv1a64);
}

// stage_layers: one [first_layer, layer_count] per stage, from layer 0, each stage starting where
// the one before it ends.
std::vector<StageLayers> stage_layers_from_json(const nlohmann::json& json, std::size_t stages,
                                                std::string_view source) {
  const nlohmann::json& field = require_field(json, "stage_layers", source);
  const std::string what = std::string(source) + ": field 'stage_layers' must be an array of " +
                           std::to_string(stages) +
                           " [first_layer, layer_count] pairs (one per stage of "
                           "'blocks_per_stage'), each stage starting where the one before ends";
  if (!field.is_array() || field.size() != stages) throw Error(what);
  std::vector<StageLayers> out;
  std::int64_t next = 0;
  for (const nlohmann::json& pair : field) {
    if (!pair.is_array() || pair.size() != 2) throw Error(what);
    const auto first = int64_value(pair[0]);
    const auto count = int64_value(pair[1]);
    if (!first || !count || *first != next || *count < 1 ||
        *first + *count > std::int64_t{limits::kMaxLayers} + 2) {  // blocks, embedding, head
      throw Error(what);
    }
    out.push_back({static_cast<int>(*first), static_cast<int>(*count)});
    next = *first + *count;
  }
  return out;
}

}  // namespace

TorchCsvTie torch_csv_tie(std::string_view csv_text) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : csv_text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return {static_cast<std::int64_t>(csv_text.size()), hash};
}

std::filesystem::path torch_csv_layers_path(const std::filesystem::path& csv) {
  std::filesystem::path side = csv;
  side += ".layers.json";
  return side;
}

TorchCsvLayers torch_csv_layers(const ModelConfig& model,
                                const std::vector<StageLayers>& stage_layers,
                                std::string_view csv_text) {
  const std::vector<LayerKind> kinds = model.layer_list();
  TorchCsvLayers out{model.name, {}, stage_layers, 0, torch_csv_tie(csv_text), kLayersVersion};
  for (const StageLayers& s : stage_layers) {
    int blocks = 0;
    for (int l = s.first_layer; l < s.first_layer + s.layer_count; ++l) {
      if (l >= 0 && l < static_cast<int>(kinds.size()) &&
          kinds[static_cast<std::size_t>(l)] == LayerKind::block)
        ++blocks;
    }
    out.blocks_per_stage.push_back(blocks);
  }
  return out;
}

nlohmann::json torch_csv_layers_to_json(const TorchCsvLayers& layers) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageLayers& s : layers.stage_layers)
    stages.push_back({s.first_layer, s.layer_count});
  nlohmann::json out = {{"format", kLayersFormat},
                        {"version", layers.version},
                        {"model", layers.model},
                        {"blocks_per_stage", layers.blocks_per_stage},
                        {"stage_layers", stages}};
  if (layers.version >= 2) {
    out["p2_concat"] = layers.p2_concat;
    const TorchCsvTie tie = layers.csv.value_or(TorchCsvTie{});
    out["csv_bytes"] = tie.bytes;
    out["csv_fnv1a64"] = hex64(tie.fnv1a64);
  }
  return out;
}

TorchCsvLayers torch_csv_layers_from_json(const nlohmann::json& json, std::string_view source) {
  TorchCsvLayers out;
  out.version = require_format(json, kLayersFormat, 1, kLayersVersion, source);
  constexpr std::string_view kWhat = "a pipeplan-torch-csv-layers file";
  if (out.version == 1) {
    require_known_fields(json, {"format", "version", "model", "blocks_per_stage", "stage_layers"},
                         source, "", kWhat);
  } else {
    require_known_fields(json,
                         {"format", "version", "model", "blocks_per_stage", "stage_layers",
                          "p2_concat", "csv_bytes", "csv_fnv1a64"},
                         source, "", kWhat);
  }
  out.model = require_string(json, "model", source);
  require_printable(out.model, "model", source);  // printed in import's notes
  const auto& blocks = require_field(json, "blocks_per_stage", source);
  if (!blocks.is_array() || blocks.empty() ||
      blocks.size() > static_cast<std::size_t>(limits::kMaxStages)) {
    throw Error(std::string(source) + ": field 'blocks_per_stage' must be an array of 1 to " +
                std::to_string(limits::kMaxStages) + " block counts");
  }
  for (const auto& b : blocks) {
    if (!b.is_number_integer() || b.get<std::int64_t>() < 1 ||
        b.get<std::int64_t>() > limits::kMaxLayers) {
      throw Error(std::string(source) +
                  ": field 'blocks_per_stage' must hold block counts from 1 to " +
                  std::to_string(limits::kMaxLayers));
    }
    out.blocks_per_stage.push_back(b.get<int>());
  }
  out.stage_layers = stage_layers_from_json(json, out.blocks_per_stage.size(), source);
  if (out.version == 1) return out;
  const std::int64_t p2_concat = require_integer(json, "p2_concat", source);
  if (p2_concat < 0 || p2_concat > limits::kMaxMicrobatches) {
    throw Error(std::string(source) + ": field 'p2_concat' must be 0 (all) to " +
                std::to_string(limits::kMaxMicrobatches));
  }
  out.p2_concat = static_cast<int>(p2_concat);
  TorchCsvTie tie;
  tie.bytes = require_integer(json, "csv_bytes", source);
  if (tie.bytes < 0 || tie.bytes > limits::kMaxFileBytes) {
    throw Error(std::string(source) + ": field 'csv_bytes' must be a size from 0 to " +
                std::to_string(limits::kMaxFileBytes));
  }
  const auto hash = from_hex64(require_string(json, "csv_fnv1a64", source));
  if (!hash) {
    throw Error(std::string(source) +
                ": field 'csv_fnv1a64' must be 16 lowercase hexadecimal digits");
  }
  tie.fnv1a64 = *hash;
  out.csv = tie;
  return out;
}

std::optional<TorchCsvLayers> load_torch_csv_layers(const std::filesystem::path& csv,
                                                    std::string_view csv_text) {
  if (csv == "-") return std::nullopt;  // standard input has no file beside it
  const std::filesystem::path side = torch_csv_layers_path(csv);
  std::error_code ec;
  const std::filesystem::file_status link = std::filesystem::symlink_status(side, ec);
  if (!std::filesystem::exists(link)) return std::nullopt;
  if (std::filesystem::is_symlink(link) && !std::filesystem::exists(side, ec)) {
    const std::filesystem::path target = std::filesystem::read_symlink(side, ec);
    throw Error(side.string() + ": a symbolic link to '" + printable_text(target.string()) +
                "', which does not exist (remove the link, or export the plan again)");
  }
  TorchCsvLayers layers = torch_csv_layers_from_json(read_json_file(side), side.string());
  if (layers.csv && *layers.csv != torch_csv_tie(csv_text)) {
    throw Error(side.string() + ": written with another " + csv.string() + " (" +
                tie_text(*layers.csv) + "; " + csv.string() + " now has " +
                tie_text(torch_csv_tie(csv_text)) + "): export the plan again, or remove " +
                side.string());
  }
  return layers;
}

}  // namespace pipeplan
