// What PyTorch writes, read as PyTorch writes it: the fixtures in fixtures/torch/ are written by
// hand from torch.distributed.pipelining's format (`_Action.__repr__`, `csv.writer` with CRLF
// line ends, None as an empty cell), one per form docs/reference/torch-csv.md lists.
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "schedules/deadlock.h"
#include "schedules/family.h"
#include "schedules/torch_csv.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

const std::filesystem::path kFixtures =
    std::filesystem::path(PIPEPLAN_SOURCE_DIR) / "tests/schedules/fixtures/torch";

using testing::error_of;

std::string error_of(std::string_view csv) {
  return error_of([&] { schedule_from_torch_csv(csv, "s.csv"); });
}

TEST(TorchCsvForms, FixturesKeepPyTorchsCrlfLineEnds) {
  const std::string text = read_text_file(kFixtures / "1f1b_compute_only.csv");
  EXPECT_NE(text.find("\r\n"), std::string::npos);
}

TEST(TorchCsvForms, ComputeOnlyWithIdleCells) {
  TorchCsvReport report;
  const Schedule s = load_torch_csv(kFixtures / "1f1b_compute_only.csv", {}, &report);
  EXPECT_EQ(s.devices, 2);
  EXPECT_EQ(s.microbatches, 4);
  EXPECT_EQ(s.backward, BackwardMode::fused);
  EXPECT_EQ(report.actions, 16);
  EXPECT_EQ(report.skipped_total, 0);
}

TEST(TorchCsvForms, DefaultComputeCommsDumpSkipsCommunicationAndFsdpCells) {
  TorchCsvReport report;
  const Schedule s = load_torch_csv(kFixtures / "interleaved_zb_compute_comms.csv", {}, &report);
  EXPECT_EQ(s.stage_device, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(s.backward, BackwardMode::twobp);
  EXPECT_EQ(report.actions, 24);
  EXPECT_EQ(report.skipped_text(),
            "6 RECV_B, 6 RECV_F, 4 REDUCE_GRAD, 4 RESHARD, 6 SEND_B, 6 SEND_F, 4 UNSHARD");
  EXPECT_EQ(report.skipped_total, 36);
  EXPECT_FALSE(find_deadlock(s));
}

// torch 2.15's default dump writes <stage>WAIT_REDUCE_GRAD after every <stage>REDUCE_GRAD: the
// fixture with that cell added imports to the same schedule, each wait counted as skipped.
TEST(TorchCsvForms, WaitReduceGradCellsAreSkippedAndCounted) {
  const std::string plain = read_text_file(kFixtures / "interleaved_zb_compute_comms.csv");
  std::string waits;
  for (std::size_t at = 0;;) {
    const std::size_t found = plain.find("REDUCE_GRAD", at);
    const std::size_t end = found == std::string::npos ? plain.size() : found + 11;
    waits += plain.substr(at, end - at);
    if (found == std::string::npos) break;
    std::size_t digits = found;
    while (digits > 0 && plain[digits - 1] >= '0' && plain[digits - 1] <= '9')
      --digits;
    waits += "," + plain.substr(digits, found - digits) + "WAIT_REDUCE_GRAD";
    at = end;
  }
  TorchCsvReport plain_report;
  TorchCsvReport report;
  const Schedule expected = schedule_from_torch_csv(plain, "plain.csv", {}, &plain_report);
  const Schedule s = schedule_from_torch_csv(waits, "waits.csv", {}, &report);
  EXPECT_EQ(s.per_device, expected.per_device);
  EXPECT_EQ(report.skipped.at("WAIT_REDUCE_GRAD"), plain_report.skipped.at("REDUCE_GRAD"));
  EXPECT_EQ(report.skipped_total, plain_report.skipped_total + 4);
  // Any other wait torch may add is skipped too; a name that is not one stays an error.
  EXPECT_NO_THROW(schedule_from_torch_csv("0F0,0WAIT_UNSHARD,0B0\n", "w.csv"));
  EXPECT_NE(error_of("0F0,0WAIT_x,0B0\n").find("unknown action type 'WAIT_x'"), std::string::npos);
}

// Every dump PyTorch's own _dump_csv wrote (dumps/, by dump_torch_schedules.py; torch version in
// dumps/VERSION), for every multi-stage schedule class torch ships: the default form (with
// communication, FSDP and WAIT_* cells) imports to the very schedule of the compute-only form,
// which checks and has no deadlock.
TEST(TorchCsvForms, EveryDumpOfTorchsOwnScheduleClassesImports) {
  int dumps = 0;
  std::set<std::string> classes;
  for (const auto& entry : std::filesystem::directory_iterator(kFixtures / "dumps")) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".csv") || name.ends_with(".compute_only.csv")) continue;
    SCOPED_TRACE(name);
    const std::string stem = name.substr(0, name.size() - 4);
    TorchCsvReport report;
    const Schedule full = load_torch_csv(entry.path(), {}, &report);
    const Schedule compute = load_torch_csv(kFixtures / "dumps" / (stem + ".compute_only.csv"));
    EXPECT_EQ(full.per_device, compute.per_device);
    EXPECT_EQ(full.stage_device, compute.stage_device);
    EXPECT_GT(report.skipped_total, 0);  // the default form has communication cells
    EXPECT_NO_THROW(check_schedule(full));
    EXPECT_FALSE(find_deadlock(full));
    classes.insert(stem.substr(0, stem.find('-')));
    ++dumps;
  }
  EXPECT_EQ(dumps, 15);
  EXPECT_EQ(classes, (std::set<std::string>{"ScheduleDualPipeV", "ScheduleInterleaved1F1B",
                                            "ScheduleInterleavedZeroBubble", "ScheduleLoopedBFS",
                                            "ScheduleZBVZeroBubble"}));
}

