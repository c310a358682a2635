// The collectives every launcher shares (runtime/process_group.cpp). Over a group that answers
// nothing and records how long each wait was allowed: a rank other than 0 waits longer for rank
// 0's answer to a gather than rank 0 waits for the gather itself, so that a hung rank is named by
// rank 0 before any other rank gives up on rank 0. Over ranks as threads (thread_ranks.h): a rank
// that left the run on an error of its own is named at the point it skipped, and every rank then
// ends the run together, without waiting out a timeout.
#include "runtime/process_group.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/step_exchange.h"
#include "tests/runtime/thread_ranks.h"

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

// A timeout long enough that waiting it out fails the test's own bound below.
constexpr milliseconds kLong{60000};
constexpr auto kWellUnderLong = std::chrono::seconds(30);

struct Outcome {
  std::string error;  // what the collective threw ("" when nothing)
  bool agreed = false;
  bool ended = false;  // end_run returned
  bool broken = false;
};

// Every rank of `size` but `leaver` runs `collective`; `leaver` goes straight to the end of the
// run, as a rank does after printing an error of its own; then every rank ends the run.
std::vector<Outcome> run_with_a_leaver(int size, int leaver,
                                       const std::function<void(ProcessGroup&)>& collective) {
  auto boxes = std::make_shared<testing::Mailboxes>();
  std::vector<Outcome> outcomes(static_cast<std::size_t>(size));
  testing::run_ranks(size, [&](int rank) {
    testing::ThreadGroup group(boxes, rank, size);
    Outcome& outcome = outcomes[static_cast<std::size_t>(rank)];
    if (rank != leaver) {
      try {
        collective(group);
      } catch (const AgreedError& e) {
        outcome.error = e.what();
        outcome.agreed = true;
      } catch (const Error& e) {
        outcome.error = e.what();
      }
    }
    try {
      group.end_run(kLong);
      outcome.ended = true;
    } catch (const Error& e) {
      outcome.error += " | end: " + std::string(e.what());
    }
    outcome.broken = group.broken();
  });
  return outcomes;
}

TEST(ProcessGroup, ARankThatLeftIsNamedAtThePointItSkippedAndEveryRankEndsTogether) {
  struct Case {
    const char* name;
    std::function<void(ProcessGroup&)> collective;
    std::string rank_zero;  // what rank 0 throws
    std::string others;     // what the other ranks that stayed throw ("" for nothing)
  };
  const std::string left = "left the run before loading the plan (its own error is on its output)";
  const std::vector<Case> cases = {
      {"agree", [](ProcessGroup& g) { g.agree(std::nullopt, "loading the plan", kLong); },
       "rank 2: " + left, "rank 2: " + left},
      {"all_gather",
       [](ProcessGroup& g) { g.all_gather(std::to_string(g.rank()), "loading the plan", kLong); },
       "rank 2 " + left, "rank 2 " + left},
      {"barrier", [](ProcessGroup& g) { g.barrier("loading the plan", kLong); }, "rank 2 " + left,
       "rank 2 " + left},
      // A gather has no answer: the others go on, and hear at the end of the run.
      {"gather", [](ProcessGroup& g) { g.gather("x", "loading the plan", kLong); },
       "rank 2 " + left, ""},
      {"step exchange", [](ProcessGroup& g) { exchange_step(g, RankStep{}, 3, 4, kLong); },
       "step 3: rank 2 left the run during the step (its own error is on its output)",
       "step 3: rank 2 left the run during the step (its own error is on its output)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<Outcome> outcomes = run_with_a_leaver(4, 2, c.collective);
    EXPECT_LT(std::chrono::steady_clock::now() - start, kWellUnderLong);
    for (int r = 0; r < 4; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const Outcome& o = outcomes[static_cast<std::size_t>(r)];
      EXPECT_TRUE(o.ended) << o.error;
      EXPECT_FALSE(o.broken);
      if (r == 2) {
        EXPECT_EQ(o.error, "");
      } else {
        EXPECT_EQ(o.error, r == 0 ? c.rank_zero : c.others);
        EXPECT_EQ(o.agreed, !o.error.empty());
      }
    }
  }
}

// Rank 0 left (it printed its error): a rank waiting for its answer or its broadcast stops
// waiting at once, quietly (an AgreedError, which only rank 0 prints), and comes to the end.
TEST(ProcessGroup, RanksWaitingForARankZeroThatLeftComeToTheEnd) {
  const std::vector<std::pair<const char*, std::function<void(ProcessGroup&)>>> cases = {
      {"agree", [](ProcessGroup& g) { g.agree(std::nullopt, "writing the report", kLong); }},
      {"all_gather", [](ProcessGroup& g) { g.all_gather("x", "writing the report", kLong); }},
      {"broadcast", [](ProcessGroup& g) { g.broadcast("", "writing the report", kLong); }},
  };
  for (const auto& [name, collective] : cases) {
    SCOPED_TRACE(name);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<Outcome> outcomes = run_with_a_leaver(4, 0, collective);
    EXPECT_LT(std::chrono::steady_clock::now() - start, kWellUnderLong);
    for (int r = 0; r < 4; ++r) {
      const Outcome& o = outcomes[static_cast<std::size_t>(r)];
      EXPECT_TRUE(o.ended) << "rank " << r << ": " << o.error;
      EXPECT_FALSE(o.broken) << "rank " << r;
      if (r != 0) {
        EXPECT_TRUE(o.agreed) << "rank " << r;
        EXPECT_EQ(o.error,
                  "rank 0 left the run before writing the report (its own error is on its output)")
            << "rank " << r;
      }
    }
  }
}

// A rank's message is read only at the point it was sent for: a rank that skipped a collective
// for a later one is missing from it, not read as having sent the later one's bytes. A message
// that is no collective's at all is an error naming its sender.
TEST(ProcessGroup, MessagesAreReadAtTheirOwnPointOnly) {
  auto boxes = std::make_shared<testing::Mailboxes>();
  std::string timeout;
  std::string malformed;
  testing::run_ranks(2, [&](int rank) {
    testing::ThreadGroup group(boxes, rank, 2);
    if (rank == 0) {
      try {
        group.gather("zero", "a", milliseconds(300));
      } catch (const GroupTimeout& e) {
        timeout = e.what();
      }
      group.post(1, "not a collective's message");
    } else {
      group.gather("one", "b", kLong);  // skips "a"
      try {
        group.broadcast("", "c", kLong);
      } catch (const Error& e) {
        malformed = e.what();
      }
    }
  });
  EXPECT_EQ(timeout, "rank 1 did not reach a within 300 ms (dead, hung or far behind)");
  EXPECT_NE(malformed.find("a message from rank 0"), std::string::npos) << malformed;
}

}  // namespace
}  // namespace pipeplan
