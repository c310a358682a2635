// `pipeplan run --emulate` is validated on the host before any GPU is touched: a count other
// than the plan's devices, or a backend other than cuda, fails with one line naming --emulate.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/cli_support.h"

namespace pipeplan {
namespace {

namespace fs = std::filesystem;

using Result = pipeplan::testing::CliResult;
Result run(const std::string& args) {
  return pipeplan::testing::run_pipeplan(args);
}

class EmulateCli : public pipeplan::testing::TinyPlanTest {
 protected:
  static void expect_one_line_naming(const Result& r, const std::string& what) {
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(what), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
};

TEST_F(EmulateCli, CountMustEqualThePlansDevices) {
  const Result wrong = run("run " + plan_ + " --backend cuda --emulate 3");
  expect_one_line_naming(wrong, "--emulate: 3 stages");
  EXPECT_NE(wrong.out.find("4 devices"), std::string::npos) << wrong.out;
  expect_one_line_naming(run("run " + plan_ + " --backend cuda --emulate -1"), "--emulate");
}

TEST_F(EmulateCli, NeedsTheCudaBackend) {
  expect_one_line_naming(run("run " + plan_ + " --emulate 4"), "--backend cuda");
  expect_one_line_naming(run("run " + plan_ + " --gpu h100"), "--gpu");
}

}  // namespace
}  // namespace pipeplan
