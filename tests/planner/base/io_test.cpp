// JSON and file reading: every failure one line naming the file.
#include "planner/base/io.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "planner/base/limits.h"
#include "tests/cli_support.h"
#include "tests/error_support.h"

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

// The elements of one top-level array go to the sink one at a time, in order, whatever they are;
// the rest of the document is kept, the array left empty; an array of that name deeper down is
// not streamed.
TEST(ParseJsonStreaming, HandsEachElementOverAndKeepsTheRest) {
  std::vector<std::pair<std::string, std::size_t>> seen;
  const nlohmann::json rest = parse_json_streaming(
      R"({"a": {"e": [1, 2]}, "e": [{"x": [1, {"y": 2}]}, 3, "s", [4, [5]], null], "z": 1})",
      "t.json", "e", [&](nlohmann::json&& element, std::size_t index) {
        seen.emplace_back(element.dump(), index);
      });
  const std::vector<std::pair<std::string, std::size_t>> expected = {
      {R"({"x":[1,{"y":2}]})", 0}, {"3", 1}, {R"("s")", 2}, {"[4,[5]]", 3}, {"null", 4}};
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(rest, nlohmann::json::parse(R"({"a": {"e": [1, 2]}, "e": [], "z": 1})"));
}

TEST(ParseJsonStreaming, ErrorsAreParseJsonTextsAndTheSinksEndIt) {
  const auto sink = [](nlohmann::json&&, std::size_t) {};
  const auto error = [&](std::string_view text) {
    return pipeplan::testing::error_of([&] { parse_json_streaming(text, "t.json", "e", sink); });
  };
  EXPECT_EQ(error(R"({"e": [{"k": 1, "k": 2}]})"),
            "t.json: field 'e[].k' appears twice in one object");
  EXPECT_EQ(error(R"({"e": [], "e": []})"), "t.json: field 'e' appears twice in one object");
  EXPECT_EQ(error(R"({"e": [1, 2)"), "t.json: malformed JSON at byte 12");
  std::size_t calls = 0;
  EXPECT_EQ(pipeplan::testing::error_of([&] {
              parse_json_streaming(R"({"e": [1, 2, 3]})", "t.json", "e",
                                   [&](nlohmann::json&&, std::size_t index) {
                                     ++calls;
                                     if (index == 1) throw Error("t.json: element 1");
                                   });
            }),
            "t.json: element 1");
  EXPECT_EQ(calls, 2U);
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

TEST(ParseJson, NumberBeyondADoubleInAnArrayOfNumbersNamesTheArraysField) {
  EXPECT_EQ(parse_error("{\"durations\": [1, 2.5,\n 1e999]}"),
            "p.json: field 'durations' number '1e999' is outside the range of a double (line 2, "
            "byte 25)");
}

TEST(ParseJsonColumns, AnArrayUnderEachElementIsAColumnNamedByTheElementsIndex) {
  const JsonColumns doc = parse_json_columns(
      R"({"streams": [{"order": [3, 1]}, {"device": 2}, {"order": [], "peer": [5]}],
          "other": [{"order": [9]}]})",
      "p.json", {"streams[].order"});
  ASSERT_NE(doc.column("streams[0].order"), nullptr);
  EXPECT_EQ(*doc.column("streams[0].order"), (std::vector<std::int64_t>{3, 1}));
  EXPECT_EQ(doc.column("streams[1].order"), nullptr);
  ASSERT_NE(doc.column("streams[2].order"), nullptr);
  EXPECT_TRUE(doc.column("streams[2].order")->empty());
  EXPECT_EQ(doc.columns.size(), 2U);  // not other[0].order
  EXPECT_FALSE(doc.json["streams"][0].contains("order"));
  EXPECT_EQ(doc.json["streams"][1]["device"], 2);
  EXPECT_EQ(doc.json["streams"][2]["peer"], nlohmann::json::array({5}));
  EXPECT_EQ(doc.json["other"][0]["order"], nlohmann::json::array({9}));
  const auto error = [](std::string_view text) {
    try {
      (void)parse_json_columns(text, "p.json", {"streams[].order"});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(R"({"streams": [{}, {"order": [1, 2.5]}]})"),
            "p.json: field 'streams[1].order' must hold integers only");
  EXPECT_EQ(error(R"({"streams": [{"order": [1], "order": 4}]})"),
            "p.json: field 'streams[].order' appears twice in one object");
}

