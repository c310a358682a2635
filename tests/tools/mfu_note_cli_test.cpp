// show flags a plan whose times are faster than its GPU's peak computes the model's FLOPs (its
// MFU above 100 %): a note in the text and `mfu_above_peak` in --json; null for a plan the planner
// made from the analytic profile.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli_support.h"

namespace pipeplan {
namespace {

using testing::run_pipeplan;
using testing::shell_quote;
using testing::TempDirTest;

class MfuNoteCli : public TempDirTest {};

TEST_F(MfuNoteCli, ShowFlagsTimesFasterThanTheGpuCouldRunThem) {
  const std::string plan = path("p.json"), fast = path("fast.json");
  const auto r =
      run_pipeplan("plan --model llama-7b --gpu h100 --stages 4 -m 8 -o " + shell_quote(plan));
  ASSERT_EQ(r.status, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(plan));
  for (nlohmann::json& v : j["nodes"]["duration_values"])
    v = v.get<double>() / 10;  // ten times faster than the profile: about 4 times the GPU's peak
  std::ofstream(fast) << j.dump();

  const auto text = run_pipeplan("show " + shell_quote(fast));
  ASSERT_EQ(text.status, 0) << text.out;
  EXPECT_NE(text.out.find("note: MFU "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("is above 100 % of gpu 'h100-sxm'"), std::string::npos) << text.out;

  const auto flagged = run_pipeplan("show --json " + shell_quote(fast));
  ASSERT_EQ(flagged.status, 0) << flagged.out;
  const nlohmann::json note = nlohmann::json::parse(flagged.out)["mfu_above_peak"];
  ASSERT_TRUE(note.is_string()) << flagged.out;
  EXPECT_NE(note.get<std::string>().find("faster than its peak"), std::string::npos);

  const auto plain = run_pipeplan("show --json " + shell_quote(plan));
  ASSERT_EQ(plain.status, 0) << plain.out;
  EXPECT_TRUE(nlohmann::json::parse(plain.out)["mfu_above_peak"].is_null()) << plain.out;
  const auto plain_text = run_pipeplan("show " + shell_quote(plan));
  EXPECT_EQ(plain_text.out.find("note: MFU"), std::string::npos) << plain_text.out;
}

}  // namespace
}  // namespace pipeplan
