// The real CUDA module as `pipeplan` loads it (dlopen with every symbol bound at once, so a
// symbol the executable does not export fails here): without a GPU, --backend cuda fails in one
// line from inside the module; with one, a tiny plan runs emulated on it, and a flash plan runs
// cuDNN's fused attention or is refused in one line; a module whose CUDA runtime is missing fails
// to load in one line with dlerror(); `pipeplan env` reports the libraries the module loaded
// (with or without a GPU) and, with one, the device as the CUDA runtime describes it.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/cuda/context.h"
#include "runtime/cuda/sdpa.h"
#include "runtime/emulate.h"
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

// `pipeplan env --json` on the real module: loaded, and every library it links is found on disk
// with a version; cuDNN too where fused attention is available here. The module sets
// CUDA_DEVICE_MAX_CONNECTIONS for itself when it loads; the report shows the user's environment.
nlohmann::json env_report() {
  const Result r = pipeplan::testing::run_pipeplan(
      "env --json", "env -u CUDA_DEVICE_MAX_CONNECTIONS " + kModuleEnv);
  EXPECT_EQ(r.status, 0) << r.out;
  nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_TRUE(report.at("cuda_module").at("loaded").get<bool>()) << r.out;
  EXPECT_FALSE(report.at("environment").contains("CUDA_DEVICE_MAX_CONNECTIONS")) << r.out;
  for (const nlohmann::json& library : report.at("libraries")) {
    const std::string name = library.at("name").get<std::string>();
    if (name == "libcudnn" && !cuda::fused_attention_unavailable().empty()) {
      EXPECT_TRUE(library.at("path").is_null()) << library.dump();
      continue;
    }
    if (name == "libnccl" && !report.at("pipeplan").at("nccl").get<bool>()) continue;
    EXPECT_TRUE(library.at("path").is_string()) << library.dump();
    if (!library.at("path").is_string()) continue;
    const std::string path = library.at("path").get<std::string>();
    EXPECT_TRUE(std::filesystem::is_regular_file(path)) << path;
    EXPECT_NE(std::filesystem::path(path).filename().string().find(name + ".so"), std::string::npos)
        << path;
    EXPECT_TRUE(library.at("version").is_string()) << library.dump();
  }
  return report;
}

TEST_F(CudaPluginCli, EnvWithoutAGpuSaysWhyAndListsTheLibraries) {
  if (cuda::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  const nlohmann::json report = env_report();
  EXPECT_TRUE(report.at("gpus").empty());
  EXPECT_TRUE(report.at("gpu_error").is_string()) << report.dump(2);
  const Result text = pipeplan::testing::run_pipeplan("env", kModuleEnv);
  EXPECT_EQ(text.status, 0) << text.out;
  EXPECT_NE(text.out.find("\n  no GPU found: "), std::string::npos) << text.out;
}

TEST_F(CudaPluginCli, EnvWithAGpuDescribesItAsTheRuntimeDoes) {
  if (cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const nlohmann::json report = env_report();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_EQ(report.at("gpus").size(), static_cast<std::size_t>(count)) << report.dump(2);
  EXPECT_TRUE(report.at("gpu_error").is_null());
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  const nlohmann::json& gpu = report.at("gpus").at(0);
  EXPECT_EQ(gpu.at("name"), prop.name);
  EXPECT_EQ(gpu.at("sms"), prop.multiProcessorCount);
  EXPECT_EQ(gpu.at("memory_bytes").get<std::int64_t>(),
            static_cast<std::int64_t>(prop.totalGlobalMem));
  EXPECT_EQ(gpu.at("compute_capability"),
            std::to_string(prop.major) + "." + std::to_string(prop.minor));
  EXPECT_TRUE(gpu.at("driver_version").is_string());
  const nlohmann::json& shares = gpu.at("emulate_sm_share");
  ASSERT_GE(shares.size(), 1U);
  for (const nlohmann::json& share : shares) {
    EXPECT_EQ(share.at("sms_per_stage").get<int>(),
              emulated_sm_share(prop.multiProcessorCount, share.at("stages").get<int>()));
  }
}

}  // namespace
}  // namespace pipeplan
