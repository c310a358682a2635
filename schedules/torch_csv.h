// torch.distributed.pipelining's per-rank schedule CSV (`_dump_csv` / `_load_csv`): one row per
// rank, one cell per action `<stage><type><microbatch>` with type F (forward), I (backward input
// = p1), W (backward weight = p2) or B (full backward = fused). Stage ids are virtual stage ids.
// Import also takes what PyTorch writes by default (`compute_comms`): communication, FSDP and
// wait cells are skipped and counted, and DualPipeV's `(0F7;7B3)OVERLAP_F_B` cells become their
// sub-actions in order. A concatenated P2 leaves as one W cell per micro-batch. See
// docs/reference/torch-csv.md for every form.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "profiles/model.h"
#include "profiles/partition.h"
#include "schedules/schedule.h"

namespace pipeplan {

std::string schedule_to_torch_csv(const Schedule& schedule);

struct TorchCsvImport {
  // Join consecutive W cells of one stage into one concatenated P2 (pipeplan's p2 concat);
  // PyTorch runs them one by one, so the default keeps them apart.
  bool join_consecutive_w = false;
  // With join_consecutive_w: the most W cells one P2 joins (pipeplan's --p2-concat K, as a plan
  // made with it groups them); 0: every consecutive one.
  int max_join = 0;
};

// The rules PyTorch's validator enforces, checked on the cells as written: a known action type,
// every stage on one rank only, per (stage, micro-batch) F before I/B and I before W, each action
// at most once, and for every stage one F, one I or B, and (after I) one W per micro-batch.
// Empty cells (PyTorch's idle None) are skipped; so are the cells with no task-graph node of
// their own (SEND_F, RECV_F, SEND_B, RECV_B, WAIT_*, UNSHARD, RESHARD, REDUCE_GRAD): pipeplan
// derives communication when it lowers the schedule. Throws Error "<source> row R cell C
// ('text'): rule" (rows and cells 1-based; "part N" for a sub-action of an OVERLAP_F_B cell).
void check_torch_csv(std::string_view text, std::string_view source);

// What an import read: compute actions, and the skipped cells by type.
struct TorchCsvReport {
  int actions = 0;
  // OVERLAP_F_B cells of two or more compute sub-actions imported as actions in sequence, not as
  // an overlapped pair (not a DualPipeV F and B, e.g. the last stage's F then its own B).
  int cells_in_sequence = 0;
  std::map<std::string, int> skipped;  // "SEND_F" -> 6, ...
  int skipped_total = 0;
  std::string skipped_text() const;  // "6 RECV_B, 6 SEND_F, 2 UNSHARD" (empty when none)
};

// check_torch_csv, then a Schedule with family "torch-csv", backward 2bp when any I or W appears
// (else fused), stage s on the rank whose row holds it, micro-batches = largest id + 1. Per-rank
// orders that PyTorch's runtime cannot run to the end (a dependency cycle, schedules/deadlock.h;
// an OVERLAP_F_B cell starts once its sub-actions' inputs from other stages are there, then runs
// them in order) throw Error naming the row and cell (and part) that close the cycle and the
// cells on it. `report`, when given, is filled.
Schedule schedule_from_torch_csv(std::string_view text, std::string_view source,
                                 const TorchCsvImport& options = {},
                                 TorchCsvReport* report = nullptr);

Schedule load_torch_csv(const std::filesystem::path& path, const TorchCsvImport& options = {},
                        TorchCsvReport* report = nullptr);

// What PyTorch's CSV has no place for: `export -o sched.csv` writes it beside the CSV as
// sched.csv.layers.json (format pipeplan-torch-csv-layers, version 2; docs/reference/torch-csv.md)
// and `import sched.csv` reads it back: the stage-to-layers split, the plan's p2_concat, and the
// CSV it was written with (its size and hash), so that a side file left beside another CSV is
// refused rather than applied to it.
struct TorchCsvTie {
  std::int64_t bytes = 0;
  std::uint64_t fnv1a64 = 0;  // FNV-1a, 64 bits, of the CSV's bytes
  bool operator==(const TorchCsvTie&) const = default;
};
TorchCsvTie torch_csv_tie(std::string_view csv_text);
struct TorchCsvLayers {
  std::string model;                      // the plan's model name; import uses the split for it
  std::vector<int> blocks_per_stage;      // transformer blocks per virtual stage
  std::vector<StageLayers> stage_layers;  // [first_layer, layer_count] per stage (for people)
  int p2_concat = 0;                      // the plan's largest p2 group (0: any); version 2
  std::optional<TorchCsvTie> csv;         // the CSV written beside it; version 2 (1 has none)
  int version = 2;
};
std::filesystem::path torch_csv_layers_path(const std::filesystem::path& csv);
// Version 2 for `csv_text`, without a p2_concat (the caller sets it).
TorchCsvLayers torch_csv_layers(const ModelConfig& model,
                                const std::vector<StageLayers>& stage_layers,
                                std::string_view csv_text);
nlohmann::json torch_csv_layers_to_json(const TorchCsvLayers& layers);
// Versions 1 and 2. Throws Error naming `source` and the field: an unknown field, stage_layers
// that are not one [first_layer, layer_count] per stage, each stage starting where the one before
// it ends.
TorchCsvLayers torch_csv_layers_from_json(const nlohmann::json& json, std::string_view source);
// The side file of `csv`, if there is one; `csv_text` is the CSV's content as read. Throws Error
// in one line naming the side file when it is a symbolic link to nothing, and naming both files
// when it records another CSV than `csv_text`.
std::optional<TorchCsvLayers> load_torch_csv_layers(const std::filesystem::path& csv,
                                                    std::string_view csv_text);

}  // namespace pipeplan
