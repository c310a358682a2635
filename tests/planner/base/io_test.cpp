// JSON and file reading: every failure one line naming the file.
#include "planner/base/io.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "planner/base/error.h"
#include "planner/base/limits.h"
#include "tests/cli_support.h"

namespace pipeplan {
namespace {

std::string parse_error(std::string_view text) {
  try {
    parse_json_text(text, "p.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ParseJson, NumberBeyondADoubleNamesFieldLineAndByte) {
  const std::string message = parse_error("{\n  \"seq\": 1e999\n}");
  EXPECT_EQ(
      message,
      "p.json: field 'seq' number '1e999' is outside the range of a double (line 2, byte 12)");
  EXPECT_EQ(message.find("json.exception"), std::string::npos);
}

TEST(ParseJson, NumberBeyondADoubleInAnArrayAndNegative) {
  EXPECT_EQ(parse_error("[1, \"1e999\", -1e999]"),
            "p.json: number '-1e999' is outside the range of a double (line 1, byte 14)");
}

// Found by fuzz_profile: "1e999.5" overflows before the parser meets the '.', and the search
// for where it stands went past it into the malformed rest, naming a "field" that held a newline.
TEST(ParseJson, NumberBeyondADoubleFollowedByGarbageIsFoundWhereItStands) {
  EXPECT_EQ(parse_error("{\"a\": 1e999.5,\n\"b,\nc\": 1e999 }"),
            "p.json: field 'a' number '1e999' is outside the range of a double (line 1, byte 7)");
  EXPECT_EQ(parse_error("[123456789012345678901234567890123456789012345678901234567890e999]"),
            "p.json: number '1234567890123456789012345678901234567890...' is outside the range "
            "of a double (line 1, byte 2)");
  EXPECT_EQ(parse_error("{\"a\\\"b\": 1e999}"),
            "p.json: number '1e999' is outside the range of a double (line 1, byte 10)");
}

TEST(Error, MessagesAreOneLineWhateverTheyQuote) {
  EXPECT_STREQ(Error("unknown GPU 'h100\nx\r\ty\x01'").what(),
               "unknown GPU 'h100\\nx\\r\\ty\\x01'");
  EXPECT_STREQ(FieldError("gpu", "'a\nb'").what(), "gpu: 'a\\nb'");
}

TEST(ParseJson, MalformedJsonNamesTheByte) {
  EXPECT_EQ(parse_error("{\"a\": }"), "p.json: malformed JSON at byte 7");
  EXPECT_EQ(parse_error(""), "p.json: malformed JSON at byte 1");
}

TEST(ParseJson, HugeIntegersStillParse) {
  // Integers beyond 64 bits become doubles; only values beyond a double are refused.
  EXPECT_NO_THROW(parse_json_text("{\"a\": 123456789012345678901234567890}", "p.json"));
}

class ReadFile : public testing::TempDirTest {};

TEST_F(ReadFile, DirectoryAndMissingFileAreOneLine) {
  try {
    read_text_file(dir_);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir_.string() + ": is a directory");
  }
  EXPECT_THROW(read_text_file(path("missing.json")), Error);
}

TEST_F(ReadFile, FileAboveTheLimitIsRefusedBeforeReading) {
  const std::string big = path("big.json");
  { std::ofstream(big) << "{}"; }
  std::filesystem::resize_file(big, static_cast<std::uintmax_t>(limits::kMaxFileBytes) + 1);
  try {
    read_json_file(big);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("above the limit of 1073741824"), std::string::npos)
        << e.what();
  }
}

TEST(Limits, CheckLimitNamesTheField) {
  try {
    limits::check_limit("microbatches", 1000000000, limits::kMaxMicrobatches);
    FAIL();
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "microbatches");
    EXPECT_EQ(e.detail(), "1000000000 is above the limit of 65536 (docs/reference/limits.md)");
  }
  EXPECT_NO_THROW(limits::check_limit("microbatches", 65536, limits::kMaxMicrobatches));
}

}  // namespace
}  // namespace pipeplan
