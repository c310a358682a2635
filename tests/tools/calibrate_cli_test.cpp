// `pipeplan calibrate`: a "measured" run made by the simulator under a known contention model
// (the plan made with it, drawn as a trace) is fitted back from the plan made without it; eval
// then predicts the measured step; copy and working-memory carry a model and working memory
// between profiles. Bad input: one line naming the file or flag, nothing written.
#include <array>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli_support.h"

namespace pipeplan::testing {
namespace {

const std::string kProfile =
    std::string(PIPEPLAN_SOURCE_DIR) + "/profiles/h100-sxm-llama-7b.analytic.json";
const std::string kPlanArgs =
    "--stages 4 --microbatches 8 --schedule 1f1b --backward 2bp --seq 2048";
constexpr std::int64_t kMiB = std::int64_t{1} << 20;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int lines(const std::string& text) {
  int n = 0;
  for (const char c : text)
    n += c == '\n' ? 1 : 0;
  return n;
}

// The words of the output's last line.
std::vector<std::string> last_row(const std::string& out) {
  std::string text = out;
  while (!text.empty() && text.back() == '\n')
    text.pop_back();
  std::istringstream row(text.substr(text.rfind('\n') + 1));
  std::vector<std::string> words;
  for (std::string w; row >> w;)
    words.push_back(w);
  return words;
}

double percent_at(const std::vector<std::string>& row, std::size_t column) {
  return std::stod(row.at(column).substr(0, row.at(column).size() - 1));
}

class CalibrateCliTest : public TempDirTest {
 protected:
  // RUN: planned from the shipped profile, "measured" under `contention`.
  void make_run(const nlohmann::json& contention, const std::string& extra = "") {
    run_ = path("run");
    const std::string plan_command = "plan " + kPlanArgs + extra + " --profile " +
                                     shell_quote(kProfile) + " -o " + run_ + ".plan.json";
    const CliResult planned = run_pipeplan(plan_command);
    ASSERT_EQ(planned.status, 0) << planned.out;
    write_text(run_ + ".plan.txt", "# command: pipeplan " + plan_command + "\n" + planned.out);
    nlohmann::json truth = read_json(kProfile);
    truth["contention"] = contention;
    std::ofstream(path("truth.json")) << truth.dump();
    const CliResult made = run_pipeplan("plan " + kPlanArgs + extra + " --profile " +
                                        path("truth.json") + " -o " + path("truth.plan.json"));
    ASSERT_EQ(made.status, 0) << made.out;
    const CliResult drawn =
        run_pipeplan("show " + path("truth.plan.json") + " --trace " + run_ + ".trace.json");
    ASSERT_EQ(drawn.status, 0) << drawn.out;
  }
  std::string run_;
};

const nlohmann::json kTruth = {{"slowdown", {1.1, 1.2, 1.3, 1.45}},
                               {"copy", {{"sender_idle", 1.3}, {"sender_computing", 6.0}}},
                               {"source", "test"}};

TEST_F(CalibrateCliTest, FitRecoversTheModelAndEvalPredictsTheMeasuredStep) {
  make_run(kTruth);
  const std::string fitted = path("fitted.json");
  const CliResult fit = run_pipeplan("calibrate fit --profile " + shell_quote(kProfile) + " -o " +
                                     fitted + " " + run_);
  ASSERT_EQ(fit.status, 0) << fit.out;
  EXPECT_NE(fit.out.find("slowdown by compute ops running at once"), std::string::npos);
  EXPECT_NE(fit.out.find("step time, the recorded plans simulated"), std::string::npos);
  const nlohmann::json profile = read_json(fitted);
  const nlohmann::json& c = profile["contention"];
  for (std::size_t k = 0; k < 4; ++k)
    EXPECT_NEAR(c["slowdown"][k].get<double>(), kTruth["slowdown"][k].get<double>(), 2e-3);
  EXPECT_NEAR(c["copy"]["sender_computing"].get<double>(), 6.0, 0.012);
  EXPECT_EQ(c["source"].get<std::string>().rfind("fitted by pipeplan calibrate fit from 1 "
                                                 "measured run(s) (run) on h100-sxm",
                                                 0),
            0U)
      << c["source"];
  // The provenance lists the runs it was fitted on.
  EXPECT_NE(profile["provenance"]["notes"].get<std::string>().find(
                "Contention fitted by pipeplan calibrate fit on 1 measured run(s): " + run_),
            std::string::npos)
      << profile["provenance"]["notes"];

  // Eval re-plans the recorded command with the fitted profile, in this process.
  const CliResult eval = run_pipeplan("calibrate eval --profile " + fitted + " " + run_);
  ASSERT_EQ(eval.status, 0) << eval.out;
  std::vector<std::string> row = last_row(eval.out);
  EXPECT_GT(percent_at(row, 3), 5) << eval.out;              // the plain plan under-predicts
  EXPECT_LT(std::abs(percent_at(row, 5)), 0.2) << eval.out;  // the fitted one matches
  // ... or simulates the recorded plan under the fitted model.
  const CliResult again =
      run_pipeplan("calibrate eval --resimulate --profile " + fitted + " " + run_);
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("(re-simulated)"), std::string::npos) << again.out;
  row = last_row(again.out);
  EXPECT_LT(std::abs(percent_at(row, 5)), 0.2) << again.out;

