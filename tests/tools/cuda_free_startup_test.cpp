// The CLI starts without the CUDA libraries: the pipeplan binary does not link them (they come
// with the CUDA module, loaded only for --backend cuda), and planning in-process maps none.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli_support.h"
#include "tools/cli.h"

namespace {

const std::vector<std::string> kCudaLibraries = {"libcudart", "libcublas", "libcublasLt",
                                                 "libnccl"};

// The CUDA libraries named in `text`, one per line of it that names one.
std::string cuda_libraries_in(const std::string& text) {
  std::istringstream lines(text);
  std::string line, found;
  while (std::getline(lines, line)) {
    for (const std::string& library : kCudaLibraries) {
      if (line.find(library) != std::string::npos) {
        found += line + "\n";
        break;
      }
    }
  }
  return found;
}

TEST(CudaFreeStartup, PipeplanBinaryLinksNoCudaLibrary) {
  const pipeplan::testing::CliResult ldd =
      pipeplan::testing::run_shell("ldd " + pipeplan::testing::shell_quote(PIPEPLAN_BINARY));
  ASSERT_EQ(ldd.status, 0) << ldd.out;
  ASSERT_NE(ldd.out.find("libstdc++"), std::string::npos) << "ldd listed nothing:\n" << ldd.out;
  EXPECT_EQ(cuda_libraries_in(ldd.out), "");
}

class CudaFreePlanning : public pipeplan::testing::TempDirTest {};

TEST_F(CudaFreePlanning, PlanningInProcessMapsNoCudaLibrary) {
  const std::string out = path("plan.json");
  std::vector<std::string> args = {
      "pipeplan",   "plan", "--model",        "llama-7b", "--gpu", "h100",
      "--stages",   "4",    "--microbatches", "8",        "--seq", "2048",
      "--schedule", "1f1b", "--backward",     "2bp",      "-o",    out};
  std::vector<char*> argv;
  argv.reserve(args.size());
  for (std::string& arg : args)
    argv.push_back(arg.data());
  std::ostringstream printed;
  std::streambuf* const saved = std::cout.rdbuf(printed.rdbuf());
  const int status = pipeplan::run_cli(static_cast<int>(argv.size()), argv.data());
  std::cout.rdbuf(saved);
  ASSERT_EQ(status, 0) << printed.str();
  ASSERT_TRUE(std::filesystem::exists(out));

  std::ifstream maps_file("/proc/self/maps");
  const std::string maps((std::istreambuf_iterator<char>(maps_file)),
                         std::istreambuf_iterator<char>());
  ASSERT_NE(maps.find("libstdc++"), std::string::npos) << "unreadable /proc/self/maps";
  EXPECT_EQ(cuda_libraries_in(maps), "");
}

}  // namespace
