// plan -> export --format torch-csv -> import through the binary: what export says of reading a
// plan back holds (auto plans at several sizes), the side file comes back with its CSV only, and
// import refuses what plan refuses (docs/reference/torch-csv.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "tests/cli_support.h"

namespace {

namespace fs = std::filesystem;

using Result = pipeplan::testing::CliResult;
Result run(const std::string& args) {
  return pipeplan::testing::run_pipeplan(args);
}

using pipeplan::testing::read_file;
using pipeplan::testing::write_file;

int lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// Whether a device's order in `orders` ("\n0: 0F0 ... 3P2_0 3P2_1+2\n1: ...") holds `calls`
// ("3P2_0 3P2_1+2") one after another.
bool holds_calls(const std::string& orders, const std::string& calls) {
  for (std::size_t at = orders.find(" " + calls); at != std::string::npos;
       at = orders.find(" " + calls, at + 1)) {
    const std::size_t end = at + 1 + calls.size();
    if (end < orders.size() && (orders[end] == ' ' || orders[end] == '\n')) return true;
  }
  return false;
}

class TorchCsvRoundTripCli : public pipeplan::testing::TempDirTest {
 protected:
  nlohmann::json plan_json(const std::string& name) const {
    return nlohmann::json::parse(read_file(path(name)));
  }
  // A plan's per-device orders: its schedule text after the header line (whose family an
  // import names torch-csv).
  std::string orders(const std::string& name) const {
    const std::string text = plan_json(name).at("schedule").get<std::string>();
    return text.substr(text.find('\n'));
  }
  double step_ms(const std::string& name) const {
    return nlohmann::json::parse(run("show " + path(name) + " --json").out)
        .at("step_time_ms")
        .get<double>();
  }
  // An import that fails: one line, `expected` exactly, a non-zero exit and no plan written.
  void expect_import_refused(const std::string& args, const std::string& expected) {
    const Result r = run("import " + args + " -o " + path("never.json"));
    EXPECT_NE(r.status, 0) << args;
    EXPECT_EQ(r.out, "pipeplan: error: " + expected + "\n") << args;
    EXPECT_FALSE(fs::exists(path("never.json"))) << args;
  }
};

// Where export says `import --join-w --p2-concat K` reads a plan's p2 calls back, it does: the
// imported plan has the plan's orders and p2_concat. Where it says none does, that import
// groups them otherwise, as export names them. Auto leaves separate p2 calls side by side at
// some sizes and not at others: both are met.
TEST_F(TorchCsvRoundTripCli, AutoPlansComeBackExactlyWhereExportSaysTheyDo) {
  const std::string costs = "--model llama-7b --gpu h100 --memory 0";
  int exact = 0, regrouped = 0;
  for (const auto& [stages, m, concat] :
       {std::tuple{2, 8, 4}, std::tuple{6, 7, 2}, std::tuple{2, 8, 2}, std::tuple{4, 8, 3},
        std::tuple{3, 6, 0}, std::tuple{4, 8, 0}, std::tuple{4, 12, 4}, std::tuple{8, 16, 2}}) {
    const std::string sizes = "--stages " + std::to_string(stages) + " -m " + std::to_string(m) +
                              " --p2-concat " + std::to_string(concat);
    SCOPED_TRACE(sizes);
    ASSERT_EQ(
        run("plan " + costs + " --schedule auto --auto-copies 1 " + sizes + " -o " + path("p.json"))
            .status,
        0);
    const Result exported = run("export " + path("p.json") + " -o " + path("s.csv"));
    ASSERT_EQ(exported.status, 0) << exported.out;
    const std::string join =
        "--join-w" + (concat > 0 ? " --p2-concat " + std::to_string(concat) : std::string());
    const Result imported =
        run("import " + path("s.csv") + " " + costs + " " + join + " -o " + path("i.json"));
    ASSERT_EQ(imported.status, 0) << imported.out;
    const std::string hint = "`pipeplan import " + join + "` reads them back as this plan's calls";
    const std::string none = ", so no import reads this plan's calls back\n";
    if (exported.out.find(hint) != std::string::npos) {
      EXPECT_EQ(orders("i.json"), orders("p.json")) << exported.out;
      EXPECT_EQ(plan_json("i.json")["meta"]["p2_concat"], concat);
      EXPECT_DOUBLE_EQ(step_ms("i.json"), step_ms("p.json"));
      ++exact;
    } else {
      const std::size_t at = exported.out.find(") read back as ");
      ASSERT_NE(exported.out.find(none), std::string::npos) << exported.out;
      ASSERT_NE(at, std::string::npos) << exported.out;
      const std::size_t open = exported.out.rfind('(', at);
      const std::string planned = exported.out.substr(open + 1, at - open - 1);
      const std::string read = exported.out.substr(at + 15, exported.out.find(none) - at - 15);
      EXPECT_TRUE(holds_calls(orders("p.json"), planned)) << planned;
      EXPECT_TRUE(holds_calls(orders("i.json"), read)) << read;
      EXPECT_NE(orders("i.json"), orders("p.json"));
      ++regrouped;
    }
  }
  EXPECT_GT(exact, 0);
  EXPECT_GT(regrouped, 0);
}

// --uniform gives auto two blocks per device; an import reads as many from the side file, so a
// plan of one chunk (each stage two blocks) comes back as planned (its p2s one micro-batch each,
// which no --join-w need join).
TEST_F(TorchCsvRoundTripCli, UniformAutoPlansComeBack) {
  for (const std::string sizes : {"--stages 2 -m 1", "--stages 2 -m 4", "--stages 4 -m 8"}) {
    SCOPED_TRACE(sizes);
    ASSERT_EQ(run("plan --uniform 1:2:1:0.5 --schedule auto --auto-copies 1 --p2-concat 1 " +
                  sizes + " -o " + path("u.json"))
                  .status,
              0);
    ASSERT_EQ(run("export " + path("u.json") + " -o " + path("u.csv")).status, 0);
    const Result imported =
        run("import " + path("u.csv") + " --uniform 1:2:1:0.5 -o " + path("i.json"));
    ASSERT_EQ(imported.status, 0) << imported.out;
    EXPECT_EQ(orders("i.json"), orders("u.json"));
    EXPECT_EQ(plan_json("i.json")["meta"]["stage_layers"],
              plan_json("u.json")["meta"]["stage_layers"]);
    EXPECT_DOUBLE_EQ(step_ms("i.json"), step_ms("u.json"));
  }
}

// A side file left beside a CSV written since (export to standard output writes none) is
// refused naming both files, not applied to it; export again with -o writes both.
TEST_F(TorchCsvRoundTripCli, ASideFileOfAnotherCsvIsRefusedNamingBoth) {
  ASSERT_EQ(
      run("plan --model llama-7b --stages 2 -m 4 --layers-per-stage 12,20 -o " + path("a.json"))
          .status,
      0);
  ASSERT_EQ(run("plan --model llama-7b --stages 2 -m 6 -o " + path("b.json")).status, 0);
  ASSERT_EQ(run("export " + path("a.json") + " -o " + path("s.csv")).status, 0);
  ASSERT_EQ(run("export " + path("b.json") + " > " + path("s.csv")).status, 0);
  const std::string csv = read_file(path("s.csv"));
  const Result r = run("import " + path("s.csv") + " --model llama-7b -o " + path("i.json"));
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_EQ(r.out.rfind("pipeplan: error: " + path("s.csv.layers.json") +
                            ": written with another " + path("s.csv") + " (",
                        0),
            0U)
      << r.out;
  EXPECT_NE(r.out.find("; " + path("s.csv") + " now has " + std::to_string(csv.size()) + " bytes"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(path("i.json")));
  EXPECT_EQ(read_file(path("s.csv")), csv);
  // Exported again with its side file, the CSV imports with the plan's own split.
  ASSERT_EQ(run("export " + path("b.json") + " -o " + path("s.csv")).status, 0);
  const Result again = run("import " + path("s.csv") + " --model llama-7b -o " + path("i.json"));
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("blocks per stage 16,16 from " + path("s.csv.layers.json") + "\n"),
            std::string::npos)
      << again.out;
  // A side file that is a link to nothing is refused, not taken for none.
  fs::remove(path("s.csv.layers.json"));
  fs::create_symlink(path("nonexistent"), path("s.csv.layers.json"));
  expect_import_refused(path("s.csv") + " --model llama-7b",
                        path("s.csv.layers.json") + ": a symbolic link to '" + path("nonexistent") +
                            "', which does not exist (remove the link, or export the plan again)");
}

// What plan refuses beside a schedule it is not for, import refuses beside the CSV's, in the
// words plan uses.
TEST_F(TorchCsvRoundTripCli, ImportRefusesWhatPlanRefusesBesideItsSchedule) {
  ASSERT_EQ(run("plan --uniform 1:1:1:0 --stages 2 -m 2 --schedule 1f1b --backward 2bp -o " +
                path("p.json"))
                .status,
            0);
  ASSERT_EQ(run("export " + path("p.json") + " -o " + path("s.csv")).status, 0);
  const std::string csv = path("s.csv");
  expect_import_refused(csv + " --uniform 1:1:1:0 --objective steady",
                        "--objective: what --schedule auto chooses by; the schedule of " + csv +
                            " is given (leave it out)");
  expect_import_refused(csv + " --uniform 1:1:1:0 --auto-copies 1",
                        "--auto-copies: what --schedule auto chooses by; the schedule of " + csv +
                            " is given (leave it out)");
  expect_import_refused(csv + " --uniform 1:1:1:0 --overlap-efficiency 0.5",
                        "--overlap-efficiency: " + csv +
                            " overlaps no pair of ops (an OVERLAP_F_B cell of a forward and "
                            "another stage's or micro-batch's backward is one)");
  // plan's own words, for the same options beside a fixed schedule.
  const Result plan =
      run("plan --uniform 1:1:1:0 --stages 2 -m 2 --schedule 1f1b --objective steady");
  EXPECT_EQ(plan.out,
            "pipeplan: error: --objective: what --schedule auto chooses by; schedule '1f1b' is "
            "given (use --schedule auto or --search)\n");
  // A CSV with overlapped pairs takes the efficiency.
  ASSERT_EQ(
      run("plan --uniform 1:1:1:0 --stages 2 -m 4 --schedule dualpipe-v -o " + path("dv.json"))
          .status,
      0);
  ASSERT_EQ(run("export " + path("dv.json") + " -o " + path("dv.csv")).status, 0);
  EXPECT_EQ(run("import " + path("dv.csv") + " --uniform 1:1:1:0 --overlap-efficiency 0.5").status,
            0);
  // --join-w on a CSV of B cells, as --p2-concat there.
  ASSERT_EQ(run("plan --uniform 1:1:1:0 --stages 2 -m 2 -o " + path("f.json")).status, 0);
  ASSERT_EQ(run("export " + path("f.json") + " -o " + path("f.csv")).status, 0);
  expect_import_refused(path("f.csv") + " --uniform 1:1:1:0 --join-w",
                        "--join-w: " + path("f.csv") +
                            " has no W cells (its backward is fused: B cells); leave --join-w out");
}

// A blank row is a rank holding no stage: named as such, before the stages fail to divide.
TEST_F(TorchCsvRoundTripCli, ABlankFirstRowIsNamed) {
  write_file(path("b.csv"), "\n0F0,0B0\n");
  expect_import_refused(path("b.csv") + " --uniform 1:1:1:0",
                        path("b.csv") +
                            ": rank 0 (row 1) holds 0 of the 1 stages; pipeplan needs the same "
                            "number on every rank");
  write_file(path("blank.csv"), std::string(1100, '\n'));
  expect_import_refused(path("blank.csv") + " --uniform 1:1:1:0",
                        path("blank.csv") + ": no rows (expected one row per rank)");
}

// The plan's --p2-concat comes back through the side file, where no p2 joins (one micro-batch)
// and where each p2 is its own (--p2-concat 1), with no --join-w.
TEST_F(TorchCsvRoundTripCli, P2ConcatComesBackThroughTheSideFile) {
  for (const auto& [sizes, concat] :
       {std::pair<std::string, int>{"-m 1", 2}, {"-m 4", 1}, {"-m 4", 3}}) {
    SCOPED_TRACE(sizes + " --p2-concat " + std::to_string(concat));
    ASSERT_EQ(run("plan --uniform 1:1:1:0 --schedule 1f1b --stages 2 --backward 2bp " + sizes +
                  " --p2-concat " + std::to_string(concat) + " -o " + path("p.json"))
                  .status,
              0);
    ASSERT_EQ(run("export " + path("p.json") + " -o " + path("s.csv")).status, 0);
    const Result imported =
        run("import " + path("s.csv") + " --uniform 1:1:1:0 -o " + path("i.json"));
    ASSERT_EQ(imported.status, 0) << imported.out;
    EXPECT_EQ(plan_json("i.json")["meta"]["p2_concat"], concat);
    EXPECT_NE(imported.out.find("p2_concat " + std::to_string(concat) +
                                " (the plan's --p2-concat) from " + path("s.csv.layers.json")),
              std::string::npos)
        << imported.out;
  }
  // With --join-w it bounds the groups, as --p2-concat 3 does: 0P2_0+1+2 0P2_3.
  const Result joined =
      run("import " + path("s.csv") + " --uniform 1:1:1:0 --join-w -o " + path("j.json"));
  ASSERT_EQ(joined.status, 0) << joined.out;
  EXPECT_EQ(orders("j.json"), orders("p.json"));
  EXPECT_NE(orders("j.json").find("0P2_0+1+2 0P2_3"), std::string::npos) << orders("j.json");
}

}  // namespace
