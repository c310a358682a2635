// Every class of bad input ends in one line naming the option, field or file, a non-zero exit and
// no output file (tests/bad_inputs.sh replays each case against the binary; this covers each
// class from the test suite).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli_support.h"

namespace {

namespace fs = std::filesystem;
using pipeplan::testing::CliResult;
using pipeplan::testing::run_pipeplan;

class BadInput : public pipeplan::testing::TempDirTest {
 protected:
  // `args` may name {out}: the output file that must not appear.
  void expect_refused(std::string args, const std::string& needle) {
    const std::string out = path("out.json");
    for (std::size_t at = args.find("{out}"); at != std::string::npos; at = args.find("{out}"))
      args.replace(at, 5, out);
    const CliResult r = run_pipeplan(args);
    EXPECT_NE(r.status, 0) << args << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << args << "\n" << r.out;
    EXPECT_FALSE(fs::exists(out)) << args;
  }
  std::string write(const std::string& name, const std::string& text) {
    fs::create_directories(fs::path(path(name)).parent_path());
    std::ofstream(path(name)) << text;
    return path(name);
  }
  // The tiny model's analytic profile, with `from` replaced by `to` once.
  std::string profile_with(const std::string& from, const std::string& to) {
    const CliResult r = run_pipeplan("profile --analytic --model tiny -o " + path("good.json"));
    EXPECT_EQ(r.status, 0) << r.out;
    std::ifstream in(path("good.json"));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return write("bad.json", text);
  }
};

const std::string kTiny = "plan --model tiny --stages 2 -m 2";

TEST_F(BadInput, SizesAboveTheirLimitsAreRefused) {
  expect_refused("plan --model tiny --stages 2 -m 1000000000 -o {out}",
                 "--microbatches: 1000000000 is above");
  expect_refused("bpipe --model tiny --stages 2 --global-batch 2147483647",
                 "--global-batch: 2147483647 is above the limit of 16777216");
  expect_refused("profile --analytic --model tiny --max-concat 100000000 -o {out}",
                 "--max-concat: 100000000 is above the limit of 65536");
  expect_refused(kTiny + " --memory 1e30GiB -o {out}", "--memory: '1e30GiB' is above the limit");
  expect_refused(kTiny + " --seq 99999999 -o {out}", "--seq: 99999999 is above the limit");
  const std::string hf = write("big/config.json",
                               "{\"model_type\": \"llama\", \"num_hidden_layers\": 1000000000, "
                               "\"hidden_size\": 64, \"num_attention_heads\": 4, "
                               "\"intermediate_size\": 172, \"vocab_size\": 256, "
                               "\"max_position_embeddings\": 32}");
  expect_refused("plan --model " + hf + " --stages 2 -m 2 -o {out}", "field 'num_hidden_layers'");
}

TEST_F(BadInput, CommandLineValuesAreChecked) {
  // A family that places each p2 itself would ignore it, and the plan would still report it.
  expect_refused("plan --model tiny --stages 2 -m 4 --schedule zb-h1 --p2-concat 4 -o {out}",
                 "--p2-concat: schedule 'zb-h1' places each p2 itself, one micro-batch a call");
  expect_refused(kTiny + " --seq 0 -o {out}", "--seq: must be at least 1");
  expect_refused(kTiny + " --memory '' -o {out}", "--memory: must not be empty");
  expect_refused(kTiny + " -o ''", "--output: must not be empty");
  expect_refused(kTiny + " --tensor-parallel 3 -o {out}",
                 "--tensor-parallel: 3 does not divide the 4 attention heads of tiny");
  expect_refused("plan --uniform 1e308:1:1:0 --stages 2 -m 2 -o {out}",
                 "--uniform: 1e+308 ms is above the limit of 1000000 ms");
  expect_refused("plan --uniform nan:1:1:0 --stages 2 -m 2 -o {out}",
                 "--uniform: 'nan' is not a number");
  expect_refused("bpipe --model tiny --stages 2 --global-batch 8 --mbs-list ''",
                 "--mbs-list: must not be empty");
  ASSERT_EQ(run_pipeplan(kTiny + " -o " + path("p.json")).status, 0);
  expect_refused("show " + path("p.json") + " --width -5 --trace {out}", "--width: must be at");
  expect_refused("show " + path("p.json") + " --width 2147483647 --trace {out}",
                 "--width: 2147483647 is above the limit of 10000");
  expect_refused("run " + path("p.json") + " --steps 2147483647 --trace {out}",
                 "--steps: 2147483647 is above the limit of 10000");
  expect_refused("run " + path("p.json") + " --max-host-gib nan --trace {out}",
                 "--max-host-gib: 'nan' must be a finite decimal number above 0");
  expect_refused("diff " + path("p.json") + " " + path("p.json") + " --top -1",
                 "--top: must be at least 0");
  // GEMM answers are timed on a GPU only; 0 or more than 64 is no count of answers.
  expect_refused("run " + path("p.json") + " --gemm-candidates 8 --trace {out}",
                 "--gemm-candidates: only with --backend cuda");
  expect_refused("run " + path("p.json") + " --backend cuda --gemm-candidates 0 --trace {out}",
                 "--gemm-candidates: must be at least 1");
  expect_refused("run " + path("p.json") + " --backend cuda --gemm-candidates 65 --trace {out}",
                 "--gemm-candidates: 65 is above the limit of 64");
  expect_refused("profile --analytic --model tiny --gemm-candidates 8 -o {out}",
                 "--gemm-candidates: only with --backend cuda");
  expect_refused("profile --backend cuda --model tiny --gemm-candidates 0 -o {out}",
                 "--gemm-candidates: must be at least 1");
  // The load run is measured on a GPU only, for 0 to 3600 s, after 0 to 3600 s idle.
  expect_refused("profile --analytic --model tiny --sustain-seconds 5 -o {out}",
                 "--sustain-seconds, --cooldown-seconds: only with --backend cuda");
  expect_refused("profile --backend cuda --model tiny --sustain-seconds -1 -o {out}",
                 "--sustain-seconds: '-1' is not a number from 0 to 3600");
  expect_refused("profile --backend cuda --model tiny --cooldown-seconds inf -o {out}",
                 "--cooldown-seconds: 'inf' is not a number from 0 to 3600");
}

// Output that cannot be written (a full disk) is a failure, whatever the command printed.
TEST_F(BadInput, StandardOutputThatCannotBeWrittenIsAnError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  ASSERT_EQ(run_pipeplan(kTiny + " -o " + path("p.json")).status, 0);
  // In a group, so that run_shell's 2>&1 after it sends stderr to the pipe, not /dev/full.
  const CliResult r = pipeplan::testing::run_shell(
      "{ " + pipeplan::testing::shell_quote(pipeplan::testing::pipeplan_binary()) + " export " +
      pipeplan::testing::shell_quote(path("p.json")) + " > /dev/full; }");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out, "pipeplan: error: standard output: write failed: No space left on device\n");
  // --help and --version too: what they print is their output.
  for (const std::string args : {"--help", "--version", "plan --help"}) {
    const CliResult shown = pipeplan::testing::run_shell(
        "{ " + pipeplan::testing::shell_quote(pipeplan::testing::pipeplan_binary()) + " " + args +
        " > /dev/full; }");
    EXPECT_EQ(shown.status, 1) << args << ": " << shown.out;
    EXPECT_EQ(shown.out.rfind("pipeplan: error: standard output: write failed", 0), 0U)
        << args << ": " << shown.out;
    EXPECT_EQ(std::count(shown.out.begin(), shown.out.end(), '\n'), 1) << args;
  }
}

