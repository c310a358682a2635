// --launcher and the detection of an MPI or Slurm launch from the environment.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "planner/base/error.h"
#include "runtime/launch.h"

namespace pipeplan {
namespace {

LaunchEnvironment detect(const std::map<std::string, std::string>& variables) {
  return detect_launch_environment([&](const char* name) -> const char* {
    const auto it = variables.find(name);
    return it == variables.end() ? nullptr : it->second.c_str();
  });
}

TEST(Launch, ParsesTheThreeLaunchers) {
  EXPECT_EQ(parse_launcher("none"), Launcher::none);
  EXPECT_EQ(parse_launcher("mpi"), Launcher::mpi);
  EXPECT_EQ(parse_launcher("auto"), Launcher::automatic);
  try {
    parse_launcher("srun");
    FAIL() << "accepted 'srun'";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "launcher");
    EXPECT_EQ(e.detail(), "unknown launcher 'srun' (none, mpi, auto)");
  }
}

TEST(Launch, DetectsMpirunMpichAndSlurmInThatOrder) {
  EXPECT_EQ(detect({}).ranks, 1);
  EXPECT_EQ(detect({}).variable, "");
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", "4"}}).variable, "OMPI_COMM_WORLD_SIZE=4");
  EXPECT_EQ(detect({{"PMI_SIZE", "8"}}).ranks, 8);
  EXPECT_EQ(detect({{"SLURM_NTASKS", "2"}}).ranks, 2);
  // srun's step size before the allocation's task count; Open MPI's own before either.
  EXPECT_EQ(detect({{"SLURM_NTASKS", "8"}, {"SLURM_STEP_NUM_TASKS", "4"}}).ranks, 4);
  EXPECT_EQ(detect({{"SLURM_NTASKS", "8"}, {"OMPI_COMM_WORLD_SIZE", "2"}}).ranks, 2);
  // Junk is no launch.
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", "four"}}).ranks, 1);
  EXPECT_EQ(detect({{"PMI_SIZE", "0"}, {"SLURM_NTASKS", "3"}}).ranks, 3);
}

TEST(Launch, AutoUsesMpiForMoreThanOneRank) {
  const LaunchEnvironment one = detect({});
  const LaunchEnvironment four = detect({{"SLURM_NTASKS", "4"}});
  EXPECT_FALSE(runs_under_mpi(Launcher::automatic, one, true));
  EXPECT_FALSE(runs_under_mpi(Launcher::automatic, detect({{"PMI_SIZE", "1"}}), true));
  EXPECT_TRUE(runs_under_mpi(Launcher::automatic, four, true));
  EXPECT_TRUE(runs_under_mpi(Launcher::mpi, one, true));
  EXPECT_FALSE(runs_under_mpi(Launcher::none, four, true));
  EXPECT_FALSE(runs_under_mpi(Launcher::none, four, false));
}

TEST(Launch, WithoutMpiBuiltSaysSoNamingTheLauncher) {
  EXPECT_FALSE(runs_under_mpi(Launcher::automatic, detect({}), false));
  try {
    runs_under_mpi(Launcher::mpi, detect({}), false);
    FAIL() << "no error";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "launcher");
    EXPECT_EQ(e.detail().rfind("mpi: MPI support is not built into this pipeplan", 0), 0U)
        << e.detail();
  }
  try {
    runs_under_mpi(Launcher::automatic, detect({{"SLURM_NTASKS", "4"}}), false);
    FAIL() << "no error";
  } catch (const FieldError& e) {
    EXPECT_NE(e.detail().find("started as one of 4 ranks (SLURM_NTASKS=4)"), std::string::npos)
        << e.detail();
  }
}

}  // namespace
}  // namespace pipeplan
