// Only `pipeplan run` as one rank of an MPI launch initialises MPI: --version, plan and a
// single-process run (no MPI or Slurm variables in the environment) leave MPI uninitialised.
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/mpi/mpi_session.h"
#include "tests/cli_support.h"
#include "tools/cli.h"

namespace pipeplan {
namespace {

int run_in_process(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& arg : args)
    argv.push_back(arg.data());
  std::ostringstream printed;
  std::streambuf* const saved = std::cout.rdbuf(printed.rdbuf());
  const int status = run_cli(static_cast<int>(argv.size()), argv.data());
  std::cout.rdbuf(saved);
  return status;
}

class MpiFreeStartup : public testing::TempDirTest {};

TEST_F(MpiFreeStartup, VersionPlanAndASingleProcessRunDoNotInitialiseMpi) {
  for (const char* name :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}) {
    if (std::getenv(name) != nullptr) GTEST_SKIP() << "the test itself runs under a launcher";
  }
  EXPECT_EQ(run_in_process({"pipeplan", "--version"}), 0);
  const std::string plan = path("p.json");
  EXPECT_EQ(run_in_process({"pipeplan", "plan", "--model", "tiny", "--stages", "4",
                            "--microbatches", "8", "-o", plan}),
            0);
  EXPECT_FALSE(mpi_initialized());
  EXPECT_EQ(run_in_process({"pipeplan", "run", plan, "--steps", "1"}), 0);
  EXPECT_FALSE(mpi_initialized());
}

}  // namespace
}  // namespace pipeplan
