// `pipeplan run --backend cuda` under mpirun, one rank per GPU (docs/design/runtime.md,
// "Multi-process runs"): the CUDA module's per-rank set-up is collective, so without a GPU every
// rank stops and rank 0 prints one line; with two GPUs, two ranks over NCCL (unique id sent through
// MPI) train as one process driving both GPUs. Skipped without mpirun or a pipeplan built with MPI.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/cuda/context.h"
#include "tests/cli_support.h"
#include "tests/mpi_support.h"
#include "tests/runtime/cuda/gpu_test_support.h"

namespace pipeplan {
namespace {

using testing::CliResult;
using testing::count;

class CudaMpiRun : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
#ifndef PIPEPLAN_TEST_MPI
    GTEST_SKIP() << "pipeplan was built without MPI";
#endif
    if (!testing::mpirun_found()) GTEST_SKIP() << "mpirun is not installed";
    plan_ = path("p2.json");
    const CliResult r = testing::run_pipeplan(
        "plan --model tiny --stages 2 --microbatches 4 --schedule 1f1b --backward 2bp -o " + plan_ +
        testing::gpu_test_attention_flag());
    ASSERT_EQ(r.status, 0) << r.out;
  }
  std::string plan_;
};

TEST_F(CudaMpiRun, WithoutAGpuEveryRankStopsAndRankZeroSaysWhy) {
  if (cuda::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  const CliResult r =
      testing::run_shell(testing::mpirun(2) + testing::shell_quote(testing::pipeplan_binary()) +
                         " run " + testing::shell_quote(plan_) + " --backend cuda --steps 1");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "pipeplan: error: "), 1) << r.out;
  EXPECT_NE(r.out.find("pipeplan: error: no CUDA device found\n"), std::string::npos) << r.out;
}

TEST_F(CudaMpiRun, TwoRanksOverNcclTrainAsOneProcessOnTwoGpus) {
  if (cuda::cuda_device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  const std::string args = "run " + plan_ + " --backend cuda --steps 3 --json";
  const CliResult one = testing::run_pipeplan(args);
  ASSERT_EQ(one.status, 0) << one.out;
  const CliResult two = testing::run_shell(
      testing::mpirun(2) + testing::shell_quote(testing::pipeplan_binary()) + " " + args);
  ASSERT_EQ(two.status, 0) << two.out;
  const nlohmann::json a = nlohmann::json::parse(one.out);
  const nlohmann::json b = nlohmann::json::parse(two.out);
  EXPECT_EQ(b.at("ranks"), 2);
  EXPECT_NE(b.at("transport").get<std::string>().find("one process per GPU"), std::string::npos);
  ASSERT_EQ(b.at("steps").size(), 3U);
  for (std::size_t s = 0; s < 3; ++s) {
    const double want = a.at("steps")[s].at("loss").get<double>();
    // bf16 with fp32 atomics (embedding p2, RMSNorm gain): the order of additions may differ.
    EXPECT_NEAR(b.at("steps")[s].at("loss").get<double>(), want, 1e-3 * want) << "step " << s + 1;
  }
  for (const auto& memory : b.at("peak_memory"))
    EXPECT_GT(memory.at("measured_bytes").get<double>(), 0.0) << memory;
}

}  // namespace
}  // namespace pipeplan
