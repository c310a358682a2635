// `pipeplan run` under `mpirun -np 4`, one rank per plan device (docs/design/runtime.md,
// "Multi-process runs"): the acceptance command prints the single-process run's five losses; GPipe,
// interleaved and BPipe plans train alike; rank 0 writes one measured trace `pipeplan diff`
// reads. Failures end every rank within the timeout with one error: a plan of another device
// count, plans that differ between ranks, a corrupted message, a rank that dies, a rank that
// hangs (PIPEPLAN_TEST_FAULT). Skipped without mpirun; a build without MPI says so in one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/mpi_support.h"

namespace pipeplan {
namespace {

using testing::CliResult;
using testing::count;

class MpiRunCli : public testing::TinyPlanTest {
 protected:
  void SetUp() override {
    TinyPlanTest::SetUp();
#ifndef PIPEPLAN_HAVE_MPI
    GTEST_SKIP() << "built without MPI (MpiRunCliWithoutMpi covers that build)";
#endif
    if (!testing::mpirun_found())
      GTEST_SKIP() << "mpirun is not installed (apt-get install openmpi-bin)";
  }

  // `pipeplan ARGS` on `ranks` ranks; `env` prefixes the command line.
  static CliResult under_mpi(int ranks, const std::string& args, const std::string& env = "") {
    return testing::run_shell(env + (env.empty() ? "" : " ") + testing::mpirun(ranks) +
                              testing::shell_quote(testing::pipeplan_binary()) + " " + args);
  }

  static std::vector<double> losses(const CliResult& r) {
    std::vector<double> values;
    const nlohmann::json parsed = nlohmann::json::parse(r.out);  // outlives the loop
    for (const auto& row : parsed.at("steps"))
      values.push_back(row.at("loss").get<double>());
    return values;
  }

  void expect_same_losses(const std::string& plan, int steps) {
    const std::string args =
        "run " + plan + " --backend cpu --json --steps " + std::to_string(steps);
    const CliResult one = testing::run_pipeplan(args);
    ASSERT_EQ(one.status, 0) << one.out;
    const CliResult four = under_mpi(4, args);
    ASSERT_EQ(four.status, 0) << four.out;
    const std::vector<double> want = losses(one);
    const std::vector<double> got = losses(four);
    ASSERT_EQ(got.size(), static_cast<std::size_t>(steps)) << four.out;
    for (std::size_t s = 0; s < want.size(); ++s)
      EXPECT_NEAR(got[s], want[s], 1e-6 * want[s]) << plan << " step " << s + 1;
    EXPECT_EQ(nlohmann::json::parse(four.out).at("ranks"), 4) << four.out;
  }

  // A failed launch: non-zero, within `limit`, and (when `error` is set) exactly one pipeplan
  // error line, which contains `error`.
  static CliResult expect_failure(int ranks, const std::string& args, const std::string& env,
                                  const std::string& error, std::chrono::seconds limit) {
    const auto start = std::chrono::steady_clock::now();
    CliResult r = under_mpi(ranks, args, env);
    EXPECT_LT(std::chrono::steady_clock::now() - start, limit) << r.out;
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.status, 124) << "hit the hard timeout:\n" << r.out;
    if (!error.empty()) {
      EXPECT_EQ(count(r.out, "pipeplan: error: "), 1) << r.out;
      EXPECT_NE(r.out.find("pipeplan: error: " + error), std::string::npos) << r.out;
    }
    return r;
  }
};

TEST_F(MpiRunCli, AcceptanceCommandPrintsTheSingleProcessLosses) {
  const CliResult one = testing::run_pipeplan("run " + plan_ + " --backend cpu --steps 5");
  ASSERT_EQ(one.status, 0) << one.out;
  const CliResult four = under_mpi(4, "run " + plan_ + " --backend cpu --steps 5");
  ASSERT_EQ(four.status, 0) << four.out;
  EXPECT_NE(four.out.find("transport mpi, 4 mpi ranks"), std::string::npos) << four.out;
  EXPECT_EQ(count(four.out, "tokens/s"), 5) << "rank 0 prints, the others do not\n" << four.out;
  // The same five "loss X" fields, printed with six decimals.
  auto loss_fields = [](const std::string& text) {
    std::vector<std::string> fields;
    for (auto at = text.find("loss "); at != std::string::npos; at = text.find("loss ", at + 1))
      fields.push_back(text.substr(at, text.find(' ', at + 5) - at));
    return fields;
  };
  EXPECT_EQ(loss_fields(four.out), loss_fields(one.out)) << one.out << four.out;
  EXPECT_EQ(loss_fields(one.out).size(), 5U);
  expect_same_losses(plan_, 5);
}

TEST_F(MpiRunCli, GpipeInterleavedAndBpipePlansTrainAsInOneProcess) {
  // Interleaved with 2 chunks on 4 devices needs 8 blocks: the tiny model with 8 layers.
  const std::string config = path("tiny8/config.json");
  std::filesystem::create_directories(path("tiny8"));
  std::ofstream(config) << R"({"model_type": "llama", "num_hidden_layers": 8, "hidden_size": 64,
    "num_attention_heads": 4, "intermediate_size": 172, "vocab_size": 256,
    "max_position_embeddings": 32})";
  const std::vector<std::pair<std::string, std::string>> plans = {
      {"gpipe", "--model tiny --schedule gpipe --backward fused"},
      {"interleaved", "--model " + config + " --schedule interleaved --chunks 2 --backward 2bp"},
      {"bpipe", "--model tiny --schedule 1f1b --backward fused --bpipe on --memory 0"}};
  for (const auto& [name, args] : plans) {
    const std::string file = path(name + ".json");
    const CliResult made =
        testing::run_pipeplan("plan --stages 4 --microbatches 8 " + args + " -o " + file);
    ASSERT_EQ(made.status, 0) << made.out;
    if (name == "bpipe") {
      const nlohmann::json written = nlohmann::json::parse(std::ifstream(file));
      ASSERT_NE(written.at("nodes").at("transfer").get<std::string>().find('e'), std::string::npos)
          << "no BPipe evictions in the plan";
    }
    expect_same_losses(file, 2);
  }
}

