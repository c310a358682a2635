// `pipeplan export --format torch-csv` and `pipeplan import` end to end through the binary:
// a plan exported, imported and re-exported gives the identical CSV; a bad CSV ends in one line
// naming the file, row and cell, a non-zero exit and no output file (docs/reference/torch-csv.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "tests/cli_support.h"

namespace {

namespace fs = std::filesystem;

using Result = pipeplan::testing::CliResult;
Result run(const std::string& args) {
  return pipeplan::testing::run_pipeplan(args);
}

// The binary's path as a word of a shell command line.
std::string binary() {
  return pipeplan::testing::shell_quote(pipeplan::testing::pipeplan_binary());
}

using pipeplan::testing::read_file;
using pipeplan::testing::write_file;

class TorchCsvCli : public pipeplan::testing::TempDirTest {
 protected:
  // plan -> export -> import -> export: the two CSVs are byte-identical.
  void expect_round_trip(const std::string& plan_args, const std::string& import_args) {
    const Result plan = run("plan " + plan_args + " -o " + path("plan.json"));
    ASSERT_EQ(plan.status, 0) << plan_args << "\n" << plan.out;
    const Result exported =
        run("export --format torch-csv " + path("plan.json") + " -o " + path("sched.csv"));
    ASSERT_EQ(exported.status, 0) << exported.out;
    EXPECT_NE(exported.out.find("wrote " + path("sched.csv")), std::string::npos) << exported.out;
    const std::string csv = read_file(path("sched.csv"));
    ASSERT_FALSE(csv.empty());

    const Result imported =
        run("import " + path("sched.csv") + " " + import_args + " -o " + path("imported.json"));
    ASSERT_EQ(imported.status, 0) << imported.out;
    EXPECT_TRUE(fs::exists(path("imported.json")));
    const Result validated = run("validate " + path("imported.json"));
    EXPECT_EQ(validated.status, 0) << validated.out;

    const Result again =
        run("export --format torch-csv " + path("imported.json") + " -o " + path("again.csv"));
    ASSERT_EQ(again.status, 0) << again.out;
    EXPECT_EQ(read_file(path("again.csv")), csv) << plan_args;
  }

  // A failing import prints one line naming the file and `needle`, exits non-zero and writes no
  // plan.
  void expect_import_error(const std::string& csv, const std::string& needle) {
    write_file(path("bad.csv"), csv);
    const Result r =
        run("import " + path("bad.csv") + " --uniform 1:1:1:0 -o " + path("imported.json"));
    EXPECT_NE(r.status, 0) << csv;
    EXPECT_NE(r.out.find(path("bad.csv")), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_FALSE(fs::exists(path("imported.json")));
  }
};

TEST_F(TorchCsvCli, ZbH1ExportsTheDocumentedCsvAndRoundTrips) {
  expect_round_trip("--uniform 1:1:1:0 --stages 2 --microbatches 3 --schedule zb-h1 --backward 2bp",
                    "--uniform 1:1:1:0");
  // The example of docs/reference/torch-csv.md, cell for cell.
  EXPECT_EQ(read_file(path("sched.csv")),
            "0F0,0F1,0I0,0W0,0F2,0I1,0W1,0I2,0W2\n1F0,1I0,1F1,1I1,1W0,1F2,1I2,1W1,1W2\n");
}

TEST_F(TorchCsvCli, FusedInterleavedAndAutoPlansRoundTrip) {
  expect_round_trip("--uniform 1:1:1:0 --stages 4 --microbatches 8 --schedule 1f1b",
                    "--uniform 1:1:1:0");
  expect_round_trip(
      "--uniform 1:2:1:0.1 --stages 2 --chunks 2 --microbatches 4 --schedule interleaved "
      "--backward 2bp",
      "--uniform 1:2:1:0.1");
  expect_round_trip("--uniform 1:1:1:0 --stages 4 --microbatches 8 --schedule auto --backward 2bp",
                    "--uniform 1:1:1:0");
}

TEST_F(TorchCsvCli, ConcatenatedP2RoundTripsWithJoinW) {
  expect_round_trip(
      "--uniform 1:1:1:0 --stages 2 --microbatches 4 --schedule 1f1b --backward 2bp "
      "--p2-concat 0",
      "--uniform 1:1:1:0 --join-w");
  EXPECT_NE(read_file(path("sched.csv")).find("0W0,0W1,0W2,0W3"), std::string::npos);
}

// A plan grouping its p2 by --p2-concat K comes back with the same groups when import is given
// the same K; --p2-concat means nothing without --join-w, or on a CSV without W cells.
TEST_F(TorchCsvCli, GroupedP2RoundTripsWithJoinWAndTheSameP2Concat) {
  expect_round_trip(
      "--uniform 1:1:1:0 --stages 2 --microbatches 4 --schedule 1f1b --backward 2bp "
      "--p2-concat 2",
      "--uniform 1:1:1:0 --join-w --p2-concat 2");
  // The orders after the header line (whose family is torch-csv once imported): the same groups
  // (0P2_0+1 0P2_2+3), not one p2 over all four.
  const auto order = [&](const std::string& file) {
    const std::string text =
        nlohmann::json::parse(read_file(path(file))).at("schedule").get<std::string>();
    return text.substr(text.find('\n'));
  };
  EXPECT_EQ(order("imported.json"), order("plan.json"));
  EXPECT_NE(order("imported.json").find("0P2_2+3"), std::string::npos);
  const std::string csv = path("sched.csv");
  Result r = run("import " + csv + " --uniform 1:1:1:0 --p2-concat 2 -o " + path("never.json"));
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out,
            "pipeplan: error: --p2-concat: only with --join-w (it bounds how many consecutive W "
            "cells of a stage one p2 joins)\n");
  EXPECT_FALSE(fs::exists(path("never.json")));
  ASSERT_EQ(run("plan --uniform 1:1:1:0 --stages 2 --microbatches 4 --schedule 1f1b -o " +
                path("fused.json"))
                .status,
            0);
  ASSERT_EQ(run("export " + path("fused.json") + " -o " + path("fused.csv")).status, 0);
  r = run("import " + path("fused.csv") + " --uniform 1:1:1:0 --join-w --p2-concat 2");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out, "pipeplan: error: --p2-concat: " + path("fused.csv") +
                       " has no W cells (its backward is fused: B cells); leave --p2-concat out\n");
}

