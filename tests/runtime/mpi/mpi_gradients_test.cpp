// The executor over the MPI transport, one process per plan device (`mpirun -np 4`): losses and
// every gradient equal the single-process run's within 1e-6 for 1F1B 2BP, GPipe, interleaved,
// DualPipe (its two copies' gradients exchanged before the optimizer) and BPipe plans of the tiny
// model, over shared memory and over TCP on the loopback interface. Each launch runs
// pipeplan_mpi_gradients (mpi_gradients_main.cpp), which compares on rank 0.
#include <gtest/gtest.h>

#include <string>

#include "tests/mpi_support.h"

namespace pipeplan {
namespace {

struct Case {
  std::string args;  // FAMILY BACKWARD [bpipe]
  std::string btl;
};

class MpiGradients : public ::testing::TestWithParam<Case> {};

TEST_P(MpiGradients, EqualTheSingleProcessRun) {
  if (!testing::mpirun_found())
    GTEST_SKIP() << "mpirun is not installed (apt-get install openmpi-bin)";
  const Case& c = GetParam();
  const testing::CliResult r = testing::run_shell(
      testing::mpirun(4, c.btl) + PIPEPLAN_MPI_GRADIENTS + std::string(" ") + c.args);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("gradients equal"), std::string::npos) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Schedules, MpiGradients,
                         ::testing::Values(Case{"1f1b 2bp", "vader"}, Case{"1f1b 2bp", "tcp"},
                                           Case{"gpipe fused", "vader"},
                                           Case{"interleaved 2bp", "vader"},
                                           Case{"dualpipe 2bp", "vader"},
                                           Case{"1f1b fused bpipe", "vader"}),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           std::string name = param.param.args + "_" + param.param.btl;
                           for (char& c : name) {
                             if (c == ' ') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace pipeplan
