// `pipeplan env` without a GPU: with no CUDA module it says so and exits 0; on the fake module
// (tests/runtime/plugins/fake_gpu_plugin.cpp) its GPUs get their gpus.json entries and the
// --emulate shares of runtime/emulate.h, its libraries are listed, and the variables pipeplan
// reads are shown as they were before the module loaded.
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "runtime/emulate.h"
#include "tests/cli_support.h"
#include "tools/commands.h"

namespace pipeplan {
namespace {

using pipeplan::testing::CliResult;
using pipeplan::testing::run_pipeplan;

std::string fake_module() {
  return std::string(PIPEPLAN_FAKE_PLUGIN_DIR) + "/libfake_gpu_plugin.so";
}

// `pipeplan env <args>` with the module at `module` and the fake's GPUs `gpus`; the variables
// the test runner may have set are cleared, so the environment section is the test's own.
CliResult env_command(const std::string& args, const std::string& module,
                      const std::string& gpus = "", const std::string& extra = "") {
  return run_pipeplan(
      "env " + args,
      "env -u CUDA_VISIBLE_DEVICES -u CUDA_DEVICE_MAX_CONNECTIONS PIPEPLAN_CUDA_PLUGIN=" +
          pipeplan::testing::shell_quote(module) + " FAKE_GPU_PLUGIN_GPUS='" + gpus + "' " + extra);
}

// The first line of `text` that starts with `prefix`, "" when none does.
std::string line_starting(const std::string& text, const std::string& prefix) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with(prefix)) return line;
  }
  return "";
}

nlohmann::json env_json(const std::string& module, const std::string& gpus = "",
                        const std::string& extra = "") {
  const CliResult r = env_command("--json", module, gpus, extra);
  EXPECT_EQ(r.status, 0) << r.out;
  return nlohmann::json::parse(r.out);
}

