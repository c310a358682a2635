// Running the pipeplan binary from a test (PIPEPLAN_BINARY is set by the test target's CMake;
// $PIPEPLAN_TEST_BINARY overrides it, for a test binary carried to another machine).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace pipeplan::testing {

struct CliResult {
  int status = -1;
  std::string out;  // stdout and stderr together
};

// `command` through the shell, stderr with stdout; status is the exit code, -1 if it did not
// exit normally.
inline CliResult run_shell(const std::string& command_line) {
  const std::string command = command_line + " 2>&1";
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

// `text` as one word of a /bin/sh command line, whatever it holds (a build folder under a path
// with a space, a quote): in single quotes, each ' in it written as '\''.
inline std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

// The pipeplan binary the tests run: $PIPEPLAN_TEST_BINARY when set and non-empty (binaries
// carried to a GPU machine, where the build tree's absolute paths do not exist), else the one
// CMake built beside the tests.
inline std::string pipeplan_binary() {
  const char* env = std::getenv("PIPEPLAN_TEST_BINARY");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(PIPEPLAN_BINARY);
}

// `pipeplan <args>`; `env` (e.g. "PIPEPLAN_CUDA_PLUGIN=/x.so") prefixes the command line. The
// binary's path is quoted; `args` is shell text as it is.
inline CliResult run_pipeplan(const std::string& args, const std::string& env = "") {
  return run_shell(env + (env.empty() ? "" : " ") + shell_quote(pipeplan_binary()) + " " + args);
}

// A file's whole text ("" when it cannot be read), and a file written with `text`.
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}
inline void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// `write(target)` writes `dir`/`name` as pipeplan writes every output (through a temporary renamed
// over it): in the empty folder `dir` it leaves the target alone, and over a symbolic link at the
// target it replaces the link with the file, never writing through it (the link's file kept).
inline void expect_written_atomically(
    const std::filesystem::path& dir, const std::string& name,
    const std::function<void(const std::filesystem::path&)>& write) {
  const auto names = [&dir] {
    std::vector<std::string> out;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      out.push_back(entry.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  };
  const std::filesystem::path target = dir / name;
  write(target);
  EXPECT_EQ(names(), std::vector<std::string>{name});
  std::filesystem::remove(target);
  write_file(dir / "other.txt", "kept\n");
  std::filesystem::create_symlink("other.txt", target);
  write(target);
  EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::symlink_status(target)));
  EXPECT_EQ(read_file(dir / "other.txt"), "kept\n");
  std::vector<std::string> both = {"other.txt", name};
  std::sort(both.begin(), both.end());
  EXPECT_EQ(names(), both);
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

// A temporary folder holding plan_: the tiny model on 4 stages, 1F1B with 2BP.
class TinyPlanTest : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    plan_ = path("p.json");
    const CliResult r = run_pipeplan(
        "plan --model tiny --stages 4 --microbatches 8 --schedule 1f1b --backward 2bp -o " + plan_);
    ASSERT_EQ(r.status, 0) << r.out;
  }
  std::string plan_;
};

}  // namespace pipeplan::testing
