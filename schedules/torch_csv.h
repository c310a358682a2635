// torch.distributed.pipelining's per-rank schedule CSV (`_dump_csv` / `_load_csv`), compute-only
// form: one row per rank, one cell per action `<stage><type><microbatch>` with type F (forward),
// I (backward input = p1), W (backward weight = p2) or B (full backward = fused). Stage ids are
// virtual stage ids. A concatenated P2 leaves as one W cell per micro-batch. See docs/torch-csv.md.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "schedules/schedule.h"

namespace pipeplan {

std::string schedule_to_torch_csv(const Schedule& schedule);

struct TorchCsvImport {
  // Join consecutive W cells of one stage into one concatenated P2 (pipeplan's p2 concat);
  // PyTorch runs them one by one, so the default keeps them apart.
  bool join_consecutive_w = false;
};

// The rules PyTorch's validator enforces, checked on the cells as written: a known action type,
// every stage on one rank only, per (stage, micro-batch) F before I/B and I before W, each action
// at most once, and for every stage one F, one I or B, and (after I) one W per micro-batch.
// Empty cells (PyTorch's idle None) are skipped; SEND_F, RECV_F, SEND_B, RECV_B cells are
// skipped too, because pipeplan derives communication when it lowers the schedule. Throws Error
// "<source> row R cell C ('text'): rule" (rows and cells 1-based).
void check_torch_csv(std::string_view text, std::string_view source);

// check_torch_csv, then a Schedule with family "torch-csv", backward 2bp when any I or W appears
// (else fused), stage s on the rank whose row holds it, micro-batches = largest id + 1.
Schedule schedule_from_torch_csv(std::string_view text, std::string_view source,
                                 const TorchCsvImport& options = {});

Schedule load_torch_csv(const std::filesystem::path& path, const TorchCsvImport& options = {});
void save_torch_csv(const Schedule& schedule, const std::filesystem::path& path);

}  // namespace pipeplan