  // copy: the fitted model into a new measurement of the same ops.
  const CliResult copy = run_pipeplan("calibrate copy --from " + fitted + " -o " +
                                      path("copied.json") + " " + shell_quote(kProfile));
  ASSERT_EQ(copy.status, 0) << copy.out;
  const nlohmann::json copied = read_json(path("copied.json"));
  EXPECT_EQ(copied["contention"]["slowdown"], c["slowdown"]);
  EXPECT_EQ(copied["contention"]["copy"], c["copy"]);
  EXPECT_EQ(copied["layers"], read_json(kProfile)["layers"]);
  nlohmann::json other = read_json(kProfile);
  other["seq"] = 4096;
  std::ofstream(path("other.json")) << other.dump();
  const CliResult refused = run_pipeplan("calibrate copy --from " + fitted + " -o " +
                                         path("none.json") + " " + path("other.json"));
  EXPECT_NE(refused.status, 0);
  EXPECT_EQ(lines(refused.out), 1) << refused.out;
  EXPECT_NE(refused.out.find("other.json: field 'seq'"), std::string::npos) << refused.out;
  EXPECT_FALSE(std::filesystem::exists(path("none.json")));
}

TEST_F(CalibrateCliTest, CopyOnlyKeepsTheCurvesAndSustainedFixedKeepsTheTerm) {
  make_run(kTruth);
  nlohmann::json kept = read_json(kProfile);
  kept["contention"] = {{"slowdown", {1.5}}, {"source", "given"}};
  std::ofstream(path("kept.json")) << kept.dump();
  const CliResult fit = run_pipeplan("calibrate fit --copy-only --profile " + path("kept.json") +
                                     " -o " + path("copy_only.json") + " " + run_);
  ASSERT_EQ(fit.status, 0) << fit.out;
  const nlohmann::json c = read_json(path("copy_only.json"))["contention"];
  EXPECT_EQ(c["slowdown"], nlohmann::json({1.5}));
  EXPECT_EQ(c["source"].get<std::string>().rfind("given; copy fitted", 0), 0U) << c["source"];
  EXPECT_NEAR(c["copy"]["sender_computing"].get<double>(), 6.0, 0.012);

  const CliResult fixed = run_pipeplan(
      "calibrate fit --sustained --min-factor 0.6 --max-factor 0.6 --time-constants-ms 20 "
      "--progress --profile " +
      shell_quote(kProfile) + " -o " + path("fixed.json") + " " + run_);
  ASSERT_EQ(fixed.status, 0) << fixed.out;
  EXPECT_NE(fixed.out.find("calibrate: sustained load: time constant 20 ms (1 of 1)"),
            std::string::npos)
      << fixed.out;
  EXPECT_EQ(read_json(path("fixed.json"))["contention"]["sustained"],
            nlohmann::json({{"factor", 0.6}, {"time_constant_us", 20000.0}}));
  // A grid of one point fits nothing: the term is reported as fixed.
  EXPECT_NE(fixed.out.find("over 20 ms, fixed (the curves below are at H = 0)"), std::string::npos)
      << fixed.out;
  const CliResult grid = run_pipeplan(
      "calibrate fit --sustained --min-factor 0.6 --max-factor 0.65 --time-constants-ms 20 "
      "--profile " +
      shell_quote(kProfile) + " -o " + path("grid.json") + " " + run_);
  ASSERT_EQ(grid.status, 0) << grid.out;
  EXPECT_NE(grid.out.find("over 20 ms, fitted (the curves"), std::string::npos) << grid.out;
}

// A fit whose runs have too few transfers for the copy factors keeps the profile's, says so, and
// its source says where they came from.
TEST_F(CalibrateCliTest, TooFewTransfersKeepTheProfilesCopyFactors) {
  make_run(kTruth);
  nlohmann::json given = read_json(kProfile);
  given["contention"] = {{"slowdown", {1.5}},
                         {"copy", {{"sender_idle", 1.25}, {"sender_computing", 5.5}}},
                         {"source", "given"}};
  std::ofstream(path("given.json")) << given.dump();
  const CliResult fit = run_pipeplan("calibrate fit --min-ops 100000 --profile " +
                                     path("given.json") + " -o " + path("kept.json") + " " + run_);
  ASSERT_EQ(fit.status, 0) << fit.out;
  EXPECT_NE(fit.out.find("copies: too few to fit (or too few beside / away from the sender's "
                         "compute); kept from the profile: 1.250 x link time with the sender "
                         "idle, 5.500 x beside its compute"),
            std::string::npos)
      << fit.out;
  const nlohmann::json c = read_json(path("kept.json"))["contention"];
  EXPECT_EQ(c["copy"], given["contention"]["copy"]);
  EXPECT_NE(c["source"].get<std::string>().find("; copy factors kept from given.json"),
            std::string::npos)
      << c["source"];
}

// A run planned for separate GPUs under a sustained term, "measured" as that plan predicts: the
// error before is none, each device's ops under its own load as the simulator times them.
TEST_F(CalibrateCliTest, ARunPlannedForSeparateGpusHasNoErrorBeforeUnderItsOwnModel) {
  nlohmann::json separate = read_json(kProfile);
  separate["contention"] = {{"sustained", {{"factor", 0.5}, {"time_constant_us", 30000}}}};
  std::ofstream(path("sep.json")) << separate.dump();
  const std::string run = path("sep");
  ASSERT_EQ(run_pipeplan("plan " + kPlanArgs + " --profile " + path("sep.json") + " -o " + run +
                         ".plan.json")
                .status,
            0);
  ASSERT_EQ(run_pipeplan("show " + run + ".plan.json --trace " + run + ".trace.json").status, 0);
  const CliResult fit = run_pipeplan("calibrate fit --sustained --time-constants-ms 30 --profile " +
                                     path("sep.json") + " -o " + path("fitted.json") + " " + run);
  ASSERT_EQ(fit.status, 0) << fit.out;
  // The op table's row: run, ops, error before, after.
  const std::string table = fit.out.substr(fit.out.find("op error before"));
  std::istringstream line(table.substr(table.find('\n') + 1));
  std::vector<std::string> row;
  for (std::string w; row.size() < 4 && line >> w;)
    row.push_back(w);
  ASSERT_EQ(row.size(), 4U) << fit.out;
  EXPECT_EQ(row[0], "sep") << fit.out;
  EXPECT_LT(percent_at(row, 2), 0.05) << fit.out;
}

// --overlap: a dualpipe-v run "measured" with overlap efficiency 0.4 (the plan made with it, drawn
// as a trace) gives 0.4 back into the profile, and the step the recorded plan then predicts is
// the measured one.
TEST_F(CalibrateCliTest, OverlapFitsTheEfficiencyThePairsRanWith) {
  const std::string args =
      "--stages 4 --chunks 2 --microbatches 8 --schedule dualpipe-v "
      "--backward 2bp --seq 2048 --profile " +
      shell_quote(kProfile);
  const std::string run = path("pairs");
  ASSERT_EQ(run_pipeplan("plan " + args + " -o " + run + ".plan.json").status, 0);
  const CliResult made =
      run_pipeplan("plan " + args + " --overlap-efficiency 0.4 -o " + path("truth.plan.json"));
  ASSERT_EQ(made.status, 0) << made.out;
  ASSERT_EQ(
      run_pipeplan("show " + path("truth.plan.json") + " --trace " + run + ".trace.json").status,
      0);
  const CliResult fit = run_pipeplan("calibrate fit --overlap --profile " + shell_quote(kProfile) +
                                     " -o " + path("fitted.json") + " " + run);
  ASSERT_EQ(fit.status, 0) << fit.out;
  EXPECT_NE(fit.out.find("overlap efficiency of overlapped pairs: 0.00 -> 0.40"), std::string::npos)
      << fit.out;
  const nlohmann::json fitted = read_json(path("fitted.json"));
  EXPECT_NEAR(fitted["overlap"]["efficiency"].get<double>(), 0.4, 1e-9);
  EXPECT_NE(fitted["overlap"]["source"].get<std::string>().find("pairs"), std::string::npos);
  // The step table's last row: run, measured, before, error, after, error.
  const std::vector<std::string> row = last_row(fit.out.substr(0, fit.out.rfind("wrote")));
  ASSERT_EQ(row.size(), 6u) << fit.out;
  EXPECT_LT(std::abs(percent_at(row, 5)), 0.05) << fit.out;
  EXPECT_GT(std::abs(percent_at(row, 3)), 1.0) << "the pairs made the step shorter: " << fit.out;
  // eval --resimulate takes the fitted efficiency too: the recorded plan under the profile's
  // overlap model predicts the measured step.
  const CliResult eval =
      run_pipeplan("calibrate eval --resimulate --profile " + path("fitted.json") + " " + run);
  ASSERT_EQ(eval.status, 0) << eval.out;
  EXPECT_LT(std::abs(percent_at(last_row(eval.out), 5)), 0.05) << eval.out;
}

// The fit takes each node's planned time as its profiled time and writes the model into
// --profile: runs planned from other times are refused, naming the stage. Eval re-plans with the
// profile it is given and refuses a plan that is not the one that ran (here the stages hold other
// layers), pointing at --resimulate.
TEST_F(CalibrateCliTest, RunsPlannedFromOtherTimesOrReplannedOtherwiseAreRefused) {
  make_run(kTruth);
  nlohmann::json slower = read_json(kProfile);
  for (auto& [mbs, cost] : slower["layers"]["block"].items())
    cost["forward_us"] = 2 * cost["forward_us"].get<double>();
  std::ofstream(path("slower.json")) << slower.dump();
  const CliResult fit = run_pipeplan("calibrate fit --profile " + path("slower.json") + " -o " +
                                     path("none.json") + " " + run_);
  EXPECT_NE(fit.status, 0);
  EXPECT_EQ(lines(fit.out), 1) << fit.out;
  EXPECT_NE(fit.out.find("run.plan.json: stage 0's forward takes"), std::string::npos) << fit.out;
  EXPECT_NE(fit.out.find("(fit the runs with the profile they were planned from)"),
            std::string::npos)
      << fit.out;
  EXPECT_FALSE(std::filesystem::exists(path("none.json")));

  nlohmann::json heavy_head = read_json(kProfile);
  for (auto& [mbs, cost] : heavy_head["layers"]["head"].items()) {
    for (const char* field : {"forward_us", "p1_us", "p2_us"})
      cost[field] = 40 * cost[field].get<double>();
    for (auto& [k, us] : cost["p2_concat_us"].items())
      us = 40 * us.get<double>();
  }
  std::ofstream(path("heavy_head.json")) << heavy_head.dump();
  const CliResult eval =
      run_pipeplan("calibrate eval --profile " + path("heavy_head.json") + " " + run_);
  EXPECT_NE(eval.status, 0);
  EXPECT_EQ(lines(eval.out), 1) << eval.out;
  EXPECT_NE(eval.out.find("run.plan.txt: re-planned with " + path("heavy_head.json") +
                          ", the plan is not the one that ran (meta.stage_layers["),
            std::string::npos)
      << eval.out;
  EXPECT_NE(eval.out.find("give --resimulate"), std::string::npos) << eval.out;
  EXPECT_EQ(
      run_pipeplan("calibrate eval --resimulate --profile " + path("heavy_head.json") + " " + run_)
          .status,
      0);

  // A recorded command that makes another schedule: what differs is named, its family or the
  // first action that does.
  const std::string command =
      "plan " + kPlanArgs + " --profile " + shell_quote(kProfile) + " -o " + run_ + ".plan.json";
  const auto schedule_refused = [&](const std::string& recorded, const std::string& named) {
    write_text(run_ + ".plan.txt", "# command: pipeplan " + recorded + "\n");
    const CliResult r =
        run_pipeplan("calibrate eval --profile " + shell_quote(kProfile) + " " + run_);
    EXPECT_NE(r.status, 0) << recorded;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find("run.plan.txt: the re-planned schedule is not the one that ran (" + named +
                         "); give --resimulate"),
              std::string::npos)
        << r.out;
  };
  std::string gpipe = command;
  gpipe.replace(gpipe.find("--schedule 1f1b"), 15, "--schedule gpipe");
  schedule_refused(gpipe, "schedule family (1f1b ran, gpipe now)");
  schedule_refused(command + " --p2-concat 4",
                   "device 0's action 16 (0P2_0+1+2+3+4+5+6+7 ran, 0P2_0+1+2+3 now)");
}