TEST(TorchCsvForms, OverlapCellsBecomeOverlappedPairs) {
  const Schedule s = load_torch_csv(kFixtures / "dualpipev_compute_only.csv");
  EXPECT_EQ(s.stage_device, (std::vector<int>{0, 1, 1, 0}));
  const std::vector<Action>& rank0 = s.per_device[0];
  ASSERT_GE(rank0.size(), 6u);
  Action forward{OpType::F, 0, {3}};  // (0F3;3B0)OVERLAP_F_B: F first, overlapping the B
  forward.overlaps_next = true;
  EXPECT_EQ(rank0[4], forward);
  EXPECT_EQ(rank0[5], (Action{OpType::B, 3, {0}}));
  EXPECT_EQ(rank0.size(), 16u);  // 15 cells, one of them two actions
  // Written back as the one cell it came from.
  EXPECT_NE(schedule_to_torch_csv(s).find(",(0F3;3B0)OVERLAP_F_B,"), std::string::npos);
}

// An OVERLAP_F_B cell that is not a forward then a backward of another micro-batch runs its
// sub-actions one after the other, as written.
TEST(TorchCsvForms, OtherOverlapCellsRunInOrder) {
  const Schedule s = schedule_from_torch_csv("0F0,0F1,(0B0;0F2)OVERLAP_F_B,0B1,0B2\r\n", "o.csv");
  ASSERT_EQ(s.per_device[0].size(), 6u);
  for (const Action& a : s.per_device[0])
    EXPECT_FALSE(a.overlaps_next) << format_action(a);
}

// PyTorch starts a cell once the inputs its sub-actions take from other stages are there, then
// runs them one after another: the last stage's backward never waits (its input is its own
// forward), so a cell of that forward and its own backward runs, as actions in sequence.
TEST(TorchCsvForms, ACellOfTheLastStagesForwardAndItsOwnBackwardRunsInSequence) {
  TorchCsvReport report;
  const Schedule s = schedule_from_torch_csv(
      "0F0,0F1,0B0,0B1\r\n(1F0;1B0)OVERLAP_F_B,(1F1;1B1)OVERLAP_F_B\r\n", "ov.csv", {}, &report);
  EXPECT_EQ(
      s.per_device[1],
      (std::vector<Action>{
          {OpType::F, 1, {0}}, {OpType::B, 1, {0}}, {OpType::F, 1, {1}}, {OpType::B, 1, {1}}}));
  EXPECT_FALSE(find_deadlock(s));
  EXPECT_EQ(report.cells_in_sequence, 2);
  // An I and its W as well. DualPipeV's pairs are no cells in sequence; the fixture's two
  // backwards in one cell are one.
  EXPECT_EQ(error_of("0F0,0I0,0W0\n(1F0;1I0;1W0)OVERLAP_F_B\n"), "<no error>");
  TorchCsvReport pairs;
  load_torch_csv(kFixtures / "dumps/ScheduleDualPipeV-p4-m8.compute_only.csv", {}, &pairs);
  EXPECT_EQ(pairs.cells_in_sequence, 0);
  load_torch_csv(kFixtures / "dualpipev_compute_only.csv", {}, &pairs);
  EXPECT_EQ(pairs.cells_in_sequence, 1);
  // Deadlocks still: a stage's backward that needs the next stage's, which needs this cell's
  // forward; another stage's backward that needs the one in the cell.
  EXPECT_EQ(error_of("0F0,(2F0;2B0)OVERLAP_F_B,0B0\n1F0,3F0,3B0,1B0\n"),
            "s.csv row 1 cell 2 ('(2F0;2B0)OVERLAP_F_B' part 2, '2B0'): closes a dependency "
            "cycle (a deadlock): it waits for part 1 ('2F0') of this cell, which starts only once "
            "the inputs of all its parts are there");
  EXPECT_EQ(error_of("0F0,(1F0;1B0;0B0)OVERLAP_F_B\n"),
            "s.csv row 1 cell 2 ('(1F0;1B0;0B0)OVERLAP_F_B' part 3, '0B0'): closes a dependency "
            "cycle (a deadlock): it waits for part 2 ('1B0') of this cell, which starts only once "
            "the inputs of all its parts are there");
}