std::string columns_error(std::string_view text) {
  try {
    parse_json_columns(text, "p.json", {"edges", "nodes.stream"});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ParseJsonColumns, ArraysAtTheGivenPathsBecomeColumnsAndTheRestStaysJson) {
  const JsonColumns doc = parse_json_columns(
      R"({"edges": [1, -2, 9223372036854775807], "nodes": {"stream": [4, 5], "op": "FB",
          "stage": [7]}, "other": {"nodes": {"stream": [8]}}, "list": [{"edges": [3]}]})",
      "p.json", {"edges", "nodes.stream"});
  ASSERT_NE(doc.column("edges"), nullptr);
  EXPECT_EQ(*doc.column("edges"), (std::vector<std::int64_t>{1, -2, 9223372036854775807}));
  ASSERT_NE(doc.column("nodes.stream"), nullptr);
  EXPECT_EQ(*doc.column("nodes.stream"), (std::vector<std::int64_t>{4, 5}));
  EXPECT_EQ(doc.column("nodes.stage"), nullptr);
  EXPECT_EQ(doc.columns.size(), 2U);  // not other.nodes.stream, not list[0].edges
  EXPECT_FALSE(doc.json.contains("edges"));
  EXPECT_FALSE(doc.json["nodes"].contains("stream"));
  EXPECT_EQ(doc.json["nodes"]["op"], "FB");
  EXPECT_EQ(doc.json["nodes"]["stage"], nlohmann::json::array({7}));
  EXPECT_EQ(doc.json["other"]["nodes"]["stream"], nlohmann::json::array({8}));
  EXPECT_EQ(doc.json["list"][0]["edges"], nlohmann::json::array({3}));
  // Everything else as parse_json_text gives it.
  const std::string plain = R"({"a": [1, {"b": null, "c": [true, 2.5, "x"]}], "d": {}})";
  EXPECT_EQ(parse_json_columns(plain, "p.json", {"edges"}).json, parse_json_text(plain, "p.json"));
}

TEST(ParseJsonColumns, AnythingButInt64sInAColumnIsOneLineNamingIt) {
  EXPECT_EQ(columns_error(R"({"edges": [1, 2.5]})"),
            "p.json: field 'edges' must hold integers only");
  EXPECT_EQ(columns_error(R"({"edges": [1, "2"]})"),
            "p.json: field 'edges' must hold integers only");
  EXPECT_EQ(columns_error(R"({"edges": [[1, 2]]})"),
            "p.json: field 'edges' must hold integers only");
  EXPECT_EQ(columns_error(R"({"nodes": {"stream": [{}]}})"),
            "p.json: field 'nodes.stream' must hold integers only");
  EXPECT_EQ(columns_error(R"({"edges": [9223372036854775808]})"),
            "p.json: field 'edges' holds an integer outside the range of int64");
  EXPECT_EQ(columns_error(R"({"edges": [1], "edges": [2]})"),
            "p.json: field 'edges' appears twice in one object");
  // A column is in no object, but its key is still the object's: a later value under it too.
  EXPECT_EQ(columns_error(R"({"edges": [1], "edges": "x"})"),
            "p.json: field 'edges' appears twice in one object");
  EXPECT_EQ(columns_error(R"({"nodes": {"stream": [1], "stream": {"a": 1}}})"),
            "p.json: field 'nodes.stream' appears twice in one object");
  EXPECT_EQ(columns_error(R"({"edges": [1, 2,]})"), "p.json: malformed JSON at byte 17");
  EXPECT_EQ(columns_error(R"({"edges": [1, 1e999]})"),
            "p.json: field 'edges' number '1e999' is outside the range of a double (line 1, "
            "byte 15)");
  EXPECT_EQ(columns_error(std::string(100, '[')).substr(0, 29), "p.json: JSON nested 65 deep i");
}