TEST_F(MpiRunCli, RankZeroWritesOneMeasuredTraceForDiff) {
  const std::string trace = path("measured.json");
  const CliResult r = under_mpi(4, "run " + plan_ + " --steps 2 --trace " + trace);
  ASSERT_EQ(r.status, 0) << r.out;
  const CliResult diff = testing::run_pipeplan("diff " + plan_ + " " + trace + " --json --all");
  ASSERT_EQ(diff.status, 0) << diff.out;
  const nlohmann::json d = nlohmann::json::parse(diff.out);
  const nlohmann::json plan = nlohmann::json::parse(std::ifstream(plan_));
  // Every node of every rank.
  EXPECT_EQ(d.at("ops").size(), plan.at("nodes").at("count").get<std::size_t>());
  EXPECT_EQ(d.at("devices").size(), 4U);
  for (const auto& device : d.at("devices"))
    EXPECT_GT(device.at("measured_busy_us").get<double>(), 0.0) << device;
}

// Only rank 0 writes the trace, so only rank 0 checks where: a folder on its node alone (no
// shared file system) does not refuse the run on the others. Rank 0 runs where out/ exists, the
// other three where it does not (one app context: mpirun's options, the sanitizer's included,
// reach every rank).
TEST_F(MpiRunCli, OnlyRankZeroChecksWhereTheTraceGoes) {
  std::filesystem::create_directories(path("rank0/out"));
  std::filesystem::create_directories(path("others"));
  const std::string script = path("in_rank_folder.sh");
  std::ofstream(script)
      << "if [ \"$OMPI_COMM_WORLD_RANK\" = 0 ]; then cd \"$1\"; else cd \"$2\"; fi\n"
         "shift 2\nexec \"$@\"\n";
  const CliResult r = testing::run_shell(testing::mpirun(4) + "sh " + testing::shell_quote(script) +
                                         " " + testing::shell_quote(path("rank0")) + " " +
                                         testing::shell_quote(path("others")) + " " +
                                         testing::shell_quote(testing::pipeplan_binary()) +
                                         " run " + plan_ + " --steps 1 --trace out/t.json");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(std::filesystem::is_regular_file(path("rank0/out/t.json")));
  EXPECT_FALSE(std::filesystem::exists(path("others/out")));
}

