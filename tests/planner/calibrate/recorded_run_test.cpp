// The recorded files beside a run: its plan command, its run report's peaks, and run labels.
#include "planner/calibrate/recorded_run.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "planner/base/error.h"

namespace pipeplan {
namespace {

using Words = std::vector<std::string>;

TEST(RecordedRun, SplitsACommandLineAsTheShellDoes) {
  EXPECT_EQ(split_command_line("a  'b c' \"d \\\"e\\\"\" f\\ g ''", "x"),
            (Words{"a", "b c", "d \"e\"", "f g", ""}));
  EXPECT_EQ(split_command_line("--layout Et\\*3\\|tL", "x"), (Words{"--layout", "Et*3|tL"}));
  EXPECT_THROW(split_command_line("a 'b", "x"), Error);
}

TEST(RecordedRun, FindsTheCommandLine) {
  const std::string text =
      "# gpu: H200\n# command: build/tools/pipeplan plan --profile p.json -o {out}/r.plan.json\n"
      "step time 1 ms\n";
  EXPECT_EQ(
      recorded_command(text, "r.plan.txt"),
      (Words{"build/tools/pipeplan", "plan", "--profile", "p.json", "-o", "{out}/r.plan.json"}));
  EXPECT_THROW(recorded_command("step time 1 ms\n", "r.plan.txt"), Error);
}

TEST(RecordedRun, ReadsThePeaksByDeviceBetweenHeaderLines) {
  const RecordedPeaks peaks = recorded_peaks(
      "# command: pipeplan run\n{\"peak_memory\": [{\"device\": 1, \"measured_bytes\": 30, "
      "\"predicted_bytes\": 20}, {\"device\": 0, \"measured_bytes\": 10, \"predicted_bytes\": "
      "10}]}\n# exit status: 0\n",
      "r.run.json");
  EXPECT_EQ(peaks.measured_bytes, (std::vector<std::int64_t>{10, 30}));
  EXPECT_EQ(peaks.predicted_bytes, (std::vector<std::int64_t>{10, 20}));
  EXPECT_DOUBLE_EQ(worst_memory_error_pct(peaks.predicted_bytes, peaks.measured_bytes), 50);
  EXPECT_TRUE(std::isnan(worst_memory_error_pct({0}, {1})));
  try {
    recorded_peaks("{\"peak_memory\": [{\"device\": 0}]}", "r.run.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("measured_bytes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(recorded_peaks("{}", "r.run.json"), Error);
}

// `run --backend cpu --json` reports the measured peaks alone, in device order.
TEST(RecordedRun, ReadsTheCpuReportsMeasuredPeaks) {
  const RecordedPeaks peaks =
      recorded_peaks("{\"backend\": \"cpu\", \"peak_memory_bytes\": [40, 25, 31]}\n", "r.run.json");
  EXPECT_EQ(peaks.measured_bytes, (std::vector<std::int64_t>{40, 25, 31}));
  EXPECT_TRUE(peaks.predicted_bytes.empty());
  for (const char* bad : {"{\"peak_memory_bytes\": []}", "{\"peak_memory_bytes\": [1, 2.5]}",
                          "{\"peak_memory_bytes\": 7}"}) {
    try {
      recorded_peaks(bad, "r.run.json");
      ADD_FAILURE() << "no error for " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("r.run.json: peak_memory_bytes"), std::string::npos)
          << e.what();
    }
  }
}

TEST(RecordedRun, LabelsTellRunsOfOneNameApartByTheirFolders) {
  EXPECT_EQ(run_labels({"r/call1-env-bpipe/bpipe-mbs2", "r/call3-env-bpipe/bpipe-mbs2",
                        "r/call3-env-bpipe/nobpipe-mbs1"}),
            (Words{"call1/bpipe-mbs2", "call3/bpipe-mbs2", "nobpipe-mbs1"}));
  EXPECT_EQ(run_labels({"a/s-27/call1-x/bpipe-mbs2", "a/s-27b/call1-y/bpipe-mbs2",
                        "a/s-27b/call2-y/bpipe-mbs2", "a/s-27b/call2-y/nobpipe-mbs1"}),
            (Words{"s-27/call1/bpipe-mbs2", "s-27b/call1/bpipe-mbs2", "call2/bpipe-mbs2",
                   "nobpipe-mbs1"}));
}

}  // namespace
}  // namespace pipeplan
