// `pipeplan bpipe`, `plan --bpipe` and `show` of a BPipe plan end to end: the two published
// cases (GPT-3 96B with recompute attention, LLaMA 65B with flash attention), the --profile path
// on synthetic MFU curves, the baseline that may recompute, and the refusals.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli_support.h"

namespace {

std::string run(const std::string& args, int* status = nullptr) {
  const std::string command =
      pipeplan::testing::shell_quote(PIPEPLAN_BINARY) + " " + args + " 2>&1";
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

nlohmann::json run_json(const std::string& args) {
  int status = 0;
  const std::string out = run(args, &status);
  EXPECT_EQ(status, 0) << args << "\n" << out;
  return status == 0 ? nlohmann::json::parse(out) : nlohmann::json::object();
}

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("pipeplan-bpipe-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

constexpr double kGiB = 1024.0 * 1024 * 1024;

// GPT-3 96B with recompute attention on 8 80 GB A100s: tensor parallelism and the memory reserve
// come from the defaults (--tensor-parallel auto, --reserve 1 GiB + 4 %).
const std::string kGpt3Recompute =
    "--model gpt3-96b --gpu a100 --stages 8 --global-batch 64 --seq 2048 --memory 80GiB "
    "--attention recompute";

TEST(BpipeCli, Gpt3RecomputeFindsMicroBatchTwoThatOnlyFitsWithBpipe) {
  const auto e = run_json("bpipe " + kGpt3Recompute + " --json");
  ASSERT_FALSE(e.empty());
  EXPECT_EQ(e.at("tensor_parallel").get<int>(), 4);  // TP 1 and 2 cannot hold the weights
  const double limit = e.at("memory_limit_bytes").get<double>();
  EXPECT_NEAR(limit, 80 * kGiB - (1 * kGiB + 0.04 * 80 * kGiB), 1.0);
  EXPECT_EQ(e.at("without").at("mbs").get<int>(), 1);
  ASSERT_TRUE(e.at("with").is_object()) << e.dump(2);
  EXPECT_EQ(e.at("with").at("mbs").get<int>(), 2);
  EXPECT_TRUE(e.at("with").at("bpipe").get<bool>());
  EXPECT_LE(e.at("with").at("peak_memory_bytes").get<double>(), limit);
  // Micro-batch 2 does not fit without BPipe in any backward mode.
  int rejected = 0;
  for (const auto& line : e.at("infeasible")) {
    const std::string text = line.get<std::string>();
    if (text.rfind("mbs 2 ", 0) == 0 && text.find("bpipe off: --memory") != std::string::npos)
      ++rejected;
  }
  EXPECT_EQ(rejected, 3) << e.at("infeasible").dump(2);
  EXPECT_GT(e.at("transfer_bytes_per_step").get<double>(), 0);
  EXPECT_FALSE(e.at("verdict").get<std::string>().empty());
  // The verdict quotes the simulated bubbles, as it quotes the simulated step times.
  const double bubble_without = e.at("without").at("bubble_ratio").get<double>();
  const double bubble_with = e.at("with").at("bubble_ratio").get<double>();
  EXPECT_GT(bubble_with, bubble_without);
  char bubbles[64];
  std::snprintf(bubbles, sizeof bubbles, "bubble %.1f -> %.1f %%", 100 * bubble_without,
                100 * bubble_with);
  EXPECT_NE(e.at("verdict").get<std::string>().find(bubbles), std::string::npos)
      << e.at("verdict") << " has no " << bubbles;

  // The same plan through `plan`: refused without BPipe, valid with it, under the limit
  // everywhere in the simulation.
  const std::string plan =
      "plan --model gpt3-96b --gpu a100 --stages 8 --seq 2048 --memory 80GiB "
      "--attention recompute --tensor-parallel 4 -m 32 --mbs 2 --backward " +
      e.at("with").at("backward").get<std::string>();
  int status = 0;
  const std::string off = run(plan, &status);
  EXPECT_EQ(status, 1) << off;
  EXPECT_NE(off.find("--memory"), std::string::npos) << off;
  const auto dir = temp_dir("gpt3");
  const std::string file = (dir / "bp.json").string();
  const std::string on =
      run(plan + " --bpipe on -o " + pipeplan::testing::shell_quote(file), &status);
  ASSERT_EQ(status, 0) << on;
  const std::string valid = run("validate " + pipeplan::testing::shell_quote(file), &status);
  EXPECT_EQ(status, 0) << valid;
  // The summary says BPipe moves stashes, and --json lists the pairs.
  EXPECT_NE(on.find("\nBPipe dev 0 -> dev 7: evicts "), std::string::npos) << on;
  const auto metrics = run_json("show " + pipeplan::testing::shell_quote(file) + " --json");
  ASSERT_FALSE(metrics.at("bpipe").empty()) << metrics.dump();
  EXPECT_EQ(metrics.at("bpipe")[0].at("evictor"), 0);
  EXPECT_EQ(metrics.at("bpipe")[0].at("acceptor"), 7);
  EXPECT_GT(metrics.at("bpipe")[0].at("evictions").get<int>(), 0);
  ASSERT_EQ(metrics.at("peak_memory_bytes").size(), 8u);
  for (const auto& peak : metrics.at("peak_memory_bytes"))
    EXPECT_LE(peak.get<double>(), limit);
  std::filesystem::remove_all(dir);
}

// --baseline-recompute full: the plans without BPipe may recompute every block. At micro-batch 2
// GPT-3 96B fits without BPipe only by recomputing (a third more compute); BPipe fits it keeping
// every activation, and the verdict weighs one against the other. Where keeping activations
// costs nothing (micro-batch 1 fits), the baseline does not recompute and the verdict stays.
// "Fully hidden" only where nothing is exposed: over a 15 GB/s link 276 ms of the transfers
// are, and the verdict gives their share and cost.
TEST(BpipeCli, TheVerdictCallsTransfersHiddenOnlyWhereNothingIsExposed) {
  const auto hidden = run_json("bpipe " + kGpt3Recompute + " --json");
  ASSERT_FALSE(hidden.empty());
  EXPECT_LT(hidden.at("exposed_transfer_ms").get<double>(), 0.005);
  EXPECT_NE(hidden.at("verdict").get<std::string>().find("transfers fully hidden"),
            std::string::npos);
  const auto slow = run_json("bpipe " + kGpt3Recompute + " --link-bandwidth 15 --json");
  ASSERT_FALSE(slow.empty());
  EXPECT_GT(slow.at("exposed_transfer_ms").get<double>(), 1.0);
  const std::string verdict = slow.at("verdict").get<std::string>();
  EXPECT_EQ(verdict.find("fully hidden"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find("% hidden, cost "), std::string::npos) << verdict;
}

TEST(BpipeCli, BaselineRecomputationIsWeighedAgainstBpipe) {
  const auto e =
      run_json("bpipe " + kGpt3Recompute + " --mbs-list 2 --baseline-recompute full --json");
  ASSERT_FALSE(e.empty());
  EXPECT_EQ(e.at("baseline_recompute"), "full");
  const auto& without = e.at("without");
  const auto& with = e.at("with");
  EXPECT_EQ(without.at("mbs"), 2);
  EXPECT_EQ(without.at("recompute"), nlohmann::json({{"method", "full"}}));
  EXPECT_FALSE(without.at("bpipe").get<bool>());
  EXPECT_EQ(with.at("mbs"), 2);
  EXPECT_EQ(with.at("recompute"), nlohmann::json({{"method", "none"}}));
  EXPECT_TRUE(with.at("bpipe").get<bool>());
  EXPECT_LT(without.at("peak_memory_bytes").get<double>(),
            with.at("peak_memory_bytes").get<double>());
  EXPECT_GT(e.at("gain").get<double>(), 0.2);
  EXPECT_NE(e.at("verdict").get<std::string>().find(
                "benefit: mbs 2, recompute full (every block) -> none raises stage MFU"),
            std::string::npos)
      << e.at("verdict");
  EXPECT_EQ(e.at("tensor_parallel"), 4);
  // auto: the baseline recomputes only the first blocks of each stage that make micro-batch 2
  // fit, which is faster than all of them and leaves BPipe a smaller gain.
  const auto least =
      run_json("bpipe " + kGpt3Recompute + " --mbs-list 2 --baseline-recompute auto --json");
  ASSERT_FALSE(least.empty());
  const auto& partial = least.at("without").at("recompute");
  EXPECT_EQ(partial.at("method"), "block");
  EXPECT_GE(partial.at("blocks").get<int>(), 1);
  EXPECT_LT(least.at("without").at("step_time_ms").get<double>(),
            without.at("step_time_ms").get<double>());
  EXPECT_EQ(least.at("with").at("step_time_ms"), with.at("step_time_ms"));
  EXPECT_LT(least.at("gain").get<double>(), e.at("gain").get<double>());
  // Without recomputation micro-batch 2 needs BPipe at TP 4: the estimate says so, with BPipe's
  // plan and no gain to weigh (nothing to compare against); auto stops at TP 4 too.
  int status = 0;
  const std::string needed =
      run("bpipe " + kGpt3Recompute + " --mbs-list 2 --tensor-parallel 4", &status);
  EXPECT_EQ(status, 0) << needed;
  EXPECT_NE(needed.find("without BPipe: no configuration fits\n"), std::string::npos) << needed;
  EXPECT_NE(needed.find("verdict: BPipe needed: no configuration fits without it (mbs 2 "),
            std::string::npos)
      << needed;
  const auto only = run_json("bpipe " + kGpt3Recompute + " --mbs-list 2 --json");
  EXPECT_EQ(only.at("tensor_parallel"), 4);
  EXPECT_TRUE(only.at("without").is_null());
  EXPECT_EQ(only.at("with").at("mbs"), 2);
  EXPECT_TRUE(only.at("gain").is_null());
  EXPECT_TRUE(only.at("simple_gain").is_null());
  // The links run at once: hidden is measured against the busiest one.
  const double busiest = only.at("busiest_link_ms").get<double>();
  EXPECT_GT(busiest, 0);
  EXPECT_LT(busiest, only.at("transfer_ms").get<double>());
  EXPECT_NEAR(only.at("hidden_fraction").get<double>(),
              std::clamp(1 - only.at("exposed_transfer_ms").get<double>() / busiest, 0.0, 1.0),
              1e-9);
  // Over micro-batches 1, 2, 4, 8, keeping micro-batch 1's activations is the best baseline.
  const auto plain = run_json("bpipe " + kGpt3Recompute + " --json");
  const auto weighed = run_json("bpipe " + kGpt3Recompute + " --baseline-recompute full --json");
  EXPECT_EQ(weighed.at("without").at("recompute"), nlohmann::json({{"method", "none"}}));
  EXPECT_EQ(weighed.at("without").at("mbs"), 1);
  EXPECT_EQ(weighed.at("gain"), plain.at("gain"));
  EXPECT_EQ(weighed.at("verdict"), plain.at("verdict"));
}

// LLaMA-65B at TP 2 on 80 GB: 68 GiB of weights and optimizer state per GPU; only recomputation
// fits it, and BPipe, which keeps every activation, fits nothing.
TEST(BpipeCli, NothingFitsWithBpipeIsSaid) {
  const std::string args =
      "bpipe --model llama-65b --gpu a100 --stages 8 --global-batch 64 --seq 2048 --memory 80GiB "
      "--attention flash --tensor-parallel 2 --baseline-recompute full";
  int status = 0;
  const std::string out = run(args, &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("with BPipe:    no configuration fits\n"), std::string::npos) << out;
  EXPECT_NE(out.find("verdict: no benefit: no configuration fits with BPipe while keeping every "
                     "activation (mbs 1, m 64, 1f1b fused, BPipe off, recompute full (every block) "
                     "is best)\n"),
            std::string::npos)
      << out;
  const auto e = run_json(args + " --json");
  EXPECT_FALSE(e.at("bpipe_fits").get<bool>());
  // No BPipe plan: no transfers and no gain, rather than made-up zeros.
  for (const char* field : {"gain", "simple_gain", "hidden_fraction", "transfer_ms",
                            "busiest_link_ms", "exposed_transfer_ms", "transfer_bytes_per_step"})
    EXPECT_TRUE(e.at(field).is_null()) << field;
  // BPipe pairs stage x with P - 1 - x: one stage is refused.
  const std::string one =
      run("bpipe --model llama-7b --gpu a100 --seq 2048 --stages 1 --global-batch 16", &status);
  EXPECT_EQ(status, 1) << one;
  EXPECT_EQ(one,
            "pipeplan: error: --stages: BPipe pairs stage x with stage P - 1 - x: needs at "
            "least 2, got 1\n");
}

TEST(BpipeCli, Llama65bFlashReportsNoBenefitWithItsReason) {
  const std::string args =
      "bpipe --model llama-65b --gpu a100 --stages 8 --global-batch 64 --seq 2048 --memory 80GiB "
      "--attention flash";
  int status = 0;
  const std::string out = run(args, &status);
  ASSERT_EQ(status, 0) << out;
  const auto at = out.find("verdict: no benefit: ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_GT(out.find('\n', at) - at, std::string("verdict: no benefit: ").size() + 20) << out;
  // Every micro-batch size fits without BPipe: no BPipe plan, so no gain to weigh.
  const auto e = run_json(args + " --json");
  EXPECT_TRUE(e.at("with").is_null());
  EXPECT_TRUE(e.at("gain").is_null());
}

// An analytic LLaMA-7B profile at micro-batch 1 and 2 whose micro-batch-2 times are `scale` times
// micro-batch 1's: 1.5 is an MFU curve that rises with the micro-batch size (per-sample time
// -25 %), 2.0 a flat one. Memory stays as the analytic model has it (stash doubles).
std::string synthetic_profile(const std::filesystem::path& dir, double scale) {
  const std::string base = (dir / "base.json").string();
  int status = 0;
  const std::string out =
      run("profile --analytic --model llama-7b --gpu h100 --mbs 1,2 "
          "--attention flash --max-concat 1 -o " +
              pipeplan::testing::shell_quote(base),
          &status);
  EXPECT_EQ(status, 0) << out;
  nlohmann::json profile;
  std::ifstream(base) >> profile;
  for (auto& [kind, by_mbs] : profile.at("layers").items()) {
    const nlohmann::json one = by_mbs.at("1");
    nlohmann::json& two = by_mbs.at("2");
    for (const char* field : {"forward_us", "p1_us", "p2_us"})
      two[field] = scale * one.at(field).get<double>();
    for (auto& [k, us] : two.at("p2_concat_us").items())
      us = scale * one.at("p2_concat_us").at(k).get<double>();
  }
  std::string path =
      (dir / ("scaled-" + std::to_string(static_cast<int>(scale * 10)) + ".json")).string();
  std::ofstream(path) << profile.dump(2);
  return path;
}

// A memory limit halfway between micro-batch 2's peak with BPipe and without it, so micro-batch
// 2 needs BPipe by construction.
std::string limit_between(const std::string& profile) {
  const std::string plan = "plan --profile " + pipeplan::testing::shell_quote(profile) +
                           " --stages 8 -m 16 --mbs 2 --memory 0 --json";
  const auto off = run_json(plan);
  const auto on = run_json(plan + " --bpipe on");
  const auto peak = [](const nlohmann::json& j) {
    double p = 0;
    for (const auto& x : j.at("peak_memory_bytes"))
      p = std::max(p, x.get<double>());
    return p;
  };
  EXPECT_LT(peak(on), peak(off));
  return std::to_string(static_cast<long long>((peak(on) + peak(off)) / 2)) + "B";
}

TEST(BpipeCli, ProfileEstimateFlipsSignBetweenRisingAndFlatMfu) {
  const auto dir = temp_dir("profile");
  for (const double scale : {1.5, 2.0}) {
    const std::string profile = synthetic_profile(dir, scale);
    const std::string limit = limit_between(profile);
    const std::string args = "bpipe --profile " + pipeplan::testing::shell_quote(profile) +
                             " --stages 8 --global-batch 32 " + "--memory " + limit +
                             " --reserve 0";
    const auto e = run_json(args + " --json");
    ASSERT_FALSE(e.empty());
    EXPECT_EQ(e.at("tensor_parallel").get<int>(), 1);  // a profile is per pipeline device
    EXPECT_EQ(e.at("without").at("mbs").get<int>(), 1);
    ASSERT_TRUE(e.at("with").is_object()) << e.dump(2);
    EXPECT_EQ(e.at("with").at("mbs").get<int>(), 2);
    const std::string verdict = e.at("verdict").get<std::string>();
    if (scale < 2) {
      EXPECT_GT(e.at("gain").get<double>(), 0.05) << verdict;
      EXPECT_GT(e.at("simple_gain").get<double>(), 0.05);
      EXPECT_EQ(verdict.rfind("benefit: ", 0), 0u) << verdict;
    } else {
      EXPECT_LT(e.at("gain").get<double>(), 0) << verdict;
      EXPECT_LT(e.at("simple_gain").get<double>(), 0);
      EXPECT_EQ(verdict.rfind("no benefit: ", 0), 0u) << verdict;
    }
    int status = 0;
    const std::string text = run(args, &status);
    EXPECT_EQ(status, 0) << text;
    EXPECT_NE(text.find("second opinion: per-stage estimate"), std::string::npos) << text;
  }
  std::filesystem::remove_all(dir);
}

TEST(BpipeCli, ProfileWithoutTheCandidateSizesIsNamed) {
  const auto dir = temp_dir("sizes");
  const std::string base = (dir / "one.json").string();
  int status = 0;
  run("profile --analytic --model llama-7b --gpu h100 --mbs 1 -o " +
          pipeplan::testing::shell_quote(base),
      &status);
  ASSERT_EQ(status, 0);
  const std::string out = run("bpipe --profile " + pipeplan::testing::shell_quote(base) +
                                  " --stages 4 --global-batch 16 --mbs-list 2,4",
                              &status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  std::filesystem::remove_all(dir);
}

// A size --mbs-list names is tried or refused, never left out: one the profile lacks is named with
// the sizes it holds, beside sizes it has too.
TEST(BpipeCli, AListedSizeTheProfileLacksIsRefused) {
  const std::string profile =
      std::string(PIPEPLAN_SOURCE_DIR) + "/profiles/h200-llama-7b.measured.json";
  int status = 0;
  const std::string out = run("bpipe --profile " + pipeplan::testing::shell_quote(profile) +
                                  " --stages 4 --global-batch 32 --mbs-list 2,8",
                              &status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_EQ(out, "pipeplan: error: --mbs-list: " + profile +
                     " has no cost at micro-batch size 8 (it holds micro-batch sizes 1, 2, 4)\n");
  // Without the list, the default 1, 2, 4, 8 is cut to the sizes the profile holds.
  const std::string plain = run("bpipe --profile " + pipeplan::testing::shell_quote(profile) +
                                    " --stages 4 --global-batch 32",
                                &status);
  EXPECT_EQ(status, 0) << plain;
}

TEST(BpipeCli, ShowDrawsTransferRowsArrowsAndBothMemoryEnds) {
  const auto dir = temp_dir("show");
  const std::string base =
      "plan --model gpt3-96b --gpu a100 --stages 8 --seq 2048 --attention recompute "
      "--tensor-parallel 4 -m 16 --mbs 2";
  const std::string bp = (dir / "bp.json").string();
  const std::string plain = (dir / "plain.json").string();
  int status = 0;
  const std::string made =
      run(base + " --memory 80GiB --bpipe on -o " + pipeplan::testing::shell_quote(bp), &status);
  ASSERT_EQ(status, 0) << made;
  const std::string made_plain = run(
      base + " --reserve 0 --memory 1000GiB -o " + pipeplan::testing::shell_quote(plain), &status);
  ASSERT_EQ(status, 0) << made_plain;

  const std::string trace = (dir / "bp.trace.json").string();
  const std::string out =
      run("show " + pipeplan::testing::shell_quote(bp) + " --width 120 --no-color --trace " +
              pipeplan::testing::shell_quote(trace),
          &status);
  ASSERT_EQ(status, 0) << out;
  // A transfer row under dev 0 (to 7) and one under dev 7 (to 0), with evict and load marks.
  std::size_t rows = 0;
  for (std::size_t at = out.find("\u2194"); at != std::string::npos;
       at = out.find("\u2194", at + 1)) {
    const std::size_t begin = out.rfind('\n', at) + 1;
    const std::string line = out.substr(begin, out.find('\n', at) - begin);
    if (line.find("\u2502") == std::string::npos) continue;  // the legend
    ++rows;
    EXPECT_NE(line.find('e'), std::string::npos) << line;
    EXPECT_NE(line.find('l'), std::string::npos) << line;
  }
  // Pairs already within 10 % move nothing (dev 3 and 4 here); every pair that moves shows both
  // of its ends.
  EXPECT_GE(rows, 2u) << out;
  EXPECT_EQ(rows % 2, 0u) << out;
  EXPECT_NE(out.find("\u21947 \u2502"), std::string::npos) << out;
  EXPECT_NE(out.find("evict (stash to the acceptor)"), std::string::npos) << out;
  EXPECT_NE(out.find("BPipe dev 0 -> dev 7: "), std::string::npos) << out;

  // Perfetto: every evict is an arrow from the evictor to the acceptor, and the acceptor's memory
  // counter rises above what it reaches without BPipe.
  nlohmann::json events;
  std::ifstream(trace) >> events;
  int evict_arrows = 0;
  std::map<int, int> flow_start_pid;
  int acceptor_pid = -1, evictor_pid = -1;
  for (const auto& ev : events.at("traceEvents")) {
    const std::string ph = ev.at("ph").get<std::string>();
    if ((ph == "s" || ph == "f") && ev.at("name").get<std::string>().rfind("evict 0F", 0) == 0) {
      if (ph == "s") {
        flow_start_pid[ev.at("id").get<int>()] = ev.at("pid").get<int>();
        ++evict_arrows;
      } else {
        evictor_pid = flow_start_pid.at(ev.at("id").get<int>());
        acceptor_pid = ev.at("pid").get<int>();
      }
    }
  }
  EXPECT_GT(evict_arrows, 0);
  ASSERT_NE(acceptor_pid, evictor_pid);
  const auto plain_metrics = run_json("show " + pipeplan::testing::shell_quote(plain) + " --json");
  const auto bp_metrics = run_json("show " + pipeplan::testing::shell_quote(bp) + " --json");
  EXPECT_GT(bp_metrics.at("peak_memory_bytes")[7].get<double>(),
            plain_metrics.at("peak_memory_bytes")[7].get<double>());
  EXPECT_LT(bp_metrics.at("peak_memory_bytes")[0].get<double>(),
            plain_metrics.at("peak_memory_bytes")[0].get<double>());
  std::filesystem::remove_all(dir);
}

TEST(BpipeCli, InterleavedIsRefusedInOneLine) {
  int status = 0;
  const std::string out =
      run("plan --model llama-7b --stages 4 -m 8 --schedule interleaved --chunks 2 --bpipe on",
          &status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_NE(out.find("--bpipe"), std::string::npos) << out;
  EXPECT_NE(out.find("interleaved"), std::string::npos) << out;
}

// --data-parallel D: D replicas of the pipeline share the global batch, each replica's plans are
// those of its 1/D, and each optimizer step first combines the gradients across the replicas.
// Replicated, every GPU keeps the whole optimizer state, so the same configurations fit as with
// one replica and the verdict stands; sharded (Megatron's distributed optimizer) keeps 1/D of it,
// which frees enough memory for GPT-3 96B to fit at TP 2 without BPipe.
TEST(BpipeCli, DataParallelReplicasShareTheGlobalBatchAndTheOptimizerState) {
  const std::string gpt3 =
      "bpipe --model gpt3-96b --gpu a100 --stages 8 --seq 2048 --memory 80GiB "
      "--attention recompute --json";
  const auto one = run_json(gpt3 + " --global-batch 64");
  const auto replicated =
      run_json(gpt3 + " --global-batch 512 --data-parallel 8 --dp-optimizer replicated");
  ASSERT_FALSE(one.empty());
  ASSERT_FALSE(replicated.empty());
  EXPECT_EQ(one.at("data_parallel"), 1);
  EXPECT_EQ(one.at("global_batch"), 64);
  EXPECT_EQ(replicated.at("data_parallel"), 8);
  EXPECT_EQ(replicated.at("dp_optimizer"), "replicated");
  EXPECT_EQ(replicated.at("global_batch"), 512);
  EXPECT_EQ(replicated.at("global_batch_per_replica"), 64);
  EXPECT_EQ(replicated.at("tensor_parallel"), one.at("tensor_parallel"));
  for (const char* side : {"without", "with"}) {
    SCOPED_TRACE(side);
    const auto& a = one.at(side);
    const auto& b = replicated.at(side);
    EXPECT_EQ(b.at("mbs"), a.at("mbs"));
    EXPECT_EQ(b.at("microbatches"), a.at("microbatches"));
    EXPECT_EQ(b.at("peak_memory_bytes"), a.at("peak_memory_bytes"));
    // The all-reduce lengthens every optimizer step, and the step by as much.
    const double added = b.at("optimizer_ms").get<double>() - a.at("optimizer_ms").get<double>();
    EXPECT_GT(added, 0);
    EXPECT_NEAR(b.at("step_time_ms").get<double>() - a.at("step_time_ms").get<double>(), added,
                1e-6);
  }
  // The same verdict: BPipe's micro-batch 2 does not pay (the longer optimizer steps move the
  // bubble's tenths only).
  EXPECT_LT(replicated.at("gain").get<double>(), 0);
  EXPECT_NEAR(replicated.at("gain").get<double>(), one.at("gain").get<double>(), 0.005);
  const auto sharded = run_json(gpt3 + " --global-batch 512 --data-parallel 8");
  ASSERT_FALSE(sharded.empty());
  EXPECT_EQ(sharded.at("dp_optimizer"), "sharded");
  EXPECT_EQ(sharded.at("tensor_parallel"), 2);
  EXPECT_TRUE(sharded.at("with").is_null()) << sharded.dump(2);
  // The text says so in its first lines.
  const std::string text =
      run("bpipe --model gpt3-96b --gpu a100 --stages 8 --seq 2048 --memory 80GiB --attention "
          "recompute --global-batch 512 --data-parallel 8 --dp-link-bandwidth 50");
  EXPECT_NE(text.find(" x DP 8, global batch 512 (64 per replica) (MFU"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\ndata parallel: 8 replicas, sharded optimizer, 50 GB/s per direction, "
                      "10 us latency\n"),
            std::string::npos)
      << text;
  // A profile without the optimizer step's time plans no reduction either, and says so.
  const std::string measured =
      run("bpipe --profile " +
          pipeplan::testing::shell_quote(std::string(PIPEPLAN_SOURCE_DIR) +
                                         "/profiles/h200-llama-7b.measured.json") +
          " --stages 4 --global-batch 32 --data-parallel 2");
  EXPECT_NE(measured.find("; the gradients' reduction is left out with the optimizer step\n"),
            std::string::npos)
      << measured;
  EXPECT_EQ(text.find("left out"), std::string::npos) << text;
  int status = 0;
  const std::string uneven = run(gpt3 + " --global-batch 100 --data-parallel 8", &status);
  EXPECT_EQ(status, 1) << uneven;
  EXPECT_EQ(uneven,
            "pipeplan: error: --global-batch: 100 samples do not divide among --data-parallel 8 "
            "replicas\n");
}

TEST(BpipeCli, AutoNeedsGlobalBatch) {
  int status = 0;
  const std::string out =
      run("plan --model gpt3-96b --gpu a100 --stages 8 --tensor-parallel 4 -m 32 --bpipe auto",
          &status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_EQ(out, "pipeplan: error: --global-batch: required by --bpipe auto\n");
}

// `bpipe` and `plan --bpipe auto` decide alike: a gain of 0.5 % or less is no benefit, and auto
// keeps BPipe off there (at a global batch of 144 the estimate said "no benefit: ... +0.1 %" while
// auto turned BPipe on); above it, both take BPipe.
TEST(BpipeCli, TheVerdictAndAutoAgreeNearZeroGain) {
  const std::string config =
      "--model gpt3-96b --gpu a100 --stages 8 --seq 2048 --memory 80GiB --attention recompute "
      "--tensor-parallel 4";
  for (const auto& [batch, on] : {std::pair{144, false}, std::pair{160, true}}) {
    int status = 0;
    const std::string estimate = run(
        "bpipe " + config + " --mbs-list 1,2 --global-batch " + std::to_string(batch) + " --json",
        &status);
    ASSERT_EQ(status, 0) << estimate;
    const auto e = nlohmann::json::parse(estimate);
    const std::string verdict = e.at("verdict").get<std::string>();
    EXPECT_GT(e.at("gain").get<double>(), 0) << verdict;
    EXPECT_EQ(verdict.rfind("benefit: ", 0) == 0, on) << verdict;
    if (!on) {
      EXPECT_EQ(verdict.rfind("no benefit (within 0.5 %", 0), 0u) << verdict;
    }
    const std::string chosen = run(
        "plan " + config + " --bpipe auto --search-mbs 1,2 --global-batch " + std::to_string(batch),
        &status);
    ASSERT_EQ(status, 0) << chosen;
    EXPECT_NE(chosen.find(on ? "BPipe on\n" : "BPipe off\n"), std::string::npos) << chosen;
    // --json says the same choice, and the bound the text gives.
    const auto j = run_json("plan " + config + " --bpipe auto --search-mbs 1,2 --global-batch " +
                            std::to_string(batch) + " --json");
    ASSERT_FALSE(j.empty());
    EXPECT_EQ(j.at("bpipe_auto").at("bpipe"), on) << j.dump();
    EXPECT_EQ(j.at("mbs"), j.at("bpipe_auto").at("mbs")) << j.dump();
    EXPECT_GT(j.at("lower_bound_ms").get<double>(), 0) << j.dump();
    EXPECT_TRUE(j.contains("gap_to_bound") && j.contains("planning_ms")) << j.dump();
  }
}

// Without a memory limit the estimate says its plans are not held to the GPU (tensor parallelism
// auto then settles on 1: everything "fits").
TEST(BpipeCli, NoMemoryLimitIsSaid) {
  int status = 0;
  const std::string out =
      run("bpipe --model gpt3-96b --gpu a100 --stages 8 --global-batch 64 --seq 2048 --memory 0 "
          "--attention recompute",
          &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("memory: none (--memory 0): plans are not held to the 80.00 GiB of one "
                     "a100-80g, and may not fit it\n"),
            std::string::npos)
      << out;
}

// bpipe takes one tensor-parallel degree or auto, and every other value is refused alike.
TEST(BpipeCli, TensorParallelIsOneDegreeOrAuto) {
  for (const std::string value : {"0", "2,4", "x"}) {
    int status = 0;
    const std::string out =
        run("bpipe --model tiny --stages 2 --global-batch 8 --tensor-parallel " + value, &status);
    EXPECT_EQ(status, 1) << out;
    EXPECT_EQ(out, "pipeplan: error: --tensor-parallel: '" + value +
                       "' is neither one positive integer (GPUs per stage) nor 'auto'\n");
  }
}

TEST(BpipeCli, HelpSaysLinkBandwidthZeroIsLatencyOnly) {
  const std::string help = run("bpipe --help");
  const auto at = help.find("--link-bandwidth");
  ASSERT_NE(at, std::string::npos) << help;
  EXPECT_NE(help.find("0: no bandwidth limit, latency only", at), std::string::npos) << help;
}

TEST(BpipeCli, ReserveBeyondMemoryIsNamed) {
  int status = 0;
  const std::string out =
      run("plan --model llama-7b --stages 4 -m 8 --memory 8GiB --reserve 9GiB", &status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_EQ(out.rfind("pipeplan: error: --reserve", 0), 0u) << out;
}

}  // namespace

namespace pipeplan {
namespace {

// A request no candidate can plan is refused with its own error, not as "no configuration
// fits" at every tensor-parallel degree.
TEST(BpipeCli, MoreStagesThanBlocksIsRefusedAsSuch) {
  for (const std::string& command :
       {std::string("bpipe --model llama-7b --gpu a100 --stages 40 --global-batch 8"),
        std::string(
            "plan --model llama-7b --gpu a100 --stages 40 --bpipe auto --global-batch 8")}) {
    int status = 0;
    EXPECT_EQ(run(command, &status),
              "pipeplan: error: --stages: 40 stages but llama-7b has 32 "
              "blocks\n")
        << command;
    EXPECT_EQ(status, 1) << command;
  }
}

// Ops waiting on evictions can make the step longer than the busiest link's whole time: that
// is said, not shown as "0 % hidden".
TEST(BpipeCli, AStepLongerThanTheLinkTimeIsNotZeroPercentHidden) {
  const std::string out =
      run("bpipe --model llama-7b --gpu a100 --stages 8 --global-batch 32 "
          "--memory 24GiB --link-bandwidth 10 --tensor-parallel 1");
  EXPECT_NE(out.find("(none hidden: the step grows by more than the busiest link's time, its ops "
                     "waiting on evictions)"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("(0 % hidden)"), std::string::npos) << out;
}

// --bpipe on that moves nothing says so: every pair of this plan fits the GPU without moves.
TEST(BpipeCli, PlanSaysWhenBpipeMovedNothing) {
  const std::string limited = run("plan --model llama-7b --gpu h100 --stages 4 -m 8 --bpipe on");
  EXPECT_NE(limited.find("BPipe: no stash moved: no pair's larger peak falls with transfers, or "
                         "the pair fits --memory without them\n"),
            std::string::npos)
      << limited;
  const std::string moved =
      run("plan --model llama-7b --gpu h100 --stages 4 -m 8 --bpipe on --memory 0");
  EXPECT_EQ(moved.find("BPipe: no stash moved"), std::string::npos) << moved;
  EXPECT_NE(moved.find("BPipe dev 0 -> dev 3: evicts "), std::string::npos) << moved;
}

}  // namespace
}  // namespace pipeplan
