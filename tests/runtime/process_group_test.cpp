// The collectives every launcher shares (runtime/process_group.cpp), over a group that answers
// nothing and records how long each wait was allowed: a rank other than 0 waits longer for rank
// 0's answer to a gather than rank 0 waits for the gather itself, so that a hung rank is named by
// rank 0 before any other rank gives up on rank 0.
#include "runtime/process_group.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace pipeplan {
namespace {

using std::chrono::milliseconds;

// Rank `rank` of `size`; nothing ever arrives. Records each poll's allowed wait.
class SilentGroup final : public ProcessGroup {
 public:
  SilentGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return rank_; }
  std::string name() const override { return "silent"; }
  void post(int /*to*/, std::string /*bytes*/) override {}
  std::optional<std::string> poll(int from, Clock::time_point deadline, const Idle&) override {
    waits.push_back(
        {from, std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count()});
    return std::nullopt;
  }
  struct Wait {
    int from;
    long long ms;
  };
  std::vector<Wait> waits;

 private:
  int rank_;
  int size_;
};

TEST(ProcessGroup, OtherRanksWaitForRankZerosAnswerLongerThanItWaitsForThem) {
  constexpr milliseconds kTimeout{2000};
  EXPECT_EQ(answer_timeout(kTimeout), milliseconds(5000));
  for (const bool barrier : {true, false}) {
    SCOPED_TRACE(barrier ? "barrier" : "all_gather");
    SilentGroup rank1(1, 3);
    EXPECT_THROW(barrier ? rank1.barrier("set-up", kTimeout)
                         : static_cast<void>(rank1.all_gather("x", "set-up", kTimeout)),
                 GroupTimeout);
    ASSERT_EQ(rank1.waits.size(), 1U);
    EXPECT_EQ(rank1.waits[0].from, 0);
    EXPECT_GT(rank1.waits[0].ms, 2 * kTimeout.count());

    SilentGroup rank0(0, 3);
    try {
      barrier ? rank0.barrier("set-up", kTimeout)
              : static_cast<void>(rank0.all_gather("x", "set-up", kTimeout));
      FAIL() << "no timeout";
    } catch (const GroupTimeout& e) {
      EXPECT_NE(std::string(e.what()).find("ranks 1, 2 did not reach set-up within 2000 ms"),
                std::string::npos)
          << e.what();
    }
    ASSERT_FALSE(rank0.waits.empty());
    for (const SilentGroup::Wait& wait : rank0.waits)
      EXPECT_LE(wait.ms, kTimeout.count());
  }
}

}  // namespace
}  // namespace pipeplan
