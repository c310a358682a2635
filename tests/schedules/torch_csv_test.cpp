// PyTorch schedule CSV: export → import round trips for every family, exported files pass an
// independent re-implementation of torch.distributed.pipelining's validity rules, and bad files
// fail with one line naming file, row and cell.
#include "schedules/torch_csv.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "planner/base/error.h"
#include "schedules/family.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

std::string error_of(std::string_view csv) {
  try {
    schedule_from_torch_csv(csv, "s.csv");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// PyTorch's rules, written again from their statement (not from torch_csv.cpp): per (stage,
// micro-batch) F before I/B and I before W, each action once, and per stage m F, m I-or-B and
// one W per I. Returns "" when the CSV is valid.
std::string pytorch_rules(const std::string& csv) {
  std::map<std::tuple<int, int, char>, int> count;  // (stage, mb, type) -> occurrences
  std::map<int, int> stage_rank;
  int m = 0;
  std::istringstream rows(csv);
  std::string row;
  for (int rank = 0; std::getline(rows, row); ++rank) {
    // An overlapped pair's cell, "(0F7;7B3)OVERLAP_F_B", holds its sub-actions in order.
    std::string flat;
    std::istringstream whole(row);
    for (std::string cell; std::getline(whole, cell, ',');) {
      if (cell.starts_with('(')) {
        if (!cell.ends_with(")OVERLAP_F_B")) return cell + ": unknown compound cell";
        cell = cell.substr(1, cell.size() - 1 - std::string_view(")OVERLAP_F_B").size());
        std::replace(cell.begin(), cell.end(), ';', ',');
      }
      flat += (flat.empty() ? "" : ",") + cell;
    }
    std::istringstream cells(flat);
    std::string cell;
    while (std::getline(cells, cell, ',')) {
      std::size_t i = 0;
      while (i < cell.size() && std::isdigit(static_cast<unsigned char>(cell[i])))
        ++i;
      const int stage = std::stoi(cell.substr(0, i));
      const char type = cell[i];
      const int mb = std::stoi(cell.substr(i + 1));
      m = std::max(m, mb + 1);
      if (stage_rank.emplace(stage, rank).first->second != rank) return "stage on two ranks";
      auto seen = [&](char t) { return count[{stage, mb, t}] > 0; };
      if ((type == 'I' || type == 'B') && !seen('F')) return cell + ": backward before F";
      if (type == 'W' && !seen('I')) return cell + ": W before I";
      if (++count[{stage, mb, type}] > 1) return cell + ": twice";
    }
  }
  for (const auto& [stage, rank] : stage_rank) {
    for (int mb = 0; mb < m; ++mb) {
      if (count[{stage, mb, 'F'}] != 1) return "missing F";
      if (count[{stage, mb, 'I'}] + count[{stage, mb, 'B'}] != 1) return "missing backward";
      if (count[{stage, mb, 'W'}] != count[{stage, mb, 'I'}]) return "missing W";
    }
  }
  return "";
}

TEST(TorchCsv, ExportOfEveryFamilyRoundTripsAndPassesPyTorchRules) {
  int round_trips = 0;
  for (const ScheduleFamily* family : schedule_families()) {
    // Two copies of the model have no CSV form (DualPipe.HasNoPyTorchCsv).
    if (family->traits().replicas != 1) continue;
    for (const BackwardMode mode : family->backward_modes()) {
      for (const int p2_concat : {1, 0}) {
        const int chunks = family->traits().chunks.preferred;
        const Plan plan = testing::uniform_plan({.devices = 4,
                                                 .microbatches = 8,
                                                 .chunks = chunks,
                                                 .schedule = family->name(),
                                                 .backward = mode,
                                                 .p2_concat = p2_concat});
        const Schedule& original = plan.graph.schedule;
        const std::string csv = schedule_to_torch_csv(original);
        const std::string where = family->name() + " " + std::string(to_string(mode));
        EXPECT_EQ(pytorch_rules(csv), "") << where;
        // The CSV has one W cell per micro-batch: two p2 calls of one stage back to back cannot be
        // told apart from one concatenated call, so only schedules without such neighbours can
        // come back exactly (joined when concatenated, one call per cell otherwise).
        const bool join = p2_concat != 1;
        bool ambiguous = false;
        for (const auto& actions : original.per_device) {
          for (std::size_t i = 0; i < actions.size(); ++i) {
            const Action& a = actions[i];
            if (a.op != OpType::P2) continue;
            if (!join && a.microbatches.size() > 1) ambiguous = true;
            if (join && i + 1 < actions.size() && actions[i + 1].op == OpType::P2 &&
                actions[i + 1].stage == a.stage) {
              ambiguous = true;
            }
          }
        }
        if (ambiguous) continue;
        const Schedule back = schedule_from_torch_csv(csv, "x.csv", {.join_consecutive_w = join});
        EXPECT_EQ(back.per_device, original.per_device) << where;
        EXPECT_EQ(back.stage_device, original.stage_device) << where;
        EXPECT_EQ(back.microbatches, original.microbatches);
        EXPECT_EQ(back.family, "torch-csv");
        EXPECT_EQ(back.backward == BackwardMode::fused, mode == BackwardMode::fused) << where;
        // Imported, it lowers and simulates to the same step time (on the plan's own chunks:
        // auto chooses them).
        PlanRequest r = testing::uniform_request({.devices = 4,
                                                  .microbatches = 8,
                                                  .chunks = plan.graph.meta.chunks,
                                                  .p2_concat = p2_concat});
        r.schedule = back.family;
        r.backward = back.backward;
        const Plan imported = make_plan_for_schedule(r, back);
        EXPECT_NEAR(imported.sim.makespan_us, plan.sim.makespan_us, 1e-6) << where;
        ++round_trips;
      }
    }
  }
  // 44 cases: 5 families that leave p2 to the backward mode (gpipe, 1f1b, interleaved,
  // looped-bfs, 1f1b-eager) x 3 modes and 7 that place it (zb-h1, zb-h2, zb-v, dualpipe-v,
  // v-half, v-min, auto) x 2bp, each at p2_concat 1 and 0 (dualpipe's two copies have no CSV
  // form). Ambiguous, so not read back: 2bp at p2_concat 0 of zb-h1, zb-h2, zb-v, dualpipe-v,
  // v-half and auto, and interleaved 2bp-fill at p2_concat 0. The other 37 round-trip.
  EXPECT_GE(round_trips, 37);
}

TEST(TorchCsv, ConcatenatedP2BecomesConsecutiveWCells) {
  Schedule s = generate_schedule("gpipe", {1, 1, 2});
  s.per_device[0] = {{OpType::F, 0, {0}},
                     {OpType::F, 0, {1}},
                     {OpType::P1, 0, {0}},
                     {OpType::P1, 0, {1}},
                     {OpType::P2, 0, {0, 1}}};
  EXPECT_EQ(schedule_to_torch_csv(s), "0F0,0F1,0I0,0I1,0W0,0W1\n");
  EXPECT_EQ(schedule_from_torch_csv("0F0,0F1,0I0,0I1,0W0,0W1\n", "a").per_device[0].size(), 6u);
  EXPECT_EQ(schedule_from_torch_csv("0F0,0F1,0I0,0I1,0W0,0W1\n", "a", {true}).per_device,
            s.per_device);
}

TEST(TorchCsv, CommunicationAndEmptyCellsAreSkipped) {
  const Schedule s =
      schedule_from_torch_csv("0F0,0SEND_F0,,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", "c.csv");
  EXPECT_EQ(s.devices, 2);
  EXPECT_EQ(s.per_device[0], (std::vector<Action>{{OpType::F, 0, {0}}, {OpType::B, 0, {0}}}));
  EXPECT_EQ(s.backward, BackwardMode::fused);
}

// Python's csv reader, and so PyTorch's loader, ends a line at "\n", "\r\n" or a lone "\r".
TEST(TorchCsv, EveryLineEndPythonReadsIsALineEnd) {
  const Schedule lf = schedule_from_torch_csv("0F0,1F0,1B0,0B0\n", "s.csv");
  for (const char* csv : {"0F0,1F0,1B0,0B0\r\n", "0F0,1F0,1B0,0B0\r"}) {
    const Schedule other = schedule_from_torch_csv(csv, "s.csv");
    EXPECT_EQ(other.per_device, lf.per_device) << csv;
  }
  const Schedule two = schedule_from_torch_csv("0F0,0B0\r1F0,1B0\r", "s.csv");
  EXPECT_EQ(two.devices, 2);
  EXPECT_EQ(error_of("0F0,0B0\r\r\n"),
            "s.csv row 2: a blank line after the last rank (PyTorch's csv reader takes it for a "
            "rank with no actions: remove it)");
}

TEST(TorchCsv, BadFilesNameFileRowAndCell) {
  EXPECT_EQ(error_of("0F0,0X0\n"),
            "s.csv row 1 cell 2 ('0X0'): unknown action type 'X' (expected F, I, W, B, "
            "OVERLAP_F_B; skipped: SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD, "
            "REDUCE_GRAD, WAIT_*)");
  EXPECT_EQ(error_of("0F0,0I0\n1F0,F1\n"),
            "s.csv row 2 cell 2 ('F1'): expected a stage number first");
  EXPECT_EQ(error_of("0I0,0F0,0W0\n"),
            "s.csv row 1 cell 1 ('0I0'): I before F of stage 0 micro-batch 0");
  EXPECT_EQ(error_of("0F0,0W0,0I0\n"),
            "s.csv row 1 cell 2 ('0W0'): W before I of stage 0 micro-batch 0");
  EXPECT_EQ(error_of("0F0,0F0,0B0\n"),
            "s.csv row 1 cell 2 ('0F0'): second F of stage 0 micro-batch 0");
  EXPECT_EQ(error_of("0F0,0B0\n0F1\n"),
            "s.csv row 2 cell 1 ('0F1'): stage 0 already runs on rank 0 (row 1)");
  // A count error names the action whose partner is missing (the F, the I); a micro-batch with
  // no action at all, the stage's first cell.
  EXPECT_EQ(error_of("0F0,0F1,0B0\n"),
            "s.csv row 1 cell 2 ('0F1'): stage 0 has no I or B for micro-batch 1 of 0..1");
  EXPECT_EQ(error_of("0F0,0I0\n"),
            "s.csv row 1 cell 2 ('0I0'): stage 0 has no W for micro-batch 0 of 0..0");
  EXPECT_EQ(error_of("0F0,0F1,0B0,0B1\n1F0,1I0,1F1,1B1\n"),
            "s.csv row 2 cell 2 ('1I0'): stage 1 has no W for micro-batch 0 of 0..1");
  EXPECT_EQ(error_of("0F0,0B0,0F1,0B1\n1F1,1B1\n"),
            "s.csv row 2 cell 1 ('1F1'): stage 1 has no F for micro-batch 0 of 0..1");
  EXPECT_EQ(error_of("0F0,0B0\n2F0,2B0\n"), "s.csv: stage 1 has no actions (stages 0..2 appear)");
  EXPECT_EQ(error_of("\n"), "s.csv: no rows (expected one row per rank)");
}

}  // namespace
}  // namespace pipeplan