TEST_F(BadInput, UsageErrorsAreOneLine) {
  expect_refused("frobnicate", "unknown command 'frobnicate'");
  expect_refused("plan --frobnicate", "unexpected argument: --frobnicate");
  expect_refused(kTiny + " --frobnicate -o {out}", "unexpected argument: --frobnicate");
  expect_refused("plan --model tiny --stages x -m 2", "--stages: 'x' is not a decimal integer");
  expect_refused("", "A subcommand is required");
  const CliResult help = run_pipeplan("plan --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("Usage"), std::string::npos);
}

// --search checks -m and the micro-batch sizes as a plain plan does, each naming its option:
// -m 0 is not a missing -m, and a size --uniform's costs do not hold is refused, not planned at 1.
TEST_F(BadInput, SearchNamesTheMicroBatchOptionItRefuses) {
  const std::string uniform = "plan --uniform 1:1:1:0 --stages 4";
  expect_refused(uniform + " --search -m 0 -o {out}", "--microbatches: must be at least 1");
  expect_refused(uniform + " --search -m -2 -o {out}", "--microbatches: must be at least 1");
  expect_refused(uniform + " --search -o {out}",
                 "--global-batch: required by --search (or give --microbatches)");
  expect_refused(uniform + " --search --global-batch 8 --search-mbs 2,4 -o {out}",
                 "--search-mbs: --uniform has no cost at micro-batch sizes 2, 4");
  expect_refused(uniform + " -m 8 --mbs 2 -o {out}",
                 "--mbs: --uniform has no cost at micro-batch size 2");
  // So is a size a --profile has no cost at, beside sizes it holds (the default list is cut to
  // the sizes it holds).
  const std::string measured =
      std::string(PIPEPLAN_SOURCE_DIR) + "/profiles/h200-llama-7b.measured.json";
  expect_refused("plan --profile " + pipeplan::testing::shell_quote(measured) +
                     " --stages 4 --search --global-batch 32 --search-mbs 2,8,16 -o {out}",
                 "--search-mbs: " + measured +
                     " has no cost at micro-batch sizes 8, 16 (it holds micro-batch sizes 1, 2, "
                     "4)");
  expect_refused(uniform + " --search -m 8 --mbs 2 -o {out}",
                 "--mbs: --uniform has no cost at micro-batch size 2");
}

TEST_F(BadInput, CompareRefusesBadInputsWithOneLine) {
  const std::string compare = "compare --model tiny --stages 2 -m 2";
  expect_refused("compare --model tiny --stages 0 -m 2", "--stages: must be at least 1");
  expect_refused("compare --model tiny --stages 2 -m 0", "--microbatches: must be at least 1");
  expect_refused("compare --model nosuch --stages 2 -m 2", "--model: unknown model 'nosuch'");
  expect_refused("compare --uniform nan:1:1:0 --stages 2 -m 2", "--uniform: 'nan'");
  expect_refused(compare + " --memory 12XB", "--memory: '12XB' is not a size");
  expect_refused("compare --profile " + write("broken.json", "{") + " --stages 2 -m 2",
                 "broken.json: malformed JSON");
  // Inputs no schedule can plan: every row says why, and the exit is non-zero.
  const CliResult none = run_pipeplan("compare --model tiny --stages 8 -m 2");
  EXPECT_NE(none.status, 0) << none.out;
  EXPECT_EQ(run_pipeplan(compare).status, 0);
}

TEST_F(BadInput, FilesWithAbsurdValuesNameFileAndField) {
  expect_refused(
      "plan --profile " +
          profile_with("\"gpu\": \"h100-sxm\",\n  \"layers\"", "\"gpu\": \"h999\",\n  \"layers\"") +
          " --stages 2 -m 2 -o {out}",
      "bad.json: field 'gpu' names unknown GPU 'h999'");
  expect_refused("plan --profile " +
                     profile_with("\"forward_us\": ", "\"forward_us\": 1e300, \"x\": ") +
                     " --stages 2 -m 2 -o {out}",
                 "bad.json: field 'layers.block.1.forward_us' (1e+300) is above the limit");
  expect_refused("plan --profile " +
                     profile_with("\"stash_bytes\": ", "\"stash_bytes\": 1e18, \"x\": ") +
                     " --stages 2 -m 2 -o {out}",
                 "stash_bytes' must be an integer number of bytes");
  // A key twice in one object (the last would silently win).
  expect_refused("plan --profile " +
                     profile_with("\"forward_us\": ", "\"forward_us\": -1, \"forward_us\": ") +
                     " --stages 2 -m 2 -o {out}",
                 "forward_us' appears twice in one object");
  // A link so slow that its transfers would outlast what a plan file holds.
  expect_refused("plan --profile " +
                     profile_with("\"bandwidth_GBps\": 450.0", "\"bandwidth_GBps\": 1e-300") +
                     " --stages 2 -m 2 -o {out}",
                 "bad.json: field 'p2p.bandwidth_GBps' = 1e-300 is neither 0 (latency only) nor "
                 "at least 0.001");
  expect_refused("plan --profile " + profile_with("\"seq\": 32", "\"seq\": 1e999") +
                     " --stages 2 -m 2 -o {out}",
                 "bad.json: field 'seq' number '1e999' is outside the range of a double");
  ASSERT_EQ(run_pipeplan(kTiny + " -o " + path("p.json")).status, 0);
  std::ifstream in(path("p.json"));
  std::string plan((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string durations = "\"duration_values\":";
  ASSERT_NE(plan.find(durations), std::string::npos);
  plan.replace(plan.find(durations) + durations.size(), 0, " 1e999, \"was\":");
  expect_refused("show " + write("p999.json", plan) + " --trace {out}",
                 "p999.json: field 'duration_values' number '1e999' is outside the range of a "
                 "double");
  expect_refused("run " + path("p999.json") + " --trace {out}", "p999.json");
  expect_refused("export " + path("p999.json") + " -o {out}", "p999.json");
}

}  // namespace