TEST(EnvCli, WithoutTheModuleSaysSoAndExitsZero) {
  const std::string missing = "/nonexistent/libpipeplan_cuda.so";
  const CliResult text = env_command("", missing);
  EXPECT_EQ(text.status, 0) << text.out;
  EXPECT_NE(text.out.find("no GPU found: "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("\n  loads          no: the CUDA backend is not installed ("),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("\n  kernel driver  "), std::string::npos) << text.out;

  const nlohmann::json j = env_json(missing);
  EXPECT_EQ(j.at("cuda_module").at("path"), missing);
  EXPECT_FALSE(j.at("cuda_module").at("loaded").get<bool>());
  const std::string error = j.at("cuda_module").at("error").get<std::string>();
  EXPECT_EQ(error.rfind("the CUDA backend is not installed (PIPEPLAN_CUDA_PLUGIN=" + missing, 0),
            0U)
      << error;
  EXPECT_TRUE(j.at("gpus").empty());
  EXPECT_TRUE(j.at("libraries").empty());
  EXPECT_FALSE(j.at("gpu_error").get<std::string>().empty());
  EXPECT_TRUE(j.at("pipeplan").at("fused_attention").is_null());
}

TEST(EnvCli, JsonHasEveryDocumentedKey) {
  const nlohmann::json j = env_json(fake_module(), "NVIDIA H100 80GB HBM3=132");
  for (const char* key :
       {"pipeplan", "cuda_module", "gpus", "gpu_error", "libraries", "environment"})
    EXPECT_TRUE(j.contains(key)) << key;
  for (const char* key : {"version", "compiler", "build_type", "cuda_backend", "fused_attention",
                          "nccl", "mpi", "gpus_json", "gpus_json_error"})
    EXPECT_TRUE(j.at("pipeplan").contains(key)) << key;
  for (const char* key : {"path", "loaded", "error", "kernel_driver", "built_with_cuda",
                          "driver_version", "runtime_version", "fused_attention_error"})
    EXPECT_TRUE(j.at("cuda_module").contains(key)) << key;
  for (const char* key : {"index", "name", "gpu_entry", "sms", "memory_bytes", "compute_capability",
                          "driver_version", "runtime_version", "emulate_sm_share"})
    EXPECT_TRUE(j.at("gpus").at(0).contains(key)) << key;
  for (const char* key : {"name", "path", "version", "error"})
    EXPECT_TRUE(j.at("libraries").at(0).contains(key)) << key;
  EXPECT_FALSE(j.at("pipeplan").at("version").get<std::string>().empty());
}

TEST(EnvCli, FakeGpusGetTheirGpusJsonEntryAndTheEmulatedShares) {
  const nlohmann::json j =
      env_json(fake_module(), "NVIDIA H100 80GB HBM3=132,NVIDIA A100-SXM4-80GB=108,Mystery=4");
  EXPECT_TRUE(j.at("cuda_module").at("loaded").get<bool>());
  EXPECT_TRUE(j.at("cuda_module").at("error").is_null());
  EXPECT_EQ(j.at("cuda_module").at("driver_version"), "13.1");
  EXPECT_TRUE(j.at("gpu_error").is_null());
  const nlohmann::json& gpus = j.at("gpus");
  ASSERT_EQ(gpus.size(), 3U) << j.dump(2);
  EXPECT_EQ(gpus[0].at("gpu_entry"), "h100-sxm");
  EXPECT_EQ(gpus[1].at("gpu_entry"), "a100-80g");
  EXPECT_EQ(gpus[2].at("gpu_entry"), "none");
  EXPECT_EQ(gpus[1].at("index"), 1);
  EXPECT_EQ(gpus[0].at("sms"), 132);
  EXPECT_EQ(gpus[0].at("memory_bytes").get<std::int64_t>(), std::int64_t{80} << 30);
  EXPECT_EQ(gpus[0].at("compute_capability"), "9.0");
  EXPECT_EQ(gpus[0].at("driver_version"), "13.1");
  EXPECT_EQ(gpus[0].at("runtime_version"), "13.0");

  // The shares are the runtime's own: every P from 1 while each stage keeps 8 SMs.
  for (const nlohmann::json& gpu : gpus) {
    const int sms = gpu.at("sms").get<int>();
    const nlohmann::json& shares = gpu.at("emulate_sm_share");
    for (std::size_t i = 0; i < shares.size(); ++i) {
      const int stages = shares[i].at("stages").get<int>();
      EXPECT_EQ(stages, static_cast<int>(i) + 1);
      EXPECT_EQ(shares[i].at("sms_per_stage").get<int>(), emulated_sm_share(sms, stages));
    }
    const int next = static_cast<int>(shares.size()) + 1;
    if (next <= 16) {
      EXPECT_THROW(emulated_sm_share(sms, next), Error) << sms << " SMs";
    }
  }
  EXPECT_EQ(gpus[0].at("emulate_sm_share").size(), 16U);                 // 132 / 16 -> 8
  EXPECT_EQ(gpus[0].at("emulate_sm_share")[3].at("sms_per_stage"), 32);  // 132 / 4
  EXPECT_EQ(gpus[1].at("emulate_sm_share").size(), 13U);                 // 108 / 14 -> 7
  EXPECT_TRUE(gpus[2].at("emulate_sm_share").empty());  // 12: below 8 per stage at P = 2
}

// A gpus.json that does not load is said beside its path (the GPUs' entries read "none" then,
// which alone looked like a GPU gpus.json lacks).
TEST(EnvCli, AGpusJsonThatDoesNotLoadIsSaidBesideItsPath) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("env-gpus-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  pipeplan::testing::write_file(dir / "gpus.json", "{");
  const std::string data = "PIPEPLAN_DATA_DIR=" + pipeplan::testing::shell_quote(dir.string());
  const nlohmann::json j = env_json(fake_module(), "NVIDIA H100 80GB HBM3=132", data);
  EXPECT_EQ(j.at("pipeplan").at("gpus_json"), (dir / "gpus.json").string());
  EXPECT_EQ(j.at("pipeplan").at("gpus_json_error"),
            (dir / "gpus.json").string() + ": malformed JSON at byte 2");
  EXPECT_EQ(j.at("gpus").at(0).at("gpu_entry"), "none");
  const CliResult text = env_command("", fake_module(), "NVIDIA H100 80GB HBM3=132", data);
  EXPECT_EQ(line_starting(text.out, "  gpus.json"),
            "  gpus.json        " + (dir / "gpus.json").string() +
                " (does not load: " + (dir / "gpus.json").string() + ": malformed JSON at byte 2)");
  const nlohmann::json shipped = env_json(fake_module(), "NVIDIA H100 80GB HBM3=132");
  EXPECT_TRUE(shipped.at("pipeplan").at("gpus_json_error").is_null());
  std::filesystem::remove_all(dir);
}

TEST(EnvCli, NoGpuOnTheModuleGivesItsReasonAndExitsZero) {
  const CliResult text = env_command("", fake_module());
  EXPECT_EQ(text.status, 0) << text.out;
  // Where the NVIDIA kernel module is not loaded, that is the reason given first.
  const bool driver = std::filesystem::exists("/proc/driver/nvidia/version");
  const std::string reason =
      driver ? "fake plugin: no CUDA-capable device is detected"
             : "no NVIDIA kernel driver is loaded (no /proc/driver/nvidia/version; the CUDA "
               "runtime says: fake plugin: no CUDA-capable device is detected)";
  EXPECT_NE(text.out.find("  no GPU found: " + reason + "\n"), std::string::npos) << text.out;
  const nlohmann::json j = env_json(fake_module());
  EXPECT_TRUE(j.at("gpus").empty());
  EXPECT_EQ(j.at("gpu_error"), reason);
  EXPECT_EQ(j.at("libraries").size(), 5U);  // the module still reports its libraries
}

TEST(EnvCli, LibrariesComeWithPathsVersionsOrTheReasonTheyAreMissing) {
  const nlohmann::json j = env_json(fake_module());
  const nlohmann::json& libraries = j.at("libraries");
  ASSERT_EQ(libraries.size(), 5U);
  EXPECT_EQ(libraries[0].at("name"), "libcudart");
  EXPECT_EQ(libraries[0].at("path"), "/fake/cuda/lib64/libcudart.so.13.0.88");
  EXPECT_EQ(libraries[0].at("version"), "13.0");
  EXPECT_TRUE(libraries[0].at("error").is_null());
  EXPECT_EQ(libraries[3].at("name"), "libcudnn");
  EXPECT_TRUE(libraries[3].at("path").is_null());
  EXPECT_EQ(libraries[3].at("error"), "cannot load libcudnn.so.9: fake plugin");
  EXPECT_TRUE(j.at("pipeplan").at("fused_attention").get<bool>());
  EXPECT_EQ(j.at("cuda_module").at("fused_attention_error"),
            "cannot load libcudnn.so.9: fake plugin");

  const CliResult text = env_command("", fake_module());
  EXPECT_NE(text.out.find("  libcudart    13.0    /fake/cuda/lib64/libcudart.so.13.0.88\n"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("  libcudnn     not loaded: cannot load libcudnn.so.9: fake plugin\n"),
            std::string::npos)
      << text.out;
}

TEST(EnvCli, ShowsTheVariablesPipeplanReadsAndNoOthers) {
  const nlohmann::json j =
      env_json(fake_module(), "",
               "CUDA_DEVICE_MAX_CONNECTIONS=4 NCCL_DEBUG=INFO HOME_ALONE=1 "
               "CUDA_LAUNCH_BLOCKING=1 CUDA_MODULE_LOADING=EAGER CUDA_HOME=/x");
  const nlohmann::json& variables = j.at("environment");
  EXPECT_EQ(variables.at("CUDA_DEVICE_MAX_CONNECTIONS"), "4");
  EXPECT_EQ(variables.at("CUDA_LAUNCH_BLOCKING"), "1");
  EXPECT_EQ(variables.at("CUDA_MODULE_LOADING"), "EAGER");
  EXPECT_FALSE(variables.contains("CUDA_HOME"));
  EXPECT_EQ(variables.at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(variables.at("PIPEPLAN_CUDA_PLUGIN"), fake_module());
  EXPECT_FALSE(variables.contains("HOME_ALONE"));
  EXPECT_FALSE(variables.contains("FAKE_GPU_PLUGIN_GPUS"));

  const CliResult text =
      env_command("", fake_module(), "", "CUDA_DEVICE_MAX_CONNECTIONS=4 NCCL_DEBUG=INFO");
  EXPECT_NE(text.out.find("\nenvironment\n"), std::string::npos) << text.out;
  const std::string line = line_starting(text.out, "  NCCL_DEBUG ");
  EXPECT_EQ(line.substr(line.find_last_of(' ') + 1), "INFO") << text.out;
}

TEST(EnvCli, TextHasOneAlignedSectionPerTopic) {
  const CliResult r = env_command("", fake_module(), "NVIDIA H100 80GB HBM3=132");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string shares = std::string("1:128 2:64 3:40 4:32 5:24 6:16 7:16 8:16 9:8 10:8 ") +
                             "11:8 12:8 13:8 14:8 15:8 16:8";
  for (const std::string& needle :
       {std::string("pipeplan\n  version  "), std::string("\nCUDA module\n  path  "),
        std::string("\nGPUs\n  0: NVIDIA H100 80GB HBM3\n"),
        std::string("    gpus.json           h100-sxm\n"),
        std::string("    SMs                 132\n"), std::string("    compute capability  9.0\n"),
        "    --emulate P:SMs     " + shares + "\n",
        std::string("\nlibraries (as the CUDA module loads them)\n"),
        std::string("\nenvironment\n")})
    EXPECT_NE(r.out.find(needle), std::string::npos) << "no '" << needle << "' in\n" << r.out;
}

TEST(EnvCli, AnUnknownFlagIsOneLineNamingIt) {
  const CliResult r = run_pipeplan("env --gpus 3");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find("--gpus"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace pipeplan

// The kernel module's version, from both forms of /proc/driver/nvidia/version's first line.
TEST(EnvCli, TheKernelDriverComesFromTheModulesVersionLine) {
  EXPECT_EQ(pipeplan::nvidia_kernel_driver(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 30 2025"),
            "580.95.05");
  EXPECT_EQ(pipeplan::nvidia_kernel_driver("NVRM version: NVIDIA UNIX Open Kernel Module for "
                                           "x86_64  580.159.04  Release Build  (dvs-builder@U16)"),
            "580.159.04");
  EXPECT_EQ(pipeplan::nvidia_kernel_driver("no such module"), "");
  EXPECT_EQ(pipeplan::nvidia_kernel_driver(""), "");
}