TEST(Int64Value, IntegersWithinInt64AndNothingElse) {
  EXPECT_EQ(int64_value(nlohmann::json(-5)), -5);
  EXPECT_EQ(int64_value(nlohmann::json(0U)), 0);
  const auto largest = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(int64_value(nlohmann::json(largest)), std::numeric_limits<std::int64_t>::max());
  // One past int64 is unsigned in JSON and would read as a negative number.
  EXPECT_EQ(int64_value(nlohmann::json(largest + 1)), std::nullopt);
  EXPECT_EQ(int64_value(nlohmann::json(2.0)), std::nullopt);
  EXPECT_EQ(int64_value(nlohmann::json("3")), std::nullopt);
  EXPECT_EQ(int64_value(nlohmann::json(nullptr)), std::nullopt);
  EXPECT_EQ(int64_value(nlohmann::json(true)), std::nullopt);
}

TEST(Error, MessagesAreOneLineWhateverTheyQuote) {
  EXPECT_STREQ(Error("unknown GPU 'h100\nx\r\ty\x01'").what(),
               "unknown GPU 'h100\\nx\\r\\ty\\x01'");
  EXPECT_STREQ(FieldError("gpu", "'a\nb'").what(), "gpu: 'a\\nb'");
  // Well-formed UTF-8 stays; a byte that is none, a C1 control and an overlong form are escaped.
  EXPECT_STREQ(Error("cell '0B0\xff' \u00e9 \u4e2d \U0001F600").what(),
               "cell '0B0\\xff' \u00e9 \u4e2d \U0001F600");
  EXPECT_STREQ(Error("a\xc2\x85"
                     "b \xc0\xaf \xed\xa0\x80")
                   .what(),
               "a\\xc2\\x85b \\xc0\\xaf \\xed\\xa0\\x80");
  // Line separators, direction overrides and zero-width marks act on the text around them.
  EXPECT_STREQ(Error("1f1b\u2028next\u202eevil\u200b\ufeff").what(),
               "1f1b\\u2028next\\u202Eevil\\u200B\\uFEFF");
  EXPECT_STREQ(Error("x\u061c\u2060\ufff9\U000E0041").what(), "x\\u061C\\u2060\\uFFF9\\U000E0041");
  // A quote cut to length ends on a whole character.
  EXPECT_EQ(utf8_prefix("a\u00e9\u00e9", 2), "a");
  EXPECT_EQ(utf8_prefix("a\u00e9\u00e9", 3), "a\u00e9");
  EXPECT_EQ(utf8_prefix("abc", 5), "abc");
  EXPECT_EQ(json_excerpt(nlohmann::json(std::string(30, 'a') + "\u00e9\u00e9\u00e9"), 32),
            "\"" + std::string(30, 'a') + "...");
}

TEST(PrintableText, ControlCharactersAreFoundAndReplaced) {
  EXPECT_EQ(control_character_at("0F3 \"quoted\" {braces} caf\u00e9"), std::string_view::npos);
  EXPECT_EQ(control_character_at("ab\x1b[31m"), 2U);
  EXPECT_EQ(control_character_at("a\x7f"), 1U);
  EXPECT_EQ(control_character_at("a\u009b1m"), 1U);  // C1 CSI, two bytes in UTF-8
  EXPECT_EQ(control_character_at("line\nline\t", "\n\t"), std::string_view::npos);
  EXPECT_EQ(control_character_at("line\nline\r", "\n\t"), 9U);
  EXPECT_EQ(control_character_problem("ab\x1b"),
            "holds control character U+001B at byte 2 (names and labels are printable text)");
  EXPECT_EQ(control_character_problem("\u009b").substr(0, 30), "holds control character U+009B");
  EXPECT_EQ(printable_text("a\x1b[1m\nb\u009bc\u00e9"), "a?[1m?b?c\u00e9");
}