// After the last step rank 0 alone writes the outputs; a failure there (its --trace folder gone
// after the check before the run) fails every rank, not rank 0 alone: the others wait to hear
// how rank 0 fared, rank 0 says why in one line, and every rank exits non-zero.
TEST_F(MpiRunCli, AFailureWritingRankZerosOutputsFailsEveryRank) {
  std::filesystem::create_directories(path("out"));
  const std::string script = path("with_status.sh");
  std::ofstream(script) << "\"$@\"\nstatus=$?\necho $status > "
                        << testing::shell_quote(path("status."))
                        << "$OMPI_COMM_WORLD_RANK\nexit $status\n";
  const auto start = std::chrono::steady_clock::now();
  const CliResult r = testing::run_shell(
      "PIPEPLAN_TEST_FAULT=trace-folder-gone:0 " + testing::mpirun(4) + "sh " +
      testing::shell_quote(script) + " " + testing::shell_quote(testing::pipeplan_binary()) +
      " run " + plan_ + " --steps 1 --timeout-ms 5000 --trace " + path("out/t.json"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_FALSE(std::filesystem::exists(path("out"))) << "the fault did not happen";
  EXPECT_EQ(count(r.out, "pipeplan: error: "), 1) << r.out;
  EXPECT_NE(r.out.find("pipeplan: error: rank 0: " + path("out/t.json")), std::string::npos)
      << r.out;
  for (int rank = 0; rank < 4; ++rank) {
    // No status file: mpirun ended the rank once another exited non-zero.
    int status = -1;
    std::ifstream(path("status." + std::to_string(rank))) >> status;
    EXPECT_NE(status, 0) << "rank " << rank << ":\n" << r.out;
  }
}

// mpirun forwards standard input to rank 0 alone: `run -` as one of several ranks is refused by
// every rank at once (none reads it), rank 0 saying why in one line.
TEST_F(MpiRunCli, APlanOnStandardInputIsRefusedUnderSeveralRanks) {
  const CliResult r =
      testing::run_shell(testing::mpirun(4) + testing::shell_quote(testing::pipeplan_binary()) +
                         " run - --steps 1 --timeout-ms 5000 < " + plan_);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "pipeplan: error: "), 1) << r.out;
  EXPECT_NE(r.out.find("pipeplan: error: plan '-': each of the 4 ranks reads the plan, but "
                       "standard input reaches one of them at most (mpirun forwards it to rank 0 "
                       "alone): give the plan as a file every rank can read"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("character device"), std::string::npos) << r.out;
  // One rank reads it as one process would.
  const CliResult one =
      testing::run_shell(testing::mpirun(1) + testing::shell_quote(testing::pipeplan_binary()) +
                         " run - --launcher mpi --steps 1 < " + plan_);
  EXPECT_NE(one.status, 0) << "a plan of 4 devices on 1 rank";
  EXPECT_NE(one.out.find("plan: 4 devices, but 1 rank was started"), std::string::npos) << one.out;
}

TEST_F(MpiRunCli, AWorldOfAnotherSizeIsOneLineOnRankZero) {
  expect_failure(
      3, "run " + plan_ + " --steps 1", "",
      "plan: 4 devices, but 3 ranks were started (one rank per plan device: mpirun -np 4",
      std::chrono::seconds(60));
}

TEST_F(MpiRunCli, RanksWithDifferentOptionsAreRefusedBeforeTheFirstStep) {
  const std::string run =
      testing::shell_quote(testing::pipeplan_binary()) + " run " + plan_ + " --steps 1";
  const auto start = std::chrono::steady_clock::now();
  const CliResult r =
      testing::run_shell(testing::mpirun(2) + run + testing::next_context(2) + run + " --seed 7");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "pipeplan: error: "), 1) << r.out;
  EXPECT_NE(r.out.find("pipeplan: error: ranks 2, 3 loaded another plan or options than rank 0"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("step    1"), std::string::npos) << r.out;
}

// Under mpirun's MPMD form each rank has its own options: outputs asked of a rank other than 0,
// which only rank 0 writes, are refused rather than dropped; rank 0 alone asking is the usual form.
TEST_F(MpiRunCli, OutputsAskedOfAnotherRankThanZeroAreRefused) {
  const std::string run =
      testing::shell_quote(testing::pipeplan_binary()) + " run " + plan_ + " --steps 1";
  const std::string trace = path("t.json");
  const CliResult r = testing::run_shell(testing::mpirun(2) + run + testing::next_context(2) + run +
                                         " --trace " + testing::shell_quote(trace));
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "pipeplan: error: "), 1) << r.out;
  EXPECT_NE(r.out.find("pipeplan: error: rank 2 was given --trace " + trace +
                       ", but rank 0, which alone prints the report and writes the trace, was "
                       "given no --trace (give --json and --trace to rank 0; the other ranks may "
                       "have them alike or not at all)"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(trace));
  // --json on rank 0 and another, --trace on rank 0 alone: nothing is dropped.
  const CliResult json =
      testing::run_shell(testing::mpirun(2) + run + " --json --trace " +
                         testing::shell_quote(trace) + testing::next_context(2) + run + " --json");
  EXPECT_EQ(json.status, 0) << json.out;
  std::filesystem::remove(trace);
  const CliResult zero =
      testing::run_shell(testing::mpirun(1) + run + " --trace " + testing::shell_quote(trace) +
                         testing::next_context(3) + run);
  EXPECT_EQ(zero.status, 0) << zero.out;
  EXPECT_TRUE(std::filesystem::exists(trace)) << zero.out;
}

TEST_F(MpiRunCli, ACorruptedMessageEndsEveryRankWithOneError) {
  const CliResult r = expect_failure(4, "run " + plan_ + " --steps 2 --timeout-ms 5000",
                                     "PIPEPLAN_TEST_FAULT=corrupt-size:2",
                                     "step 1: rank 3: ", std::chrono::seconds(60));
  EXPECT_NE(r.out.find("message '2F0' declares 8196 bytes but carries 8192 (corrupted)"),
            std::string::npos)
      << r.out;
}

