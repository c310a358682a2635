// Sizes on the command line (tools/units.h): a decimal number and a unit, binary and decimal
// prefixes up to peta, and a number without a unit refused unless it is 0.
#include "tools/units.h"

#include <gtest/gtest.h>

#include <string>

#include "planner/base/error.h"

namespace pipeplan {
namespace {

std::string error_of(const std::string& text) {
  try {
    (void)parse_bytes(text, "--memory");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ParseBytes, EveryUnitUpToPeta) {
  EXPECT_EQ(parse_bytes("512B", "--memory"), 512.0);
  EXPECT_EQ(parse_bytes("1.5KiB", "--memory"), 1536.0);
  EXPECT_EQ(parse_bytes("80GiB", "--memory"), 80.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_bytes("80G", "--memory"), 80.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_bytes("80GB", "--memory"), 80e9);
  EXPECT_EQ(parse_bytes("1e3GiB", "--memory"), 1000.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_bytes("1PiB", "--memory"), 1024.0 * 1024 * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_bytes("1PB", "--memory"), 1e15);
  EXPECT_EQ(parse_bytes("0", "--memory"), 0.0);
}

TEST(ParseBytes, ANumberWithoutAUnitIsRefusedUnlessZero) {
  EXPECT_EQ(error_of("80"), "--memory: '80' has no unit (80GiB, 80GB or 80B for bytes)");
  EXPECT_EQ(error_of("0.5"), "--memory: '0.5' has no unit (0.5GiB, 0.5GB or 0.5B for bytes)");
  EXPECT_EQ(error_of("12XB"), "--memory: '12XB' is not a size (e.g. 80GiB)");
  EXPECT_EQ(error_of("1EiB"), "--memory: '1EiB' is not a size (e.g. 80GiB)");
}

}  // namespace
}  // namespace pipeplan
