// The real CUDA module as `pipeplan` loads it (dlopen with every symbol bound at once, so a
// symbol the executable does not export fails here): without a GPU, --backend cuda fails in one
// line from inside the module; with one, a tiny plan runs emulated on it, and a flash plan runs
// cuDNN's fused attention or is refused in one line; a module whose CUDA runtime is missing fails
// to load in one line with dlerror().
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/cuda/context.h"
#include "runtime/cuda/sdpa.h"
#include "tests/cli_support.h"
#include "tests/runtime/cuda/gpu_test_support.h"

namespace pipeplan {
namespace {

using Result = pipeplan::testing::CliResult;

// The module under test: $PIPEPLAN_TEST_CUDA_MODULE when set and non-empty (binaries carried to a
// GPU machine), else the one CMake built.
std::string cuda_module() {
  const char* env = std::getenv("PIPEPLAN_TEST_CUDA_MODULE");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(PIPEPLAN_CUDA_MODULE);
}

const std::string kModuleEnv = "PIPEPLAN_CUDA_PLUGIN=" + cuda_module();

class CudaPluginCli : public pipeplan::testing::TinyPlanTest {};

TEST_F(CudaPluginCli, WithoutAGpuRunAndProfileFailInOneLine) {
  if (cuda::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  for (const std::string& args :
       {"run " + plan_ + " --backend cuda", "run " + plan_ + " --backend cuda --emulate 4",
        std::string("profile --backend cuda --model tiny")}) {
    const Result r = pipeplan::testing::run_pipeplan(args, kModuleEnv);
    EXPECT_EQ(r.status, 1) << args << "\n" << r.out;
    EXPECT_EQ(r.out, "pipeplan: error: no CUDA device found\n") << args;
  }
}

TEST_F(CudaPluginCli, WithAGpuATinyPlanRunsEmulated) {
  if (cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string plan = path("runnable.json");
  const Result planned = pipeplan::testing::run_pipeplan(
      "plan --model tiny --stages 4 --microbatches 8 --schedule 1f1b --backward 2bp -o " + plan +
      pipeplan::testing::gpu_test_attention_flag());
  ASSERT_EQ(planned.status, 0) << planned.out;
  const Result r = pipeplan::testing::run_pipeplan(
      "run " + plan + " --backend cuda --emulate 4 --steps 2 --json", kModuleEnv);
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report.at("backend").get<std::string>().rfind("cuda-bf16", 0), 0U) << r.out;
  EXPECT_EQ(report.at("steps").size(), 2U);
}

// plan_ has the default attention, flash: fused where this module has it (the report says which
// cuDNN ran), else refused in one line that says why and names the unfused mode.
TEST_F(CudaPluginCli, WithAGpuAFlashPlanRunsFusedOrIsRefusedInOneLine) {
  if (cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Result r = pipeplan::testing::run_pipeplan(
      "run " + plan_ + " --backend cuda --emulate 4 --steps 1 --json", kModuleEnv);
  const std::string why = cuda::fused_attention_unavailable();
  if (why.empty()) {
    ASSERT_EQ(r.status, 0) << r.out;
    const std::string backend = nlohmann::json::parse(r.out).at("backend").get<std::string>();
    EXPECT_NE(backend.find("attention flash: cuDNN SDPA, cuDNN 9."), std::string::npos) << backend;
    return;
  }
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_EQ(r.out.rfind("pipeplan: error: --attention: flash (cuDNN's fused attention) is "
                        "unavailable: " +
                            why + "; plan and profile with --attention recompute",
                        0),
            0U)
      << r.out;
}

TEST_F(CudaPluginCli, AModuleWhoseCudaRuntimeIsMissingFailsToLoadInOneLine) {
  // A copy of the module that needs "libcudaXX" wherever it needs "libcudart" (same length, so
  // the ELF stays valid): what a machine without the CUDA runtime looks like to dlopen.
  std::ifstream in(cuda_module(), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int renamed = 0;
  for (std::size_t at = bytes.find("libcudart.so."); at != std::string::npos;
       at = bytes.find("libcudart.so.", at)) {
    bytes.replace(at, 9, "libcudaXX");
    ++renamed;
  }
  ASSERT_GT(renamed, 0) << "the module does not name libcudart";
  const std::string module = path("libpipeplan_cuda.so");
  std::ofstream(module, std::ios::binary) << bytes;
  const Result r = pipeplan::testing::run_pipeplan("run " + plan_ + " --backend cuda",
                                                   "PIPEPLAN_CUDA_PLUGIN=" + module);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(
      r.out.find("pipeplan: error: --backend cuda: cannot load " + module + ": libcudaXX.so."),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("cannot open shared object file"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace pipeplan