TEST(TorchCsvForms, WaitCellsAndQuotedCellsAreRead) {
  TorchCsvReport report;
  const Schedule s = schedule_from_torch_csv(
      "\"0F0\",0SEND_F0,0WAIT_SEND_F0,\"0RECV_B0\",0B0\r\n"
      "1RECV_F0,1WAIT_RECV_F0,1F0, 1B0 ,1SEND_B0\r\n",
      "w.csv", {}, &report);
  EXPECT_EQ(s.per_device[0], (std::vector<Action>{{OpType::F, 0, {0}}, {OpType::B, 0, {0}}}));
  EXPECT_EQ(report.skipped_text(),
            "1 RECV_B, 1 RECV_F, 1 SEND_B, 1 SEND_F, 1 WAIT_RECV_F, "
            "1 WAIT_SEND_F");
}

// What PyTorch's loader cannot read is refused naming the cell: it opens the file without
// utf-8-sig, so a byte-order mark is part of the first action, which then matches nothing; and
// _Action.from_str's pattern starts every action, skipped kinds included, with its stage.
TEST(TorchCsvForms, WhatPyTorchsLoaderCannotReadIsRefused) {
  EXPECT_EQ(error_of("\xEF\xBB\xBF"
                     "0F0,0B0\r\n"),
            "s.csv row 1 cell 1 ('0F0'): the file starts with a UTF-8 byte-order mark, which "
            "PyTorch's loader reads as part of this action (it opens the file without "
            "utf-8-sig): save the file without it");
  EXPECT_NE(error_of("\xEF\xBB\xBF\"0F0\",0B0\n")
                .find("row 1 cell 1 ('\"0F0\"'): the file starts "
                      "with a UTF-8 byte-order mark"),
            std::string::npos);
  EXPECT_EQ(error_of("0F0,UNSHARD,0B0\n"),
            "s.csv row 1 cell 2 ('UNSHARD'): expected a stage number first (PyTorch's loader "
            "reads no action without one: 0UNSHARD, not UNSHARD)");
  EXPECT_EQ(error_of("0F0,(0B0;REDUCE_GRAD)OVERLAP_F_B\n"),
            "s.csv row 1 cell 2 ('(0B0;REDUCE_GRAD)OVERLAP_F_B' part 2, 'REDUCE_GRAD'): expected "
            "a stage number first (PyTorch's loader reads no action without one: 0REDUCE_GRAD, "
            "not REDUCE_GRAD)");
  EXPECT_EQ(error_of("0UNSHARD,0F0,0B0,0REDUCE_GRAD,0RESHARD\n"), "<no error>");
}

// As Python's csv reader and _Action.from_str take them: a quote opens a quoted cell only as its
// first character (after a space, or after a closing quote, it is text, which no action holds),
// and from_str strips the whitespace str.strip() does, inside quotes too.
TEST(TorchCsvForms, QuotesAndSpacesAreReadAsPythonReadsThem) {
  const std::string quote_as_text =
      "'\"' in the action (Python's csv reader takes a quote as text unless it is the cell's "
      "first character)";
  EXPECT_EQ(error_of("0F0, \"0F1\",0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n"),
            "s.csv row 1 cell 2 ('\"0F1\"'): " + quote_as_text);
  EXPECT_EQ(error_of("0F0,\"\" \"0B0\"\n"), "s.csv row 1 cell 2 ('\"0B0\"'): " + quote_as_text);
  EXPECT_EQ(error_of("0F0,\"0B\"\"0\"\n"), "s.csv row 1 cell 2 ('0B\"0'): " + quote_as_text);
  const Schedule plain = schedule_from_torch_csv("0F0,0B0\n", "s.csv");
  for (const char* csv : {"0F0, 0B0 \n", "\"0F0\",\" 0B0\t\"\n", "\"0F\"0,\"0B0\" \n",
                          "0F0\v,\f0B0\x1c\n", "(0F0 ; 0B0\x1f)OVERLAP_F_B\n"}) {
    EXPECT_EQ(error_of(csv), "<no error>") << csv;
    EXPECT_EQ(schedule_from_torch_csv(csv, "s.csv").per_device, plain.per_device) << csv;
  }
}