TEST_F(CalibrateCliTest, BadInputIsOneLineNamingTheFileOrFlagAndWritesNothing) {
  make_run(kTruth);
  const std::string none = path("none.json");
  const auto refused = [&](const std::string& args, const std::string& named) {
    const CliResult r = run_pipeplan("calibrate " + args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_EQ(lines(r.out), 1) << args << ": " << r.out;
    EXPECT_NE(r.out.find(named), std::string::npos) << args << ": " << r.out;
    EXPECT_FALSE(std::filesystem::exists(none)) << args;
  };
  refused("fit --profile " + shell_quote(kProfile) + " -o " + none + " " + path("missing"),
          "missing.plan.json");
  refused(
      "fit --sustained --copy-only --profile " + shell_quote(kProfile) + " -o " + none + " " + run_,
      "--copy-only");
  refused("fit --sustained --max-factor -1 --profile " + shell_quote(kProfile) + " -o " + none +
              " " + run_,
          "--max-factor");
  refused("fit --sustained --min-factor 0.5 --max-factor 0.4 --profile " + shell_quote(kProfile) +
              " -o " + none + " " + run_,
          "--max-factor");
  refused("fit --sustained --time-constants-ms 30,0 --profile " + shell_quote(kProfile) + " -o " +
              none + " " + run_,
          "--time-constants-ms");
  refused("fit --copy-only --profile " + shell_quote(kProfile) + " -o " + none + " " + run_,
          "h100-sxm-llama-7b.analytic.json: field 'contention' is missing");
  // A sustained term alone has no curve to keep: the field missing is the curve.
  nlohmann::json separate = read_json(kProfile);
  separate["contention"] = {{"sustained", {{"factor", 0.5}, {"time_constant_us", 30000}}}};
  std::ofstream(path("sep.json")) << separate.dump();
  refused("fit --copy-only --profile " + path("sep.json") + " -o " + none + " " + run_,
          "sep.json: field 'contention.slowdown' is missing (--copy-only keeps its compute "
          "curves)");
  // A profile without the run's micro-batch size: the profile and the run's meta.mbs are named.
  nlohmann::json small = read_json(kProfile);
  for (auto& [kind, by_mbs] : small["layers"].items()) {
    by_mbs.erase("2");
    by_mbs.erase("4");
  }
  std::ofstream(path("small.json")) << small.dump();
  const std::string big = path("big");
  ASSERT_EQ(run_pipeplan("plan " + kPlanArgs + " --mbs 2 --profile " + shell_quote(kProfile) +
                         " -o " + big + ".plan.json")
                .status,
            0);
  ASSERT_EQ(run_pipeplan("show " + big + ".plan.json --trace " + big + ".trace.json").status, 0);
  refused("fit --profile " + path("small.json") + " -o " + none + " " + big,
          path("small.json") +
              ": no cost for layer kind 'embedding' at micro-batch size 2 "
              "(sizes present: 1), the meta.mbs of " +
              big + ".plan.json");
  refused("fit --overlap --profile " + shell_quote(kProfile) + " -o " + none + " " + run_,
          "overlap: no run has an overlapped pair");
  refused("copy --from " + shell_quote(kProfile) + " -o " + none + " " + shell_quote(kProfile),
          "field 'contention' is missing");
  refused("working-memory --from " + shell_quote(kProfile) + " -o " + none + " " +
              shell_quote(kProfile),
          "field 'provenance.source' is 'analytic', not 'measured'");
  refused("fit --min-factor 0.5 --profile " + shell_quote(kProfile) + " -o " + none + " " + run_,
          "--min-factor: only with --sustained");
  refused(
      "fit --time-constants-ms 20 --profile " + shell_quote(kProfile) + " -o " + none + " " + run_,
      "--time-constants-ms: only with --sustained");
  refused("eval --profile " + path("missing.json") + " " + run_, "missing.json");
  // Never onto an input: the profile stays as it was.
  std::filesystem::copy_file(kProfile, path("p.json"));
  const std::string before = read_text(path("p.json"));
  refused("fit --profile " + path("p.json") + " -o " + path("p.json") + " " + run_, "p.json");
  EXPECT_EQ(read_text(path("p.json")), before);
  refused("fit --profile " + shell_quote(kProfile) + " -o " + run_ + ".trace.json " + run_,
          "trace.json");
  // A profile of another model shape is refused naming the field; one of the same shape under
  // another name (a config.json read from elsewhere) is the same model.
  nlohmann::json other = read_json(kProfile);
  other["model"]["layers"] = 16;
  std::ofstream(path("other.json")) << other.dump();
  refused("fit --profile " + path("other.json") + " -o " + none + " " + run_,
          "run.plan.json: field 'meta.model.layers' is '32', but " + path("other.json") +
              " is for '16'");
  refused("eval --profile " + path("other.json") + " " + run_, "field 'meta.model.layers'");
  nlohmann::json renamed = read_json(kProfile);
  renamed["model"]["name"] = "llama-7b-elsewhere";
  std::ofstream(path("renamed.json")) << renamed.dump();
  const CliResult same =
      run_pipeplan("calibrate eval --resimulate --profile " + path("renamed.json") + " " + run_);
  EXPECT_EQ(same.status, 0) << same.out;
  // So do copy and working-memory.
  nlohmann::json fitted = renamed;
  fitted["contention"] = kTruth;
  std::ofstream(path("fitted.json")) << fitted.dump();
  const CliResult copied = run_pipeplan("calibrate copy --from " + path("fitted.json") + " -o " +
                                        path("copied.json") + " " + shell_quote(kProfile));
  EXPECT_EQ(copied.status, 0) << copied.out;
  other["contention"] = kTruth;
  std::ofstream(path("other.json")) << other.dump();
  refused("copy --from " + path("other.json") + " -o " + none + " " + shell_quote(kProfile),
          "field 'model.layers' differs from " + path("other.json") + "'s");
}

// fit's -o writes a new profile: never one of a run's files (whether the fit reads it or a later
// eval does, under any spelling) or the profile it reads; each is named and stays as it was.
TEST_F(CalibrateCliTest, FitWritesNeitherARunsFilesNorItsProfile) {
  make_run(kTruth);
  write_text(run_ + ".run.json", "# command: pipeplan run (test)\n{}\n");
  std::filesystem::copy_file(kProfile, path("p.json"));
  const auto refused = [&](const std::string& output, const std::string& named) {
    const std::string before = read_text(output);
    const CliResult r =
        run_pipeplan("calibrate fit --profile " + path("p.json") + " -o " + output + " " + run_);
    EXPECT_EQ(r.status, 1) << output << ": " << r.out;
    EXPECT_EQ(r.out, "pipeplan: error: " + output + ": cannot write: it is " + named + "\n");
    EXPECT_EQ(read_text(output), before) << output;
  };
  const std::string also = "; -o names a new profile)";
  refused(run_ + ".run.json", "the run report of run " + run_ + " (" + run_ + ".run.json" + also);
  refused(run_ + ".plan.txt",
          "the plan command's output of run " + run_ + " (" + run_ + ".plan.txt" + also);
  refused(run_ + ".plan.json", "the plan of run " + run_ + " (" + run_ + ".plan.json" + also);
  refused(path("./run.trace.json"),
          "the trace of run " + run_ + " (" + run_ + ".trace.json" + also);
  refused(path("p.json"), "the --profile the runs are fitted with (-o names a new profile)");
  // A run without a report yet would have one there: refused all the same, nothing written.
  std::filesystem::remove(run_ + ".run.json");
  const CliResult absent = run_pipeplan("calibrate fit --profile " + path("p.json") + " -o " +
                                        run_ + ".run.json " + run_);
  EXPECT_EQ(absent.status, 1) << absent.out;
  EXPECT_FALSE(std::filesystem::exists(run_ + ".run.json"));
}

// A CUDA run report's peak rows: one per device of the plan, measured at least 0 and predicted
// above 0; else one line naming the file, the row and the field.
TEST_F(CalibrateCliTest, PeakRowsThatAreNotOnePerDeviceAreRefused) {
  make_run(kTruth);
  const auto eval_with = [&](const nlohmann::json& rows) {
    write_text(run_ + ".run.json", "# command: pipeplan run (test)\n" +
                                       nlohmann::json({{"peak_memory", rows}}).dump() +
                                       "\n# exit status: 0\n");
    return run_pipeplan("calibrate eval --resimulate --profile " + shell_quote(kProfile) + " " +
                        run_);
  };
  const auto rows = [](const std::vector<std::array<std::int64_t, 3>>& values) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [device, measured, predicted] : values)
      out.push_back(
          {{"device", device}, {"measured_bytes", measured}, {"predicted_bytes", predicted}});
    return out;
  };
  constexpr std::int64_t kGiB = 1024 * kMiB;
  const CliResult good = eval_with(rows({{0, 40 * kGiB, 40 * kGiB},
                                         {1, 40 * kGiB, 40 * kGiB},
                                         {2, 40 * kGiB, 40 * kGiB},
                                         {3, 44 * kGiB, 40 * kGiB}}));
  ASSERT_EQ(good.status, 0) << good.out;
  EXPECT_NEAR(percent_at(last_row(good.out), 6), 10, 1e-9) << good.out;
  const std::vector<std::pair<nlohmann::json, std::string>> bad = {
      {rows({{0, -kGiB, kGiB}, {1, kGiB, kGiB}, {2, kGiB, kGiB}, {3, kGiB, kGiB}}),
       "run.run.json: peak_memory[0]: field 'measured_bytes' is -1073741824, below 0"},
      {rows({{0, kGiB, kGiB}, {1, kGiB, 0}, {2, kGiB, kGiB}, {3, kGiB, kGiB}}),
       "run.run.json: peak_memory[1]: field 'predicted_bytes' is 0, not above 0"},
      {rows({{0, kGiB, kGiB}, {1, kGiB, kGiB}, {2, kGiB, kGiB}, {7, kGiB, kGiB}}),
       "run.run.json: peak_memory[3]: field 'device' is 7, not one of the 4 devices of the plan"},
      {rows({{0, kGiB, kGiB}, {1, kGiB, kGiB}, {1, kGiB, kGiB}, {3, kGiB, kGiB}}),
       "run.run.json: peak_memory[2]: field 'device' is 1 again (peak_memory[1] gave it)"},
      {rows({{0, kGiB, kGiB}, {1, kGiB, kGiB}, {2, kGiB, kGiB}}),
       "run.run.json: peak_memory has no row for device 3 (the plan has 4 devices)"},
  };
  for (const auto& [value, named] : bad) {
    const CliResult r = eval_with(value);
    EXPECT_NE(r.status, 0) << value;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find(named), std::string::npos) << r.out;
  }
}

