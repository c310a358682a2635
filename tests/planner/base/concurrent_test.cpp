// run_beside: both pieces of work run, whether or not the helper thread takes its part, and the
// offered part's exception is the one that propagates.
#include "planner/base/concurrent.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>

namespace pipeplan {
namespace {

std::string thrown_by(const std::function<void()>& offered, const std::function<void()>& here) {
  try {
    run_beside(offered, here);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(RunBeside, RunsBothOnceAndReturnsAfterBoth) {
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> offered{0}, here{0};
    run_beside([&] { ++offered; }, [&] { ++here; });
    EXPECT_EQ(offered.load(), 1);
    EXPECT_EQ(here.load(), 1);
  }
}

TEST(RunBeside, TheOfferedPartsErrorWins) {
  const auto fail = [](const char* what) { return [what] { throw std::runtime_error(what); }; };
  const auto nothing = [] {};
  EXPECT_EQ(thrown_by(fail("offered"), nothing), "offered");
  EXPECT_EQ(thrown_by(nothing, fail("here")), "here");
  EXPECT_EQ(thrown_by(fail("offered"), fail("here")), "offered");
  EXPECT_EQ(thrown_by(nothing, nothing), "");
}

}  // namespace
}  // namespace pipeplan