TEST(TorchCsvForms, DeadlockNamesTheCellThatClosesTheCycle) {
  EXPECT_EQ(error_of([] { load_torch_csv(kFixtures / "deadlock.csv"); }),
            (kFixtures / "deadlock.csv").string() +
                " row 2 cell 4 ('1F1'): closes a dependency cycle (a deadlock): it waits for row "
                "1 cell 5 ('0F1'), which runs after row 1 cell 4 ('0B0'), which waits for row 2 "
                "cell 5 ('1B0'), which runs after this cell");
  // One device waiting on itself: a V whose return stage runs its backward first.
  EXPECT_EQ(error_of("0F0,1F0,1B0,0B0\n"), "<no error>");
  EXPECT_NE(error_of("0F0,0F1,1F0,1F1,0B0,1B0,0B1,1B1\n")
                .find("row 1 cell 5 ('0B0'): closes a dependency cycle (a deadlock): it waits "
                      "for row 1 cell 6 ('1B0'), which runs after this cell"),
            std::string::npos);
  // A cell starts once all its sub-actions' inputs are there: 1F0 (part 2) needs 0F0 of the
  // same cell. The sub-action that waits is named, with its own part.
  EXPECT_EQ(error_of("(0F0;1F0)OVERLAP_F_B,(0B0;1B0)OVERLAP_F_B\n"),
            "s.csv row 1 cell 1 ('(0F0;1F0)OVERLAP_F_B' part 2, '1F0'): closes a dependency "
            "cycle (a deadlock): it waits for part 1 ('0F0') of this cell, which starts only once "
            "the inputs of all its parts are there");
  // A rank waiting on a cell elsewhere: the part it needs, and the part that holds the cell.
  EXPECT_EQ(error_of("0F0,(0F1;0B0)OVERLAP_F_B,0B1\n1F0,1F1,1B0,1B1\n"),
            "s.csv row 2 cell 2 ('1F1'): closes a dependency cycle (a deadlock): it waits for row "
            "1 cell 2 ('(0F1;0B0)OVERLAP_F_B' part 1, '0F1'), which starts only with part 2 "
            "('0B0') of its cell, which waits for row 2 cell 3 ('1B0'), which runs after this "
            "cell");
  EXPECT_EQ(error_of("0F0,0B0,0F1,0B1\n1F0,(1F1;1B0)OVERLAP_F_B,1B1\n2F0,2B0,2F1,2B1\n"),
            "s.csv row 2 cell 2 ('(1F1;1B0)OVERLAP_F_B' part 1, '1F1'): closes a dependency "
            "cycle (a deadlock): it waits for row 1 cell 3 ('0F1'), which runs after row 1 cell 2 "
            "('0B0'), which waits for part 2 ('1B0') of this cell, which starts only once the "
            "inputs of all its parts are there");
}

// What PyTorch's runtime cannot run, though every cell is well formed, is refused naming the
// cell: an OVERLAP_F_B cell starts once all its sub-actions' inputs are there (one needing
// another's output, or waiting on what runs after the cell, deadlocks); the last stage's
// forwards run in micro-batch order (the losses are read back by micro-batch in the order they
// were computed); a blank line after the last rank is one more rank to PyTorch's csv reader.
TEST(TorchCsvForms, WhatPyTorchsRuntimeCannotRunIsRefused) {
  EXPECT_EQ(error_of("0F0,3F0,3B0,0B0\n(1F0;2F0)OVERLAP_F_B,2B0,1B0\n"),
            "s.csv row 2 cell 1 ('(1F0;2F0)OVERLAP_F_B' part 2, '2F0'): closes a dependency "
            "cycle (a deadlock): it waits for part 1 ('1F0') of this cell, which starts only once "
            "the inputs of all its parts are there");
  EXPECT_NE(error_of("0F0,(2F0;2B0)OVERLAP_F_B,0B0\n1F0,3F0,3B0,1B0\n")
                .find("closes a dependency cycle (a deadlock)"),
            std::string::npos);
  EXPECT_NE(error_of("0F0,2F0,2B0,0F1,2F1,0B0,2B1,0B1\n1F0,3F0,(3B0;1F1)OVERLAP_F_B,1B0,3F1,3B1,"
                     "1B1\n")
                .find("it waits for row 1 cell 4 ('0F1'), which runs after row 1 cell 3 ('2B0')"),
            std::string::npos);
  EXPECT_EQ(error_of("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n"),
            "s.csv row 2 cell 1 ('1F1'): the last stage (1) runs the forward of micro-batch 1 "
            "where micro-batch 0's is due: PyTorch's runtime reads the losses back by micro-batch "
            "in the order the last stage computed them, so its forwards must run in micro-batch "
            "order");
  EXPECT_EQ(error_of("0F0,0B0\n1F0,1B0\n\n"),
            "s.csv row 3: a blank line after the last rank (PyTorch's csv reader takes it for a "
            "rank with no actions: remove it)");
  EXPECT_EQ(error_of("0F0,0B0\n1F0,1B0\r\n"), "<no error>");
  EXPECT_EQ(error_of("0F0,0B0\n\n1F0,1B0\n"), "<no error>");  // an idle rank between
}

