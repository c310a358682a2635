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
    try {
      barrier ? rank1.barrier("loading the plan", kTimeout)
              : static_cast<void>(rank1.all_gather("x", "loading the plan", kTimeout));
      FAIL() << "no timeout";
    } catch (const GroupTimeout& e) {
      // The wait is not the timeout the user gave: the message says how it follows from it.
      EXPECT_EQ(std::string(e.what()),
                "rank 0 did not answer at loading the plan within 5000 ms (2 x --timeout-ms 2000 "
                "+ 1 s; dead, hung or far behind)");
    }
    ASSERT_EQ(rank1.waits.size(), 1U);
    EXPECT_EQ(rank1.waits[0].from, 0);
    EXPECT_GT(rank1.waits[0].ms, 2 * kTimeout.count());
    EXPECT_TRUE(rank1.broken());

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

// A broadcast on its own waits the timeout given, and names what rank 0 did not send; rank 0's
// answer to a gather waits answer_timeout and says so.
TEST(ProcessGroup, ABroadcastAndAnAnswerNameTheirOwnWaits) {
  constexpr milliseconds kTimeout{300};
  SilentGroup rank2(2, 3);
  try {
    rank2.broadcast("", "the NCCL unique id", kTimeout);
    FAIL() << "no timeout";
  } catch (const GroupTimeout& e) {
    EXPECT_EQ(std::string(e.what()),
              "rank 0 did not send the NCCL unique id within 300 ms (dead, hung or far behind)");
  }
  try {
    rank2.answer("", "the end of step 4", kTimeout);
    FAIL() << "no timeout";
  } catch (const GroupTimeout& e) {
    EXPECT_EQ(std::string(e.what()),
              "rank 0 did not answer at the end of step 4 within 1600 ms (2 x --timeout-ms 300 + "
              "1 s; dead, hung or far behind)");
  }
  ASSERT_EQ(rank2.waits.size(), 2U);
  EXPECT_LE(rank2.waits[0].ms, 300);
  EXPECT_GT(rank2.waits[1].ms, 1500);
  SilentGroup rank0(0, 3);
  EXPECT_EQ(rank0.answer("verdict", "the end of step 4", kTimeout), "verdict");
  EXPECT_TRUE(rank0.waits.empty());
}

}  // namespace
}  // namespace pipeplan
