// `--backend cuda` through the plugin boundary (runtime/gpu_plugin.h), without a GPU or CUDA:
// where the module is looked for, and the one-line errors for a missing module, a file that does
// not load (dlerror), a library without the entry point, another interface version, and an
// Error thrown inside the module (fake modules from tests/runtime/plugins/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/gpu_plugin.h"
#include "tests/cli_support.h"

namespace pipeplan {
namespace {

namespace fs = std::filesystem;

using Result = pipeplan::testing::CliResult;

std::string fake_plugin(const std::string& name) {
  return std::string(PIPEPLAN_FAKE_PLUGIN_DIR) + "/lib" + name + ".so";
}

class GpuPluginCli : public pipeplan::testing::TinyPlanTest {
 protected:
  // `run` and `profile` with --backend cuda, the module at `module`.
  std::vector<Result> both_commands(const std::string& module) const {
    const std::string env = std::string(kGpuPluginEnv) + "=" + module;
    return {pipeplan::testing::run_pipeplan("run " + plan_ + " --backend cuda --emulate 4", env),
            pipeplan::testing::run_pipeplan("profile --backend cuda --model tiny", env)};
  }
  static void expect_one_line(const Result& r, const std::vector<std::string>& needles) {
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    for (const std::string& needle : needles)
      EXPECT_NE(r.out.find(needle), std::string::npos) << "no '" << needle << "' in\n" << r.out;
  }
};

TEST_F(GpuPluginCli, AMissingModuleIsNotInstalledForRunAndProfile) {
  const std::string missing = path("missing/libpipeplan_cuda.so");
  for (const Result& r : both_commands(missing)) {
    expect_one_line(r, {"pipeplan: error: --backend cuda: the CUDA backend is not installed",
                        missing, kGpuPluginEnv});
  }
}

TEST_F(GpuPluginCli, WithoutTheVariableTheModuleIsLookedForNextToTheExecutable) {
  const fs::path copy = dir_ / "bin" / "pipeplan";
  fs::create_directories(copy.parent_path());
  fs::copy_file(PIPEPLAN_BINARY, copy);
  const Result r =
      pipeplan::testing::run_shell("env -u " + std::string(kGpuPluginEnv) + " " + copy.string() +
                                   " run " + plan_ + " --backend cuda");
  expect_one_line(r, {"the CUDA backend is not installed",
                      (copy.parent_path() / kGpuPluginFile).string(), kGpuPluginEnv});
}

TEST_F(GpuPluginCli, AFileThatDoesNotLoadGivesDlerror) {
  const std::string bad = path("libpipeplan_cuda.so");
  std::ofstream(bad) << "not a shared library\n";
  for (const Result& r : both_commands(bad))
    expect_one_line(r, {"--backend cuda: cannot load " + bad + ": " + bad + ":"});
}

TEST_F(GpuPluginCli, ALibraryWithoutTheEntryPointIsRefused) {
  const std::string module = fake_plugin("fake_gpu_plugin_no_entry");
  for (const Result& r : both_commands(module))
    expect_one_line(r, {module + " is not a pipeplan CUDA plugin (no pipeplan_gpu_plugin"});
}

TEST_F(GpuPluginCli, AnotherInterfaceVersionIsRefused) {
  const std::string module = fake_plugin("fake_gpu_plugin_v0");
  for (const Result& r : both_commands(module)) {
    expect_one_line(r, {module + " has plugin interface version 0, this pipeplan needs " +
                        std::to_string(kGpuPluginVersion)});
  }
}

TEST_F(GpuPluginCli, AnErrorThrownInsideTheModuleIsPrintedAsOneLine) {
  const std::vector<Result> results = both_commands(fake_plugin("fake_gpu_plugin"));
  expect_one_line(results[0], {"pipeplan: error: fake plugin: prepare_run refused (--emulate 4)"});
  // Without --gpu the module takes the GPU from the device's name.
  expect_one_line(results[1], {"pipeplan: error: fake plugin: measure_profile refused (gpu '',"});
  for (const Result& r : results)
    EXPECT_EQ(r.status, 1) << "caught as a pipeplan::Error, not an internal error\n" << r.out;
}

// A model the runtime's layers do not implement is refused naming the plan, before the module
// is asked to set up GPUs for it (the fake one would refuse prepare_run).
TEST_F(GpuPluginCli, AModelTheLayersDoNotImplementIsRefusedBeforeTheGpusAreSetUp) {
  const std::string gpt = path("g.json");
  ASSERT_EQ(
      pipeplan::testing::run_pipeplan("plan --model gpt-1.5b --stages 2 -m 4 -o " + gpt).status, 0);
  const std::string env = std::string(kGpuPluginEnv) + "=" + fake_plugin("fake_gpu_plugin");
  const Result r = pipeplan::testing::run_pipeplan("run " + gpt + " --backend cuda", env);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out,
            "pipeplan: error: " + gpt + ": model 'gpt-1.5b': backend cuda needs mlp = swiglu\n");
}

TEST_F(GpuPluginCli, ProfileHandsAGivenGpuToTheModuleAndRecordsItInTheCommand) {
  const std::string env = std::string(kGpuPluginEnv) + "=" + fake_plugin("fake_gpu_plugin");
  const Result r =
      pipeplan::testing::run_pipeplan("profile --backend cuda --model tiny --gpu h200", env);
  expect_one_line(
      r, {"(gpu 'h200', command 'pipeplan profile --backend cuda --model tiny", " --gpu h200')"});
}

TEST(GpuPluginPath, IsTheVariableElseNextToTheRunningExecutable) {
  const char* saved = std::getenv(kGpuPluginEnv);
  const std::string restore = saved != nullptr ? saved : "";
  setenv(kGpuPluginEnv, "/opt/x/libpipeplan_cuda.so", 1);
  EXPECT_EQ(gpu_plugin_path(), fs::path("/opt/x/libpipeplan_cuda.so"));
  unsetenv(kGpuPluginEnv);
  EXPECT_EQ(gpu_plugin_path(), fs::read_symlink("/proc/self/exe").parent_path() / kGpuPluginFile);
  if (saved != nullptr) setenv(kGpuPluginEnv, restore.c_str(), 1);
}

}  // namespace
}  // namespace pipeplan
