// Core errors name request fields; the CLI names flags (tools/fields.h).
#include "tools/fields.h"

#include <gtest/gtest.h>

#include "planner/base/error.h"
#include "tests/cli_support.h"

namespace pipeplan {
namespace {

TEST(Fields, CoreErrorsNameTheFieldAndTheCliNamesTheFlag) {
  const FieldError plain("devices", "must be at least 1");
  EXPECT_EQ(std::string(plain.what()), "devices: must be at least 1");
  EXPECT_EQ(plain.field(), "devices");
  const FieldNamer previous = set_field_namer(flag_for_field);
  const FieldError flagged("devices", "must be at least 1");
  EXPECT_EQ(std::string(flagged.what()), "--stages: must be at least 1");
  EXPECT_EQ(flagged.field(), "devices");  // the field stays the core's
  set_field_namer(previous);
  EXPECT_EQ(flag_for_field("memory_limit_bytes"), "--memory");
  EXPECT_EQ(flag_for_field("no_such_field"), "no_such_field");
}

TEST(Fields, ThePipeplanBinaryPrintsFlags) {
  const auto r = testing::run_pipeplan("plan --uniform 1:1:1:0 --stages 4 --microbatches 0");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "pipeplan: error: --microbatches: must be at least 1\n");
  const auto layers = testing::run_pipeplan(
      "plan --model llama-7b --stages 2 --microbatches 4 --layers-per-stage 1,2");
  EXPECT_EQ(layers.status, 1);
  EXPECT_EQ(layers.out.rfind("pipeplan: error: --layers-per-stage: ", 0), 0U) << layers.out;
}

}  // namespace
}  // namespace pipeplan
