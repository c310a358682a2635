#include "profiles/gpu.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

namespace fs = std::filesystem;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

using testing::error_of;

fs::path write_temp(const std::string& name, const std::string& text) {
  fs::path path =
      fs::temp_directory_path() / ("pipeplan_gpu_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << text;
  return path;
}

TEST(Gpu, ShippedSpecsUseDenseBf16Peaks) {
  const GpuSpec h100 = find_gpu("h100");
  EXPECT_EQ(h100.name, "h100-sxm");
  EXPECT_DOUBLE_EQ(h100.peak_bf16_tflops, 989.4);  // not the 1979 sparsity figure
  EXPECT_DOUBLE_EQ(h100.hbm_bytes, 80 * kGiB);
  EXPECT_DOUBLE_EQ(h100.hbm_bandwidth_GBps, 3350);
  EXPECT_DOUBLE_EQ(h100.nvlink_bandwidth_GBps, 450);
  EXPECT_DOUBLE_EQ(h100.pcie_bandwidth_GBps, 64);
  EXPECT_GT(h100.p2p_latency_us, 0);
  EXPECT_EQ(find_gpu("H100-SXM5").name, "h100-sxm");  // alias, any case

  const GpuSpec a100 = find_gpu("a100");
  EXPECT_EQ(a100.name, "a100-80g");
  EXPECT_DOUBLE_EQ(a100.peak_bf16_tflops, 312);
  EXPECT_DOUBLE_EQ(a100.hbm_bandwidth_GBps, 2039);
  EXPECT_DOUBLE_EQ(a100.nvlink_bandwidth_GBps, 300);
  EXPECT_DOUBLE_EQ(a100.pcie_bandwidth_GBps, 32);

  const GpuSpec h200 = find_gpu("h200");
  EXPECT_DOUBLE_EQ(h200.peak_bf16_tflops, 989);
  EXPECT_DOUBLE_EQ(h200.hbm_bytes, 140.4 * kGiB);
  EXPECT_DOUBLE_EQ(h200.hbm_bandwidth_GBps, 4800);
  EXPECT_DOUBLE_EQ(find_gpu("h100-pcie").peak_bf16_tflops, 756);
}

TEST(Gpu, UnknownGpuListsKnownNames) {
  const std::string message = error_of([] { find_gpu("b200"); });
  EXPECT_NE(message.find("'b200'"), std::string::npos) << message;
  for (const char* name : {"h100-sxm", "h200", "a100-80g", "h100-pcie"}) {
    EXPECT_NE(message.find(name), std::string::npos) << name;
  }
}

TEST(Gpu, DataDirFollowsEnvironment) {
  const char* original = std::getenv("PIPEPLAN_DATA_DIR");
  const std::string saved = original != nullptr ? original : "";
  const fs::path shipped = data_dir();
  EXPECT_TRUE(fs::exists(shipped / "gpus.json")) << shipped;
  ::setenv("PIPEPLAN_DATA_DIR", "/nonexistent/pipeplan", 1);
  EXPECT_EQ(data_dir(), fs::path("/nonexistent/pipeplan"));
  EXPECT_NE(error_of([] { find_gpu("h100"); }).find("/nonexistent/pipeplan/gpus.json"),
            std::string::npos);
  if (original != nullptr) {
    ::setenv("PIPEPLAN_DATA_DIR", saved.c_str(), 1);
  } else {
    ::unsetenv("PIPEPLAN_DATA_DIR");
  }
  EXPECT_EQ(data_dir(), shipped);
}

TEST(Gpu, LoadRejectsWrongVersionAndBadFields) {
  const auto v2 = write_temp("v2.json", R"({"format":"pipeplan-gpus","version":2,"gpus":[]})");
  EXPECT_NE(error_of([&] { load_gpus(v2); }).find("'version'"), std::string::npos);
  const auto neg = write_temp("neg.json", R"({"format":"pipeplan-gpus","version":1,"gpus":[
    {"name":"x","aliases":[],"description":"","peak_bf16_tflops":-1,"hbm_gib":1,
     "hbm_bandwidth_GBps":1,"nvlink_bandwidth_GBps":0,"pcie_bandwidth_GBps":1,
     "p2p_latency_us":1}]})");
  EXPECT_EQ(error_of([&] { load_gpus(neg); }),
            neg.string() + ": field 'gpus[0].peak_bf16_tflops' must be positive");
  const auto missing = write_temp("missing.json", R"({"format":"pipeplan-gpus","version":1,
    "gpus":[{"name":"x","aliases":[],"description":""}]})");
  EXPECT_EQ(error_of([&] { load_gpus(missing); }),
            missing.string() + ": field 'gpus[0].peak_bf16_tflops' is missing");
  fs::remove(v2);
  fs::remove(neg);
  fs::remove(missing);
}