// A name made from a file name that is no UTF-8 (a Linux path is bytes) stays writable as JSON:
// each stray, truncated, overlong or surrogate byte becomes '?', valid sequences stay.
TEST(PrintableText, BytesThatAreNoUtf8AreReplaced) {
  EXPECT_EQ(printable_text("m\xffodel"), "m?odel");
  EXPECT_EQ(printable_text("\xc3"), "?");                 // truncated
  EXPECT_EQ(printable_text("\xc0\xaf"), "??");            // overlong '/'
  EXPECT_EQ(printable_text("\xed\xa0\x80x"), "???x");     // a surrogate
  EXPECT_EQ(printable_text("\xf4\x90\x80\x80"), "????");  // above U+10FFFF
  EXPECT_EQ(printable_text("\u00e9\u4e2d\U0001f600"), "\u00e9\u4e2d\U0001f600");
  EXPECT_NO_THROW((void)nlohmann::json(printable_text("\xff\xfe")).dump());
  EXPECT_EQ(json_text(nlohmann::json("a\xff"
                                     "b")),
            "\"a\xef\xbf\xbd"
            "b\"");  // U+FFFD
}

// A key twice in one object is refused naming its path; the same key in two objects is not.
TEST(ParseJson, AKeyTwiceInOneObjectIsRefusedNamingItsPath) {
  const auto error = [](std::string_view text) {
    try {
      (void)parse_json_text(text, "f.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(error(R"({"a": 1, "a": 2})"), "f.json: field 'a' appears twice in one object");
  EXPECT_EQ(error(R"({"layers": {"block": {"1": {"forward_us": -1, "forward_us": 44}}}})"),
            "f.json: field 'layers.block.1.forward_us' appears twice in one object");
  EXPECT_EQ(error(R"({"gpus": [{"name": "x"}, {"name": "y", "name": "z"}]})"),
            "f.json: field 'gpus[].name' appears twice in one object");
  EXPECT_EQ(parse_json_text(R"({"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 3}, {"k": 4}]})", "f")
                .at("c")
                .size(),
            2U);
  // The plan reader's columnar parse refuses one too.
  try {
    (void)parse_json_columns(R"({"meta": {"x": 1, "x": 1}, "n": [1]})", "p.json", {"n"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "p.json: field 'meta.x' appears twice in one object");
  }
}

TEST(ParseJson, MalformedJsonNamesTheByte) {
  EXPECT_EQ(parse_error("{\"a\": }"), "p.json: malformed JSON at byte 7");
  EXPECT_EQ(parse_error(""), "p.json: malformed JSON at byte 1");
}

TEST(ParseJson, HugeIntegersStillParse) {
  // Integers beyond 64 bits become doubles; only values beyond a double are refused.
  EXPECT_NO_THROW(parse_json_text("{\"a\": 123456789012345678901234567890}", "p.json"));
}

TEST(RequireFormat, AVersionPastTheSignedRangeIsNamedAsWritten) {
  // 2^64 - 1 is an unsigned JSON integer: read as int64 it would say "version is -1".
  const nlohmann::json j =
      parse_json_text(R"({"format": "pipeplan-plan", "version": 18446744073709551615})", "p.json");
  try {
    require_format(j, "pipeplan-plan", 1, 3, "p.json");
    FAIL() << "version 2^64 - 1 was read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "p.json: field 'version' is 18446744073709551615, above the largest integer read "
              "(9223372036854775807)");
  }
  const nlohmann::json two =
      parse_json_text(R"({"format": "pipeplan-plan", "version": 2})", "p.json");
  EXPECT_EQ(require_format(two, "pipeplan-plan", 1, 3, "p.json"), 2);
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
