// `pipeplan plan` then `pipeplan run` end to end: the acceptance command trains, every schedule
// gives the same five losses, the measured trace feeds `pipeplan diff`, and bad requests fail
// with one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedules/family.h"
#include "tests/cli_support.h"

namespace pipeplan {
namespace {

namespace fs = std::filesystem;

using Result = pipeplan::testing::CliResult;
Result run(const std::string& args) {
  return pipeplan::testing::run_pipeplan(args);
}

class RunCli : public pipeplan::testing::TempDirTest {
 protected:
  // Plans the acceptance setup with `schedule_args`; empty when the planner refuses them (its
  // output then in `refusal_`).
  std::string plan(const std::string& schedule_args, const std::string& name) {
    const std::string out = path(name);
    const Result r =
        run("plan --model tiny --stages 4 --microbatches 8 " + schedule_args + " -o " + out);
    refusal_ = r.status == 0 ? std::string() : r.out;
    return r.status == 0 ? out : std::string();
  }
  std::string refusal_;

  std::vector<double> losses(const std::string& plan_path, int steps) {
    const Result r =
        run("run " + plan_path + " --backend cpu --steps " + std::to_string(steps) + " --json");
    EXPECT_EQ(r.status, 0) << r.out;
    std::vector<double> values;
    if (r.status != 0) return values;
    const nlohmann::json parsed = nlohmann::json::parse(r.out);  // outlives the loop
    for (const auto& row : parsed.at("steps"))
      values.push_back(row.at("loss").get<double>());
    return values;
  }
};

TEST_F(RunCli, AcceptanceCommandTrainsAndEveryScheduleAgrees) {
  const std::string p = plan("--schedule 1f1b --backward 2bp", "p.json");
  ASSERT_FALSE(p.empty());
  const Result text = run("run " + p + " --backend cpu --steps 5");
  ASSERT_EQ(text.status, 0) << text.out;
  EXPECT_NE(text.out.find("step    5  loss"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("tokens/s"), std::string::npos) << text.out;

  const std::vector<double> want = losses(p, 5);
  ASSERT_EQ(want.size(), 5U);
  EXPECT_LT(want.back(), want.front());
  int compared = 0;
  for (const ScheduleFamily* family : schedule_families()) {
    if (family->traits().chunks.preferred > 1)
      continue;  // needs more blocks than the tiny preset's 4
    for (const BackwardMode backward : family->backward_modes()) {
      const std::string mode(to_string(backward));
      const std::string other = plan("--schedule " + family->name() + " --backward " + mode,
                                     family->name() + mode + ".json");
      ASSERT_FALSE(other.empty()) << family->name() << " " << mode << ": " << refusal_;
      const std::vector<double> got = losses(other, 5);
      ASSERT_EQ(got.size(), 5U) << family->name() << " " << mode;
      for (std::size_t s = 0; s < 5; ++s) {
        // fp32 gradient sums in schedule-dependent order; see executor_training_test.cpp.
        EXPECT_NEAR(got[s], want[s], 1e-5 * want[s])
            << family->name() << " " << mode << " step " << s + 1;
      }
      ++compared;
    }
  }
  // gpipe and 1f1b in each of their three modes; zb-h1, zb-h2 and auto in 2bp.
  EXPECT_EQ(compared, 9);
}

TEST_F(RunCli, MeasuredTraceFeedsDiff) {
  const std::string p = plan("--schedule 1f1b --backward 2bp", "p.json");
  ASSERT_FALSE(p.empty());
  const std::string trace = path("measured.json");
  const Result r = run("run " + p + " --steps 2 --trace " + trace);
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json events = nlohmann::json::parse(std::ifstream(trace)).at("traceEvents");
  EXPECT_GT(events.size(), 100U);

  const Result diff = run("diff " + p + " " + trace);
  ASSERT_EQ(diff.status, 0) << diff.out;
  EXPECT_NE(diff.out.find("step time (makespan): predicted"), std::string::npos) << diff.out;
  EXPECT_NE(diff.out.find("devices (compute stream)"), std::string::npos) << diff.out;

  // A plan read from standard input is named "stdin", as every other message names it.
  const Result piped = run("diff - " + trace + " < " + p);
  ASSERT_EQ(piped.status, 0) << piped.out;
  EXPECT_EQ(piped.out.rfind("stdin (predicted) vs " + trace + " (measured)\n", 0), 0U) << piped.out;
  const Result piped_run = run("run - --steps 1 --json < " + p);
  ASSERT_EQ(piped_run.status, 0) << piped_run.out;
  EXPECT_NE(piped_run.out.find("\"plan\": \"stdin\""), std::string::npos) << piped_run.out;

  const Result json = run("diff " + p + " " + trace + " --json --all");
  ASSERT_EQ(json.status, 0) << json.out;
  const nlohmann::json d = nlohmann::json::parse(json.out);
  EXPECT_EQ(d.at("devices").size(), 4U);
  EXPECT_GT(d.at("overall").at("measured_makespan_us").get<double>(), 0.0);
  // --all: one row per node of the plan.
  const nlohmann::json plan_json = nlohmann::json::parse(std::ifstream(p));
  EXPECT_EQ(d.at("ops").size(), plan_json.at("nodes").at("count").get<std::size_t>());

  // A trace of another plan is refused, naming the file.
  const std::string other = plan("--schedule gpipe --backward fused", "other.json");
  const Result mismatch = run("diff " + other + " " + trace);
  EXPECT_NE(mismatch.status, 0);
  EXPECT_NE(mismatch.out.find("measured.json"), std::string::npos) << mismatch.out;
  // So is one whose nodes match by number but whose plan was of another shape: the trace's
  // metadata says which.
  const std::string wider = plan("--schedule 1f1b --backward 2bp --mbs 2", "wider.json");
  ASSERT_FALSE(wider.empty());
  const Result shape = run("diff " + wider + " " + trace);
  EXPECT_EQ(shape.status, 1);
  EXPECT_EQ(shape.out, "pipeplan: error: " + trace +
                           ": field 'metadata.mbs' is 1, the plan's is 2 (a trace of another "
                           "plan)\n");
  // A plan that cannot run has no prediction to compare: refused naming the file and the rule
  // (its simulation would fail without naming either).
  nlohmann::json cyclic = nlohmann::json::parse(std::ifstream(p));
  cyclic["data_edges"].push_back(2);
  cyclic["data_edges"].push_back(2);
  std::ofstream(path("cyclic.json")) << cyclic.dump();
  const Result invalid = run("diff " + path("cyclic.json") + " " + trace);
  EXPECT_EQ(invalid.status, 1);
  EXPECT_EQ(
      invalid.out.rfind("pipeplan: error: " + path("cyclic.json") + ": invalid plan: node 2 ", 0),
      0U)
      << invalid.out;
}

TEST_F(RunCli, RefusesWhatItCannotRun) {
  const std::string p = plan("--schedule 1f1b --backward 2bp", "p.json");
  ASSERT_FALSE(p.empty());
  // Without the CUDA module: "not installed"; with it but no GPU: "no CUDA device found"; with
  // one GPU: the 4-device plan needs --emulate 4 (tests/runtime/cuda/plugin_test.cpp is exact).
  const Result cuda = run("run " + p + " --backend cuda");
  EXPECT_NE(cuda.status, 0);
  EXPECT_EQ(std::count(cuda.out.begin(), cuda.out.end(), '\n'), 1) << cuda.out;
  EXPECT_TRUE(cuda.out.find("not installed") != std::string::npos ||
              cuda.out.find("no CUDA device") != std::string::npos ||
              cuda.out.find("--emulate 4") != std::string::npos)
      << cuda.out;

  const std::string big = path("big.json");
  ASSERT_EQ(run("plan --model llama-7b --stages 4 --microbatches 8 -o " + big).status, 0);
  const Result refused = run("run " + big + " --steps 1");
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.out.find("host memory"), std::string::npos) << refused.out;
  EXPECT_EQ(std::count(refused.out.begin(), refused.out.end(), '\n'), 1) << refused.out;

  const Result missing = run("run " + path("nope.json"));
  EXPECT_NE(missing.status, 0);
  EXPECT_NE(missing.out.find("nope.json"), std::string::npos) << missing.out;

  // A model the runtime's layers do not implement (a GELU MLP): refused naming the plan, before
  // its size is (the CPU run would need far more host memory than the limit).
  const std::string gpt = path("g.json");
  ASSERT_EQ(run("plan --model gpt-1.5b --stages 2 -m 4 -o " + gpt).status, 0);
  const Result model = run("run " + gpt);
  EXPECT_EQ(model.status, 1);
  EXPECT_EQ(model.out,
            "pipeplan: error: " + gpt + ": model 'gpt-1.5b': backend cpu-f32 needs mlp = swiglu\n");
}

}  // namespace
}  // namespace pipeplan