TEST_F(CalibrateCliTest, WorkingMemoryRemovesTheMemoryErrorEvalReports) {
  nlohmann::json measured = read_json(kProfile);
  measured["provenance"] = {{"source", "measured"},
                            {"gpu", "TEST GPU"},
                            {"date", "2026-11-26"},
                            {"command", "pipeplan profile --test"},
                            {"notes", ""}};
  for (auto& [kind, by_mbs] : measured["layers"].items()) {
    for (auto& [mbs, cost] : by_mbs.items()) {
      const std::int64_t scale = std::stoll(mbs) * (kind == "block" ? 1 : 0);
      cost["forward_work_bytes"] = 16 * kMiB * scale;
      cost["p1_work_bytes"] = 1500 * kMiB * scale;
      nlohmann::json p2 = nlohmann::json::object();
      for (int k = 1; k <= 4; ++k)
        p2[std::to_string(k)] = k > 1 ? 64 * kMiB * k * scale : 0;
      cost["p2_work_bytes"] = p2;
    }
  }
  std::ofstream(path("measured.json")) << measured.dump();
  const std::string merged = path("merged.json");
  const CliResult merge = run_pipeplan("calibrate working-memory --from " + path("measured.json") +
                                       " " + shell_quote(kProfile) + " -o " + merged);
  ASSERT_EQ(merge.status, 0) << merge.out;
  const nlohmann::json m = read_json(merged);
  EXPECT_EQ(m["layers"]["block"]["1"]["p1_work_bytes"], 1500 * kMiB);
  EXPECT_EQ(m["layers"]["block"]["1"]["forward_us"],
            read_json(kProfile)["layers"]["block"]["1"]["forward_us"]);
  EXPECT_NE(m["provenance"]["notes"].get<std::string>().find("measured.json (TEST GPU, 2026-11-26"),
            std::string::npos);

  // A run planned from the plain profile whose allocator saw the working memory.
  const std::string run = path("run");
  const std::string plan_command = "plan " + kPlanArgs + " --p2-concat 4 --profile " +
                                   shell_quote(kProfile) + " -o " + run + ".plan.json";
  const CliResult planned = run_pipeplan(plan_command + " --json");
  ASSERT_EQ(planned.status, 0) << planned.out;
  write_text(run + ".plan.txt", "# command: pipeplan " + plan_command + "\n");
  const auto predicted = nlohmann::json::parse(planned.out)["peak_memory_bytes"];
  const CliResult with =
      run_pipeplan("plan " + kPlanArgs + " --p2-concat 4 --profile " + merged + " --json");
  ASSERT_EQ(with.status, 0) << with.out;
  const auto with_work = nlohmann::json::parse(with.out)["peak_memory_bytes"];
  ASSERT_EQ(with_work.size(), predicted.size());
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t d = 0; d < predicted.size(); ++d) {
    EXPECT_GT(with_work[d].get<std::int64_t>(), predicted[d].get<std::int64_t>());
    rows.push_back(
        {{"device", d}, {"measured_bytes", with_work[d]}, {"predicted_bytes", predicted[d]}});
  }
  ASSERT_EQ(run_pipeplan("show " + run + ".plan.json --trace " + run + ".trace.json").status, 0);
  write_text(run + ".run.json", "# command: pipeplan run (test)\n" +
                                    nlohmann::json({{"peak_memory", rows}}).dump() +
                                    "\n# exit status: 0\n");
  const CliResult eval = run_pipeplan("calibrate eval --profile " + merged + " " + run);
  ASSERT_EQ(eval.status, 0) << eval.out;
  const std::vector<std::string> row = last_row(eval.out);
  EXPECT_GT(percent_at(row, 6), 1) << eval.out;
  EXPECT_LT(std::abs(percent_at(row, 7)), 0.05) << eval.out;
}

}  // namespace
}  // namespace pipeplan::testing
