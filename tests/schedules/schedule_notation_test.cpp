// The action notation and the schedule text form: exact round trips and one-line errors.
#include <gtest/gtest.h>

#include <string>

#include "planner/base/error.h"
#include "schedules/schedule.h"

namespace pipeplan {
namespace {

std::string error_of(void (*fn)(std::string_view), std::string_view text) {
  try {
    fn(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

void parse_only(std::string_view text) {
  parse_action(text);
}
void parse_schedule_only(std::string_view text) {
  schedule_from_text(text);
}

TEST(ScheduleNotation, OpAndModeNames) {
  EXPECT_EQ(to_string(OpType::F), "F");
  EXPECT_EQ(to_string(OpType::B), "B");
  EXPECT_EQ(to_string(OpType::P1), "P1");
  EXPECT_EQ(to_string(OpType::P2), "P2");
  EXPECT_EQ(to_string(BackwardMode::fused), "fused");
  EXPECT_EQ(to_string(BackwardMode::twobp), "2bp");
  EXPECT_EQ(to_string(BackwardMode::twobp_fill), "2bp-fill");
  for (BackwardMode mode : {BackwardMode::fused, BackwardMode::twobp, BackwardMode::twobp_fill})
    EXPECT_EQ(backward_mode_from_string(to_string(mode)), mode);
}

TEST(ScheduleNotation, UnknownBackwardModeNamesTheFieldAndTheChoices) {
  try {
    backward_mode_from_string("twobp");
    FAIL() << "accepted 'twobp'";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "backward: unknown backward mode 'twobp' (valid: fused, 2bp, 2bp-fill)");
  }
}

TEST(ScheduleNotation, FormatsEveryOpKind) {
  EXPECT_EQ(format_action({OpType::F, 0, {3}}), "0F3");
  EXPECT_EQ(format_action({OpType::B, 0, {3}}), "0B3");
  EXPECT_EQ(format_action({OpType::P1, 0, {3}}), "0P1_3");
  EXPECT_EQ(format_action({OpType::P2, 0, {3}}), "0P2_3");
  EXPECT_EQ(format_action({OpType::P2, 0, {4, 5, 6}}), "0P2_4+5+6");
  EXPECT_EQ(format_action({OpType::F, 12, {103}}), "12F103");
}

TEST(ScheduleNotation, ParsesEveryOpKind) {
  EXPECT_EQ(parse_action("0F3"), (Action{OpType::F, 0, {3}}));
  EXPECT_EQ(parse_action("0B3"), (Action{OpType::B, 0, {3}}));
  EXPECT_EQ(parse_action("0P1_3"), (Action{OpType::P1, 0, {3}}));
  EXPECT_EQ(parse_action("0P2_3"), (Action{OpType::P2, 0, {3}}));
  EXPECT_EQ(parse_action("0P2_4+5+6"), (Action{OpType::P2, 0, {4, 5, 6}}));
  EXPECT_EQ(parse_action("12F103"), (Action{OpType::F, 12, {103}}));
  EXPECT_EQ(parse_action("107P2_10+11"), (Action{OpType::P2, 107, {10, 11}}));
}

TEST(ScheduleNotation, RoundTripsEveryOpKind) {
  for (const char* text : {"0F0", "3B12", "10P1_0", "7P2_9", "0P2_4+5+6+7", "12F103", "99B100"})
    EXPECT_EQ(format_action(parse_action(text)), text);
}

TEST(ScheduleNotation, RejectsJunkQuotingTheToken) {
  for (const char* junk :
       {"",       "F3",       "0X3",  "0F",   "0F3+4", "0B3+4",       "0P1_3+4", "0P2_4+",
        "0P2_+4", "0P2_4++5", "03F1", "0F03", "-1F0",  "0F-1",        "0F3 ",    " 0F3",
        "0P1_",   "0P3_1",    "0P2",  "0F3x", "0f3",   "1234567890F0"}) {
    const std::string message = error_of(parse_only, junk);
    EXPECT_NE(message.find("action '" + std::string(junk) + "'"), std::string::npos)
        << "'" << junk << "' gave: " << message;
  }
}

Schedule small_schedule() {
  Schedule schedule;
  schedule.family = "1f1b";
  schedule.backward = BackwardMode::twobp;
  schedule.devices = 2;
  schedule.microbatches = 2;
  schedule.stage_device = {0, 1};
  schedule.per_device = {
      {{OpType::F, 0, {0}},
       {OpType::F, 0, {1}},
       {OpType::P1, 0, {0}},
       {OpType::P1, 0, {1}},
       {OpType::P2, 0, {0, 1}}},
      {{OpType::F, 1, {0}},
       {OpType::P1, 1, {0}},
       {OpType::F, 1, {1}},
       {OpType::P1, 1, {1}},
       {OpType::P2, 1, {0}},
       {OpType::P2, 1, {1}}},
  };
  return schedule;
}

constexpr const char* kSmallText =
    "schedule v1 family=1f1b backward=2bp devices=2 microbatches=2 stages=0,1\n"
    "0: 0F0 0F1 0P1_0 0P1_1 0P2_0+1\n"
    "1: 1F0 1P1_0 1F1 1P1_1 1P2_0 1P2_1\n";

TEST(ScheduleNotation, WritesTheDocumentedTextForm) {
  EXPECT_EQ(schedule_to_text(small_schedule()), kSmallText);
}

TEST(ScheduleNotation, TextRoundTripsBothWays) {
  EXPECT_EQ(schedule_from_text(kSmallText), small_schedule());
  EXPECT_EQ(schedule_to_text(schedule_from_text(kSmallText)), kSmallText);
}

TEST(ScheduleNotation, EmptyDeviceListRoundTrips) {
  Schedule schedule = small_schedule();
  schedule.per_device[1].clear();
  EXPECT_EQ(schedule_from_text(schedule_to_text(schedule)), schedule);
}

TEST(ScheduleNotation, TextErrorsNameLineAndToken) {
  const std::string bad_action =
      std::string(kSmallText).replace(std::string(kSmallText).find("1P1_1"), 5, "1Q1_1");
  EXPECT_EQ(error_of(parse_schedule_only, bad_action), "schedule line 3: malformed action '1Q1_1'");
  EXPECT_EQ(error_of(parse_schedule_only,
                     "schedule v1 family=x backward=fast devices=1 microbatches=1 stages=0\n0:\n"),
            "schedule line 1: backward: expected fused, 2bp or 2bp-fill, got 'fast'");
  EXPECT_EQ(error_of(parse_schedule_only,
                     "schedule v1 family=x backward=2bp devices=1 microbatches=1\n0:\n"),
            "schedule line 1: missing key 'stages'");
  EXPECT_EQ(
      error_of(parse_schedule_only,
               "schedule v1 family=x backward=2bp devices=1 microbatches=1 stages=0 y=1\n0:\n"),
      "schedule line 1: unknown key 'y'");
  EXPECT_EQ(error_of(parse_schedule_only,
                     "schedule v1 family=x backward=2bp devices=2 microbatches=1 stages=0,1\n"
                     "1: 1F0 1B0\n0: 0F0 0B0\n"),
            "schedule line 2: expected '0:', got '1:'");
  EXPECT_NE(error_of(parse_schedule_only, "schedule v2 family=x\n").find("line 1"),
            std::string::npos);
  EXPECT_NE(error_of(parse_schedule_only,
                     "schedule v1 family=x backward=2bp devices=2 microbatches=1 stages=0,1\n0:\n")
                .find("line 3"),
            std::string::npos);
  EXPECT_NE(error_of(parse_schedule_only,
                     "schedule v1 family=x backward=2bp devices=two microbatches=1 stages=0\n0:\n")
                .find("'two'"),
            std::string::npos);
}

}  // namespace
}  // namespace pipeplan
