// The recorded files beside a run: its plan command, its run report's peaks, and run labels.
#include "planner/calibrate/recorded_run.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "planner/base/error.h"
#include "tests/error_support.h"

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
      "r.run.json", 2);
  EXPECT_EQ(peaks.measured_bytes, (std::vector<std::int64_t>{10, 30}));
  EXPECT_EQ(peaks.predicted_bytes, (std::vector<std::int64_t>{10, 20}));
  EXPECT_DOUBLE_EQ(worst_memory_error_pct(peaks.predicted_bytes, peaks.measured_bytes), 50);
  EXPECT_TRUE(std::isnan(worst_memory_error_pct({0}, {1})));
  try {
    recorded_peaks("{\"peak_memory\": [{\"device\": 0}]}", "r.run.json", 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("measured_bytes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(recorded_peaks("{}", "r.run.json", 1), Error);
}

// A CUDA report's rows: one per device of the plan, a peak measured at least 0 and predicted
// above 0; anything else is refused naming the file, the row and its field.
TEST(RecordedRun, RefusesPeakRowsThatAreNotOnePerDevice) {
  const auto row = [](int device, long long measured, long long predicted) {
    return "{\"device\": " + std::to_string(device) +
           ", \"measured_bytes\": " + std::to_string(measured) +
           ", \"predicted_bytes\": " + std::to_string(predicted) + "}";
  };
  const auto report = [](const std::string& a, const std::string& b) {
    return "{\"peak_memory\": [" + a + ", " + b + "]}";
  };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {report(row(0, -5, 10), row(1, 10, 10)),
       "r.run.json: peak_memory[0]: field 'measured_bytes' is -5, below 0"},
      {report(row(0, 10, 10), row(1, 10, 0)),
       "r.run.json: peak_memory[1]: field 'predicted_bytes' is 0, not above 0"},
      {report(row(0, 10, 10), row(1, 10, -3)),
       "r.run.json: peak_memory[1]: field 'predicted_bytes' is -3, not above 0"},
      {report(row(0, 10, 10), row(2, 10, 10)),
       "r.run.json: peak_memory[1]: field 'device' is 2, not one of the 2 devices of the plan (0 "
       "to 1)"},
      {report(row(-1, 10, 10), row(1, 10, 10)),
       "r.run.json: peak_memory[0]: field 'device' is -1, not one of the 2 devices"},
      {report(row(1, 10, 10), row(1, 20, 10)),
       "r.run.json: peak_memory[1]: field 'device' is 1 again (peak_memory[0] gave it)"},
      {"{\"peak_memory\": [" + row(1, 10, 10) + "]}",
       "r.run.json: peak_memory has no row for device 0 (the plan has 2 devices)"},
      {"{\"peak_memory_bytes\": [1, 2, 3]}",
       "r.run.json: 3 devices' peaks for a plan of 2 devices (peak_memory_bytes)"},
  };
  for (const auto& [text, want] : bad) {
    const std::string& input = text;
    const std::string what = testing::error_of([&] { recorded_peaks(input, "r.run.json", 2); });
    EXPECT_EQ(what.rfind(want, 0), 0U) << text << ": " << what;
  }
  // A peak measured as 0 (a device the allocator never used) is a measurement.
  EXPECT_EQ(recorded_peaks(report(row(0, 0, 10), row(1, 10, 10)), "r.run.json", 2).measured_bytes,
            (std::vector<std::int64_t>{0, 10}));
}

// `run --backend cpu --json` reports the measured peaks alone, in device order.
TEST(RecordedRun, ReadsTheCpuReportsMeasuredPeaks) {
  const RecordedPeaks peaks = recorded_peaks(
      "{\"backend\": \"cpu\", \"peak_memory_bytes\": [40, 25, 31]}\n", "r.run.json", 3);
  EXPECT_EQ(peaks.measured_bytes, (std::vector<std::int64_t>{40, 25, 31}));
  EXPECT_TRUE(peaks.predicted_bytes.empty());
  for (const char* bad : {"{\"peak_memory_bytes\": []}", "{\"peak_memory_bytes\": [1, 2.5]}",
                          "{\"peak_memory_bytes\": 7}"}) {
    try {
      recorded_peaks(bad, "r.run.json", 2);
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
  // Folders shared further up: as many more as tell the runs apart.
  EXPECT_EQ(run_labels({"a/x/y/run", "b/x/y/run"}), (Words{"a/x/y/run", "b/x/y/run"}));
  EXPECT_EQ(run_labels({"r/a/w/x/y/run", "r/b/w/x/y/run", "r/b/w/x/y/other"}),
            (Words{"a/w/x/y/run", "b/w/x/y/run", "other"}));
  // Folders that agree up to the root, their names differing past the first word: the paths.
  EXPECT_EQ(run_labels({"/call1-x/run", "/call1-y/run"}), (Words{"/call1-x/run", "/call1-y/run"}));
}

}  // namespace
}  // namespace pipeplan