TEST_F(MpiRunCli, ARankThatDiesEndsEveryRank) {
  const CliResult r = expect_failure(4, "run " + plan_ + " --steps 2 --timeout-ms 5000",
                                     "PIPEPLAN_TEST_FAULT=die:2", "", std::chrono::seconds(60));
  // mpirun names the rank it lost and ends the others.
  EXPECT_NE(r.out.find("rank 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("signal 9"), std::string::npos) << r.out;
}

TEST_F(MpiRunCli, AHungRankIsNamedWithinTheTimeout) {
  const CliResult r = expect_failure(4, "run " + plan_ + " --steps 2 --timeout-ms 2000",
                                     "PIPEPLAN_TEST_FAULT=hang:1", "", std::chrono::seconds(40));
  // mpirun's own MPI_ABORT notice, on the same stream, may land inside rank 0's line (between
  // its "pipeplan: error: " and the rest): the two parts are looked for apart.
  EXPECT_NE(r.out.find("pipeplan: error: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 1: rank 1 did not finish the step within 2000 ms"), std::string::npos)
      << r.out;
}

// A rank that fails on its own, outside any agreement, prints its error and goes to the end of
// the run; rank 0 names it at the point it skipped, and the job still ends together: no second
// line from rank 0 about the end of the run, no MPI_Abort, no wait for --timeout-ms.
TEST_F(MpiRunCli, ARankThatFailsOnItsOwnIsNamedByRankZeroAndTheJobEndsTogether) {
  const auto start = std::chrono::steady_clock::now();
  const CliResult r = under_mpi(4, "run " + plan_ + " --steps 2 --timeout-ms 60000",
                                "PIPEPLAN_TEST_FAULT=fail-at-setup:1");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(50)) << r.out;
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "pipeplan: error: "), 2) << r.out;
  EXPECT_NE(r.out.find("pipeplan: error: rank 1: PIPEPLAN_TEST_FAULT: this rank failed on its "
                       "own at set-up"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("pipeplan: error: rank 1: left the run before loading the plan (its own "
                       "error is on its output)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("could not finish"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("MPI_ABORT"), std::string::npos) << r.out;
}

// Rank 0 hung: every other rank gives up on it at about the same moment; rank 1 says so and ends
// the job, the others stay quiet.
TEST_F(MpiRunCli, AHungRankZeroIsNamedOnceByRankOne) {
  const CliResult r = expect_failure(
      4, "run " + plan_ + " --steps 2 --timeout-ms 1000", "PIPEPLAN_TEST_FAULT=hang-at-setup:0",
      "rank 1: rank 0 did not answer at loading the plan within 3000 ms", std::chrono::seconds(40));
  EXPECT_EQ(r.out.find("rank 2: rank 0"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rank 3: rank 0"), std::string::npos) << r.out;
}

// The launcher option, and a build without MPI: one line, no run.
class MpiRunCliWithoutMpi : public testing::TinyPlanTest {};

TEST_F(MpiRunCliWithoutMpi, LauncherChoicesAreCheckedInOneLine) {
  const CliResult bogus = testing::run_pipeplan("run " + plan_ + " --launcher bogus");
  EXPECT_NE(bogus.status, 0);
  EXPECT_EQ(bogus.out,
            "pipeplan: error: --launcher: unknown launcher 'bogus' (none, mpi, env, auto)\n");
  // --launcher none under an MPI environment runs the plan in this one process.
  const CliResult none = testing::run_pipeplan("run " + plan_ + " --launcher none --steps 1",
                                               "OMPI_COMM_WORLD_SIZE=4");
  EXPECT_EQ(none.status, 0) << none.out;
  EXPECT_NE(none.out.find("transport in-process"), std::string::npos) << none.out;
#ifndef PIPEPLAN_HAVE_MPI
  const CliResult mpi = testing::run_pipeplan("run " + plan_ + " --launcher mpi");
  EXPECT_NE(mpi.status, 0);
  EXPECT_EQ(count(mpi.out, "\n"), 1) << mpi.out;
  EXPECT_NE(mpi.out.find("pipeplan: error: --launcher: mpi: MPI support is not built into this "
                         "pipeplan"),
            std::string::npos)
      << mpi.out;
  const CliResult detected = testing::run_pipeplan("run " + plan_, "SLURM_NTASKS=4");
  EXPECT_NE(detected.status, 0);
  EXPECT_EQ(count(detected.out, "\n"), 1) << detected.out;
  EXPECT_NE(detected.out.find("--launcher: started as one of 4 ranks (SLURM_NTASKS=4), but MPI "
                              "support is not built"),
            std::string::npos)
      << detected.out;
#endif
}

}  // namespace
}  // namespace pipeplan