// export says how to read a plan's concatenated p2 back: its W cells are one micro-batch each.
TEST_F(TorchCsvCli, ExportSaysHowToJoinConcatenatedP2Back) {
  const std::string plan = "plan --uniform 1:1:1:0 --stages 2 --microbatches 4 --schedule 1f1b ";
  for (const auto& [args, hint] :
       {std::pair<std::string, std::string>{"--backward 2bp --p2-concat 0",
                                            "(up to 4 micro-batches) are one W cell per "
                                            "micro-batch: `pipeplan import --join-w` reads"},
        {"--backward 2bp --p2-concat 2", "`pipeplan import --join-w --p2-concat 2` reads"}}) {
    ASSERT_EQ(run(plan + args + " -o " + path("p.json")).status, 0) << args;
    const Result r = run("export " + path("p.json") + " -o " + path("s.csv"));
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(hint), std::string::npos) << args << "\n" << r.out;
  }
  ASSERT_EQ(run(plan + "--backward 2bp --p2-concat 1 -o " + path("p.json")).status, 0);
  EXPECT_EQ(run("export " + path("p.json") + " -o " + path("s.csv")).out.find("--join-w"),
            std::string::npos);
  // auto under 50 GiB leaves separate p2 calls of one stage side by side (15P2_1 15P2_2), which
  // --join-w would join: export does not suggest it.
  ASSERT_EQ(run("plan --model llama-7b --gpu h100 --seq 2048 --stages 8 -m 16 --memory 50GiB "
                "--schedule auto -o " +
                path("a.json"))
                .status,
            0);
  const Result side = run("export " + path("a.json") + " -o " + path("a.csv"));
  ASSERT_EQ(side.status, 0) << side.out;
  EXPECT_NE(side.out.find("separate p2 calls of one stage side by side"), std::string::npos)
      << side.out;
  EXPECT_EQ(side.out.find("--join-w"), std::string::npos) << side.out;
}