TEST(TorchCsvForms, MalformedFormsAndLimitsNameRowAndCell) {
  EXPECT_EQ(error_of("0F0,(0B0;1F0\n"), "s.csv row 1 cell 2 ('(0B0;1F0'): '(' without ')'");
  EXPECT_NE(error_of("0F0,(0B0)OVERLAP_X\n").find("unknown action type 'OVERLAP_X'"),
            std::string::npos);
  EXPECT_NE(error_of("0F0,()OVERLAP_F_B\n").find("OVERLAP_F_B without sub-actions"),
            std::string::npos);
  EXPECT_NE(error_of("0F0,(0B0;(1F0))OVERLAP_F_B\n").find("nested sub-actions"), std::string::npos);
  EXPECT_NE(error_of("0F0,\"0B0\n").find("unterminated quote"), std::string::npos);
  EXPECT_NE(error_of("0F999999999999999\n").find("micro-batch number out of range"),
            std::string::npos);
  EXPECT_EQ(error_of("0F70000\n"),
            "s.csv row 1 cell 1 ('0F70000'): micro-batch 70000 is above the limit of 65535 "
            "(docs/reference/limits.md)");
  EXPECT_NE(error_of("5000F0\n").find("stage 5000 is above the limit of 1023"), std::string::npos);
  EXPECT_NE(error_of("0F0,0B0\n1F0,1B0\n2F0,2B0\n3F0,3B0\n4F65535\n")
                .find("5 stages x 65536 micro-batches is above the limit of 262144"),
            std::string::npos);
  std::string rows;
  for (int r = 0; r < 1100; ++r)
    rows += std::to_string(r) + "F0," + std::to_string(r) + "B0\n";
  EXPECT_NE(error_of(rows).find("s.csv row 1025: ranks is above the limit of 1024"),
            std::string::npos);
}

// Blank lines past the limit of rows: with no rank before them, the file has none; after the
// last rank, the first is named; with a rank after them, they are rows past the limit.
TEST(TorchCsvForms, BlankLinesPastTheLimitOfRowsNameWhatTheyAre) {
  const std::string blank(1100, '\n');
  EXPECT_EQ(error_of(blank), "s.csv: no rows (expected one row per rank)");
  EXPECT_EQ(error_of(" \r\n\t" + blank), "s.csv: no rows (expected one row per rank)");
  EXPECT_EQ(error_of("0F0,0B0\n1F0,1B0\n" + blank),
            "s.csv row 3: a blank line after the last rank (PyTorch's csv reader takes it for a "
            "rank with no actions: remove it)");
  EXPECT_EQ(error_of(blank + "0F0,0B0\n"),
            "s.csv row 1025: ranks is above the limit of 1024 "
            "(docs/reference/limits.md)");
}

TEST(Deadlock, NoGeneratedScheduleDeadlocks) {
  int checked = 0;
  for (const ScheduleFamily* family : schedule_families()) {
    if (family->traits().needs_costs) continue;
    for (const int p : {2, 4}) {
      const ScheduleRequest request{
          p, family->traits().chunks.preferred, 2 * p, std::nullopt, 0, nullptr};
      try {
        family->check(request);
      } catch (const Error&) {
        continue;
      }
      EXPECT_FALSE(find_deadlock(family->generate(request))) << family->name() << " P=" << p;
      ++checked;
    }
  }
  // 13 families registered in this binary (12 of schedules/ and planner/search, and the example
  // 1f1b-eager), less auto (built from the costs), each at P = 2 and 4: check() refuses none.
  EXPECT_GE(checked, 24);
}

}  // namespace
}  // namespace pipeplan
