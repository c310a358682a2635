// Running the pipeplan binary from a test (PIPEPLAN_BINARY is set by the test target's CMake).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace pipeplan::testing {

struct CliResult {
  int status = -1;
  std::string out;  // stdout and stderr together
};

// `pipeplan <args>` through the shell; status is the exit code, -1 if it did not exit normally.
inline CliResult run_pipeplan(const std::string& args) {
  const std::string command = std::string(PIPEPLAN_BINARY) + " " + args + " 2>&1";
  CliResult r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr)
    r.out += buffer.data();
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

// A fresh temporary folder per test, named after its suite, test and process (ctest runs tests
// in parallel, and two builds' suites may run at once on one machine), removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("pipeplan_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
            std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

}  // namespace pipeplan::testing
