// run_beside: both pieces of work run, whether or not the helper thread takes its part, and the
// offered part's exception is the one that propagates. run_items_beside: every item once.
#include "planner/base/concurrent.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

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

TEST(RunItemsBeside, RunsEveryItemOnce) {
  for (const std::size_t count : {0, 1, 2, 3, 17, 1000}) {
    std::vector<std::atomic<int>> runs(count);
    run_items_beside(count, [&](std::size_t i) { ++runs[i]; });
    for (std::size_t i = 0; i < count; ++i)
      EXPECT_EQ(runs[i].load(), 1) << "item " << i << " of " << count;
  }
}

TEST(RunItemsBeside, AnItemsErrorPropagatesAfterTheOthersFinish) {
  std::vector<std::atomic<int>> runs(50);
  try {
    run_items_beside(runs.size(), [&](std::size_t i) {
      ++runs[i];
      if (i == 7) throw std::runtime_error("item 7");
    });
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "item 7");
  }
  for (std::size_t i = 0; i < runs.size(); ++i)
    EXPECT_EQ(runs[i].load(), 1) << "item " << i;
}

}  // namespace
}  // namespace pipeplan
