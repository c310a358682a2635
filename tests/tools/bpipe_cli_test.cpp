// `pipeplan bpipe` and `plan --bpipe` end to end: the two acceptance commands.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace {

std::string run(const std::string& args, int* status = nullptr) {
  const std::string command = std::string(PIPEPLAN_BINARY) + " " + args + " 2>&1";
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr)
    out += buffer.data();
  const int raw = pclose(pipe);
  if (status) *status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return out;
}

// GPT-3 96B, 8 stages × TP 4 A100s, recompute attention; 76 GiB leaves 4 GiB of the 80 for the
// CUDA context, NCCL buffers and fragmentation, which the model does not count.
const std::string kGpt3 =
    "--model gpt3-96b --gpu a100 --stages 8 --seq 2048 --memory 76GiB --attention recompute "
    "--tensor-parallel 4";

TEST(BpipeCli, Gpt3MicroBatchTwoNeedsBpipeAndValidates) {
  int status = 0;
  const std::string off = run("plan " + kGpt3 + " -m 32 --mbs 2", &status);
  EXPECT_EQ(status, 1) << off;
  EXPECT_NE(off.find("--memory"), std::string::npos) << off;
  const std::string json = run("plan " + kGpt3 + " -m 32 --mbs 2 --bpipe on --json", &status);
  ASSERT_EQ(status, 0) << json;
  const auto metrics = nlohmann::json::parse(json);
  for (const auto& peak : metrics.at("peak_memory_bytes")) {
    EXPECT_LE(peak.get<double>(), 76.0 * (1 << 30));
  }
  const std::string est = run("bpipe " + kGpt3 + " --global-batch 64 --json", &status);
  ASSERT_EQ(status, 0) << est;
  const auto e = nlohmann::json::parse(est);
  EXPECT_EQ(e.at("with").at("mbs").get<int>(), 2);
  EXPECT_TRUE(e.at("with").at("bpipe").get<bool>());
  EXPECT_FALSE(e.at("verdict").get<std::string>().empty());
}

TEST(BpipeCli, Llama65bFlashReportsNoBenefitWithItsReason) {
  int status = 0;
  const std::string out = run(
      "bpipe --model llama-65b --gpu a100 --stages 8 --global-batch 64 --seq 2048 --memory 80GiB "
      "--attention flash --tensor-parallel 4",
      &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("verdict: no benefit"), std::string::npos) << out;
}

TEST(BpipeCli, AutoNeedsGlobalBatch) {
  int status = 0;
  const std::string out = run("plan " + kGpt3 + " -m 32 --bpipe auto", &status);
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("--global-batch"), std::string::npos) << out;
}

}  // namespace