TEST_F(TorchCsvCli, BadCsvIsOneLineNamingFileRowAndCell) {
  // I of stage 1 micro-batch 0 before its F: row 2, cell 1.
  expect_import_error("0F0,0I0,0W0\n1I0,1F0,1W0\n", "row 2 cell 1");
  // Not an action at all.
  expect_import_error("0F0,0X0,0I0,0W0\n1F0,1I0,1W0\n", "row 1 cell 2");
  // Missing file.
  const Result r = run("import " + path("missing.csv") + " --uniform 1:1:1:0");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find(path("missing.csv")), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

// Every rank holds the same number of stages: a row of idle cells is a rank holding none, and
// another then holds more (dividing evenly is not enough).
TEST_F(TorchCsvCli, ARankWithoutItsShareOfStagesIsRefused) {
  // The rank short of its share is named (the row of idle cells), not the one holding more.
  expect_import_error("0F0,1F0,1B0,0B0\n1UNSHARD\n", "rank 1 (row 2) holds 0 of the 2 stages");
  expect_import_error("0F0,1F0,2F0,2B0,1B0,0B0\n3F0,3B0\n",
                      "rank 1 (row 2) holds 1 of the 4 stages");
}

// The stage count is the CSV's where --stages was not given: an error names the file.
TEST_F(TorchCsvCli, CountsTakenFromTheCsvAreNamedAsTheCsvs) {
  std::string csv;  // 40 ranks of one stage each, one micro-batch
  for (int rank = 0; rank < 40; ++rank)
    csv += std::to_string(rank) + "F0," + std::to_string(rank) + "B0\n";
  write_file(path("forty.csv"), csv);
  const Result r = run("import " + path("forty.csv") + " --model llama-7b --memory 0");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("forty.csv: 40 stages but llama-7b has 32 blocks"), std::string::npos)
      << r.out;
}

TEST_F(TorchCsvCli, DeadlockingCsvNamesTheRowAndCellThatCloseTheCycle) {
  expect_import_error(
      "0F0,0SEND_F0,0RECV_B0,0B0,0F1,0SEND_F1,0RECV_B1,0B1\r\n"
      "1RECV_F0,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1\r\n",
      "row 2 cell 4 ('1F1'): closes a dependency cycle (a deadlock)");
}