// NVLink bandwidth and link latency may be left out: no NVLink, no latency.
TEST(Gpu, NvlinkAndLatencyMayBeLeftOut) {
  const auto gpus = gpus_from_json(nlohmann::json::parse(R"({"format":"pipeplan-gpus","version":1,
    "gpus":[{"name":"pcie-card","aliases":[],"description":"","peak_bf16_tflops":100,
             "hbm_gib":24,"hbm_bandwidth_GBps":900,"pcie_bandwidth_GBps":32}]})"),
                                   "gpus.json");
  ASSERT_EQ(gpus.size(), 1U);
  EXPECT_EQ(gpus[0].nvlink_bandwidth_GBps, 0.0);
  EXPECT_EQ(gpus[0].p2p_latency_us, 0.0);
  EXPECT_EQ(gpus[0].pcie_bandwidth_GBps, 32.0);
  // Present, they are still checked.
  EXPECT_EQ(error_of([] {
              gpus_from_json(nlohmann::json::parse(R"({"format":"pipeplan-gpus","version":1,
    "gpus":[{"name":"x","aliases":[],"description":"","peak_bf16_tflops":100,"hbm_gib":24,
             "hbm_bandwidth_GBps":900,"pcie_bandwidth_GBps":32,"p2p_latency_us":-1}]})"),
                             "gpus.json");
            }),
            "gpus.json: field 'gpus[0].p2p_latency_us' must not be negative");
}

// A peak below 1 GFLOP/s is a slip of units: refused naming the field (it used to be taken, and
// the analytic model then blamed the micro-batch size for pass times past the limit).
TEST(Gpu, APeakBelowTheLeastIsRefusedNamingIt) {
  EXPECT_EQ(error_of([] {
              gpus_from_json(nlohmann::json::parse(R"({"format":"pipeplan-gpus","version":1,
    "gpus":[{"name":"x","aliases":[],"description":"","peak_bf16_tflops":1e-300,"hbm_gib":24,
             "hbm_bandwidth_GBps":900,"pcie_bandwidth_GBps":32}]})"),
                             "gpus.json");
            }),
            "gpus.json: field 'gpus[0].peak_bf16_tflops' = 1e-300 is below the least of 0.001 "
            "(docs/reference/limits.md)");
}

// A misspelt optional field would read as its default (no NVLink, no latency): refused.
TEST(Gpu, AMisspeltFieldIsRefusedWithTheNearestName) {
  EXPECT_EQ(error_of([] {
              gpus_from_json(nlohmann::json::parse(R"({"format":"pipeplan-gpus","version":1,
    "gpus":[{"name":"x","aliases":[],"description":"","peak_bf16_tflops":100,"hbm_gib":24,
             "hbm_bandwidth_GBps":900,"pcie_bandwidth_GBps":32,"nvlink_bandwith_GBps":450}]})"),
                             "gpus.json");
            }),
            "gpus.json: field 'gpus[0].nvlink_bandwith_GBps' is not a field of a GPU (did you "
            "mean 'nvlink_bandwidth_GBps'?)");
  EXPECT_EQ(error_of([] {
              gpus_from_json(nlohmann::json::parse(
                                 R"({"format":"pipeplan-gpus","version":1,"gpu":[],"gpus":[]})"),
                             "gpus.json");
            }),
            "gpus.json: field 'gpu' is not a field of a GPU list (did you mean 'gpus'?)");
}

// A name or alias that another GPU already has is named by its own field.
TEST(Gpu, ARepeatedNameIsNamedByTheFieldThatRepeatsIt) {
  const auto gpu = [](const std::string& name, const std::string& aliases) {
    return R"({"name":")" + name + R"(","aliases":[)" + aliases +
           R"(],"description":"","peak_bf16_tflops":1,"hbm_gib":1,"hbm_bandwidth_GBps":1,
             "nvlink_bandwidth_GBps":0,"pcie_bandwidth_GBps":1,"p2p_latency_us":1})";
  };
  const auto list = [](const std::string& gpus) {
    return nlohmann::json::parse(R"({"format":"pipeplan-gpus","version":1,"gpus":[)" + gpus + "]}");
  };
  EXPECT_EQ(error_of([&] {
              gpus_from_json(
                  list(gpu("h100-sxm", R"("h100")") + "," + gpu("b200", R"("b", "H100")")),
                  "gpus.json");
            }),
            "gpus.json: field 'gpus[1].aliases[1]' ('h100') repeats a name of 'h100-sxm'");
  EXPECT_EQ(
      error_of([&] { gpus_from_json(list(gpu("h100", "") + "," + gpu("h100", "")), "gpus.json"); }),
      "gpus.json: field 'gpus[1].name' ('h100') repeats a name of 'h100'");
  // Names are looked up case-insensitively, so every name and alias is unique in lower case: an
  // alias repeating its own GPU's name or another alias is refused too, and no alias is empty.
  EXPECT_EQ(error_of([&] { gpus_from_json(list(gpu("h100", R"("H100")")), "gpus.json"); }),
            "gpus.json: field 'gpus[0].aliases[0]' ('h100') repeats its own name");
  EXPECT_EQ(error_of([&] {
              gpus_from_json(list(gpu("h100-sxm", R"("h100", "x", "H100")")), "gpus.json");
            }),
            "gpus.json: field 'gpus[0].aliases[2]' ('h100') repeats its own aliases[0]");
  EXPECT_EQ(error_of([&] { gpus_from_json(list(gpu("h100-sxm", R"("h100", "")")), "gpus.json"); }),
            "gpus.json: field 'gpus[0].aliases[1]' must not be empty");
  EXPECT_EQ(gpus_from_json(list(gpu("h100-sxm", R"("h100", "h100-sxm5")")), "gpus.json").size(),
            1U);
}

}  // namespace
}  // namespace pipeplan