// A cell of the last stage's forward and its own backward runs in PyTorch (that backward never
// waits): import takes its sub-actions as actions in sequence, says so, and the plan validates
// and runs.
TEST_F(TorchCsvCli, ACellOfAForwardAndItsOwnBackwardImportsInSequenceAndRuns) {
  write_file(path("ov.csv"), "0F0,0F1,0B0,0B1\r\n(1F0;1B0)OVERLAP_F_B,(1F1;1B1)OVERLAP_F_B\r\n");
  const Result imported = run("import " + path("ov.csv") + " --model tiny -o " + path("ov.json"));
  ASSERT_EQ(imported.status, 0) << imported.out;
  EXPECT_EQ(imported.out.rfind("read " + path("ov.csv") +
                                   ": 8 actions on 2 ranks; 2 OVERLAP_F_B cells run their "
                                   "sub-actions in sequence, not overlapped\n",
                               0),
            0U)
      << imported.out;
  EXPECT_EQ(run("validate " + path("ov.json")).status, 0);
  const Result ran = run("run " + path("ov.json") + " --steps 1");
  EXPECT_EQ(ran.status, 0) << ran.out;
  EXPECT_NE(ran.out.find("step    1  loss"), std::string::npos) << ran.out;
  EXPECT_EQ(run("export " + path("ov.json")).out, "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
}

// Standard input is "stdin" in what import prints and in its errors, as every command names it.
TEST_F(TorchCsvCli, StandardInputIsNamedStdin) {
  write_file(path("s.csv"), "0F0,0B0\n1F0,1B0\n");
  const Result read = run("import - --uniform 1:1:1:0 < " + path("s.csv"));
  EXPECT_EQ(read.status, 0) << read.out;
  EXPECT_EQ(read.out.rfind("read stdin: 4 actions on 2 ranks\n", 0), 0U) << read.out;
  const Result differs = run("import - --uniform 1:1:1:0 --stages 3 < " + path("s.csv"));
  EXPECT_EQ(differs.out, "pipeplan: error: --stages: 3 differs from 2 in stdin\n");
  write_file(path("bad.csv"), "0F0,0B0\n1F0\n");
  const Result bad = run("import - --uniform 1:1:1:0 < " + path("bad.csv"));
  EXPECT_EQ(bad.out,
            "pipeplan: error: stdin row 2 cell 1 ('1F0'): stage 1 has no I or B for micro-batch 0 "
            "of 0..0\n");
  write_file(path("uneven.csv"), "0F0,2F0,2B0,0B0\n1F0,1B0\n");
  const Result uneven = run("import - --uniform 1:1:1:0 < " + path("uneven.csv"));
  EXPECT_EQ(uneven.out,
            "pipeplan: error: stdin: 3 stages on 2 ranks; pipeplan needs the same number of "
            "stages per rank\n");
}

// import reads both forms PyTorch writes, and its help says so.
TEST_F(TorchCsvCli, ImportHelpNamesBothForms) {
  const Result help = run("import --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("compute-only, or PyTorch's default compute_comms dump"),
            std::string::npos)
      << help.out;
}

TEST_F(TorchCsvCli, ImportSaysWhichCellsItSkipped) {
  const std::string fixture = pipeplan::testing::shell_quote(
      std::string(PIPEPLAN_SOURCE_DIR) +
      "/tests/schedules/fixtures/torch/interleaved_zb_compute_comms.csv");
  const Result r = run("import " + fixture + " --uniform 1:1:1:0 -o " + path("p.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("24 actions on 2 ranks; skipped 36 cells with no task-graph node (6 "
                       "RECV_B, 6 RECV_F, 4 REDUCE_GRAD, 4 RESHARD, 6 SEND_B, 6 SEND_F, 4 "
                       "UNSHARD; docs/reference/torch-csv.md)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(run("validate " + path("p.json")).status, 0);
}

// Recomputation is not in PyTorch's CSV: export says so, and import with the plan's own
// --recompute predicts the same step.
TEST_F(TorchCsvCli, ExportWarnsAboutRecomputationAndImportTakesItAgain) {
  const Result planned =
      run("plan --model llama-7b --stages 2 -m 4 --recompute 2 -o " + path("plan.json"));
  ASSERT_EQ(planned.status, 0) << planned.out;
  const Result warned =
      pipeplan::testing::run_shell("{ " + binary() + " export " + path("plan.json") + " -o " +
                                   path("s.csv") + " 2>&1 >/dev/null; }");
  EXPECT_EQ(warned.status, 0);
  EXPECT_EQ(warned.out, "pipeplan: warning: " + path("plan.json") +
                            ": the plan recomputes the first 2 blocks of each stage, which "
                            "PyTorch's CSV cannot carry (checkpoint those blocks in the model; "
                            "import with --recompute 2 to plan it again)\n");
  const auto step = [&](const std::string& file) {
    return run("show " + path(file) + " --json").out;
  };
  ASSERT_EQ(run("import " + path("s.csv") + " --model llama-7b --recompute 2 -o " + path("i.json"))
                .status,
            0);
  ASSERT_EQ(run("import " + path("s.csv") + " --model llama-7b -o " + path("none.json")).status, 0);
  const auto makespan = [&](const std::string& file) {
    return nlohmann::json::parse(step(file))["step_time_ms"].get<double>();
  };
  EXPECT_DOUBLE_EQ(makespan("i.json"), makespan("plan.json"));
  EXPECT_LT(makespan("none.json"), makespan("plan.json"));
}

TEST_F(TorchCsvCli, ExportWarnsAboutBpipeAndCarriesTheLayerSplit) {
  ASSERT_EQ(run("plan --model llama-7b --gpu a100 --stages 4 -m 8 --layers-per-stage 7,9,9,7 "
                "--bpipe on --memory 0 -o " +
                path("plan.json"))
                .status,
            0);
  // The warning alone on stderr; the CSV on stdout.
  const Result to_stdout = pipeplan::testing::run_shell("{ " + binary() + " export " +
                                                        path("plan.json") + " 2>&1 >/dev/null; }");
  EXPECT_EQ(to_stdout.status, 0);
  EXPECT_EQ(std::count(to_stdout.out.begin(), to_stdout.out.end(), '\n'), 1) << to_stdout.out;
  EXPECT_NE(to_stdout.out.find("pipeplan: warning: " + path("plan.json") +
                               ": 12 BPipe stash transfers (evict/load) are not representable"),
            std::string::npos)
      << to_stdout.out;
  const Result exported = run("export " + path("plan.json") + " -o " + path("s.csv"));
  ASSERT_EQ(exported.status, 0) << exported.out;
  EXPECT_NE(read_file(path("s.csv.layers.json")).find("\"pipeplan-torch-csv-layers\""),
            std::string::npos);
  // Import reads the split back: the imported plan has the exported plan's stage layers.
  const Result imported =
      run("import " + path("s.csv") + " --model llama-7b --gpu a100 -o " + path("i.json"));
  ASSERT_EQ(imported.status, 0) << imported.out;
  EXPECT_NE(imported.out.find("blocks per stage 7,9,9,7 from " + path("s.csv.layers.json")),
            std::string::npos)
      << imported.out;
  const auto stages = [&](const std::string& file) {
    return nlohmann::json::parse(read_file(path(file)))["meta"]["stage_layers"];
  };
  EXPECT_EQ(stages("i.json"), stages("plan.json"));
  EXPECT_EQ(stages("i.json")[1], nlohmann::json::array({8, 9}));
  // A split for another model is left out; one that contradicts --layers-per-stage is an error.
  const Result tiny = run("import " + path("s.csv") + " --model tiny");
  EXPECT_EQ(tiny.status, 0) << tiny.out;
  EXPECT_NE(tiny.out.find("is for model 'llama-7b', not 'tiny': balanced split"),
            std::string::npos);
  const Result differs =
      run("import " + path("s.csv") + " --model llama-7b --layers-per-stage 8,8,8,8");
  EXPECT_NE(differs.status, 0);
  EXPECT_EQ(std::count(differs.out.begin(), differs.out.end(), '\n'), 1) << differs.out;
  EXPECT_NE(differs.out.find("--layers-per-stage: 8,8,8,8 differs from blocks per stage 7,9,9,7"),
            std::string::npos);
  // A --layout that contradicts it is named as given.
  const Result layout =
      run("import " + path("s.csv") + " --model llama-7b --layout 'Et*7|t*9|t*9|t*7L'");
  EXPECT_EQ(layout.status, 0) << layout.out;
  const Result layout_differs =
      run("import " + path("s.csv") + " --model llama-7b --layout 'Et*8|t*8|t*8|t*8L'");
  EXPECT_NE(layout_differs.status, 0);
  EXPECT_EQ(layout_differs.out,
            "pipeplan: error: --layout: 'Et*8|t*8|t*8|t*8L' differs from blocks per stage 7,9,9,7 "
            "from " +
                path("s.csv.layers.json") + "\n");
  // The side file's model name is printed: one holding a control character is refused.
  std::string side = read_file(path("s.csv.layers.json"));
  side.replace(side.find("\"llama-7b\""), 10, "\"x\\u001b[31m\"");
  write_file(path("s.csv.layers.json"), side);
  const Result escape = run("import " + path("s.csv") + " --model tiny");
  EXPECT_NE(escape.status, 0);
  EXPECT_EQ(escape.out, "pipeplan: error: " + path("s.csv.layers.json") +
                            ": field 'model' holds control character U+001B at byte 1 (names and "
                            "labels are printable text)\n");
}

// A plan with two copies of the model has no CSV form: the one line names the plan.
TEST_F(TorchCsvCli, ExportOfTwoCopiesNamesThePlan) {
  ASSERT_EQ(run("plan --uniform 1:1:1:0 --stages 2 -m 4 --schedule dualpipe -o " + path("dp.json"))
                .status,
            0);
  const std::string refused =
      ": torch CSV: schedule 'dualpipe' holds 2 copies of the model, which PyTorch's pipeline "
      "CSV cannot express (one rank per stage, every micro-batch through every stage)\n";
  const Result r = run("export " + path("dp.json") + " -o " + path("dp.csv"));
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out, "pipeplan: error: " + path("dp.json") + refused);
  EXPECT_FALSE(fs::exists(path("dp.csv")));
  EXPECT_EQ(run("export - < " + path("dp.json")).out, "pipeplan: error: stdin" + refused);
}

TEST_F(TorchCsvCli, ExportRefusesAnUnknownFormat) {
  ASSERT_EQ(
      run("plan --uniform 1:1:1:0 --stages 2 --microbatches 2 -o " + path("plan.json")).status, 0);
  const Result r = run("export --format megatron " + path("plan.json") + " -o " + path("x.csv"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--format"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_FALSE(fs::exists(path("x.csv")));
}

}  // namespace
