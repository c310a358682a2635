// `pipeplan profile --backend cpu`: the CPU reference backend measured on this machine, so that a
// plan predicts `pipeplan run --backend cpu` and the loop profile, plan, run, diff, calibrate
// runs without a GPU. Times are this machine's and vary: what is checked is what must hold on
// any machine (every pass measured, the bytes the executor counts, the run's peak memory equal
// to the plan's, calibrate taking the CPU runs), never a time.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "profiles/profile.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/profiler.h"
#include "tests/cli_support.h"

namespace pipeplan::testing {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

class CpuProfileCli : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    profile_ = path("cpu.json");
    const CliResult r = run_pipeplan(
        "profile --backend cpu --model tiny --mbs 1,2 --max-concat 3 --repetitions 2 -o " +
        profile_);
    ASSERT_EQ(r.status, 0) << r.out;
    ASSERT_EQ(r.out, "wrote " + profile_ + "\n");
  }
  std::string profile_;
};

TEST_F(CpuProfileCli, MeasuresEveryPassOfEveryLayerKindWithTheBytesTheBackendHolds) {
  const Profile p = load_profile(profile_);
  EXPECT_EQ(p.gpu, "cpu");
  EXPECT_EQ(p.attention, Attention::materialized);
  EXPECT_EQ(p.provenance.source, "measured");
  EXPECT_EQ(p.provenance.command,
            "pipeplan profile --backend cpu --model tiny --mbs 1,2 --max-concat 3 --repetitions 2");
  EXPECT_NE(p.provenance.notes.find("cpu backend (cpu-f32"), std::string::npos);
  EXPECT_EQ(p.micro_batch_sizes(), (std::vector<int>{1, 2}));
  EXPECT_GT(p.p2p.latency_us, 0);
  EXPECT_GT(p.p2p.bandwidth_GBps, 0);
  cpu::CpuBackend backend;
  for (const LayerKind kind : {LayerKind::embedding, LayerKind::block, LayerKind::head}) {
    const LayerParams layer =
        backend.init_layer(p.model, kind, kind == LayerKind::block ? 1 : 0, 1);
    for (const int mbs : {1, 2}) {
      SCOPED_TRACE(std::string(to_string(kind)) + " mbs " + std::to_string(mbs));
      const LayerCost& c = p.cost(kind, mbs);
      EXPECT_GT(c.forward_us, 0);
      EXPECT_GT(c.p1_us, 0);
      EXPECT_GT(c.optimizer_us, 0);
      ASSERT_EQ(c.p2_concat_us.size(), 3U);
      for (const auto& [k, us] : c.p2_concat_us)
        EXPECT_GT(us, 0) << "k " << k;
      EXPECT_EQ(c.p2_us, c.p2_concat_us.at(1));
      EXPECT_EQ(c.param_bytes, layer.param_bytes());
      EXPECT_EQ(c.grad_bytes, layer.grad_bytes());
      EXPECT_EQ(c.optimizer_bytes, backend.optimizer_bytes(layer));
      EXPECT_GT(c.stash_bytes, 0);
      // f32 activations of (mbs, seq, hidden) go to the next stage; the head sends none.
      EXPECT_EQ(c.send_bytes,
                kind == LayerKind::head ? 0 : std::int64_t{4} * mbs * p.seq * p.model.hidden);
    }
  }
  // The block's stash and retained sets grow with the micro-batch.
  EXPECT_EQ(p.cost(LayerKind::block, 2).stash_bytes, 2 * p.cost(LayerKind::block, 1).stash_bytes);
  EXPECT_EQ(p.cost(LayerKind::block, 2).retained_bytes,
            2 * p.cost(LayerKind::block, 1).retained_bytes);
}

// The memory half of the prediction is exact: the profile holds the bytes the executor counts,
// and a recomputing block's checkpoint, rebuilt stash and retained sets are counted where the
// plan charges them.
TEST_F(CpuProfileCli, ARunOfAPlanFromItHasThePlansPeakMemoryOnEveryDevice) {
  for (const std::string schedule :
       {"1f1b --backward 2bp", "zb-h1", "interleaved --chunks 2",
        "1f1b --backward fused --recompute 1", "1f1b --backward fused --recompute full",
        "1f1b --backward 2bp --recompute 1", "gpipe --recompute 1",
        "interleaved --chunks 2 --recompute full", "zb-v --recompute full"}) {
    SCOPED_TRACE(schedule);
    const std::string plan = path("p.json");
    const CliResult planned =
        run_pipeplan("plan --profile " + profile_ + " --stages 2 -m 4 --schedule " + schedule +
                     " -o " + plan + " --json");
    ASSERT_EQ(planned.status, 0) << planned.out;
    const CliResult ran = run_pipeplan("run " + plan + " --steps 2 --json");
    ASSERT_EQ(ran.status, 0) << ran.out;
    const auto predicted = nlohmann::json::parse(planned.out.substr(planned.out.find('{')))
                               .at("peak_memory_bytes")
                               .get<std::vector<std::int64_t>>();
    const auto measured =
        nlohmann::json::parse(ran.out).at("peak_memory_bytes").get<std::vector<std::int64_t>>();
    EXPECT_EQ(measured, predicted);
  }
  // The run's header says what the plan recomputes (the last plan above: every block).
  const CliResult text = run_pipeplan("run " + path("p.json") + " --steps 1");
  ASSERT_EQ(text.status, 0) << text.out;
  EXPECT_NE(text.out.find(": tiny, zb-v 2bp, recompute full, 2 devices, "), std::string::npos)
      << text.out;
}

// calibrate takes the CPU backend's own runs: it fits them, reports the error per run before and
// after, and writes a profile whose provenance lists them, which eval then reads. The tiny
// model's ops last about half a millisecond, shorter than a scheduler slice: on a loaded machine
// one preempted op can make the runs' times contradict the profile's so far that the fit is
// refused as coming from other hardware (a slowdown above kMaxSlowdown). That refusal, and only
// it, measures the runs again, at most three times.
TEST_F(CpuProfileCli, CalibrateFitsTheCpuBackendsOwnRuns) {
  const std::string fitted = path("fitted.json");
  std::vector<std::string> runs;
  CliResult fit;
  for (int attempt = 0; attempt < 3; ++attempt) {
    runs.clear();
    for (const std::string schedule : {"1f1b --backward 2bp", "gpipe"}) {
      const std::string run = path("run" + std::to_string(runs.size()));
      ASSERT_EQ(run_pipeplan("plan --profile " + profile_ + " --stages 2 -m 4 --schedule " +
                             schedule + " -o " + run + ".plan.json")
                    .status,
                0);
      const CliResult ran =
          run_pipeplan("run " + run + ".plan.json --steps 2 --json --trace " + run + ".trace.json");
      ASSERT_EQ(ran.status, 0) << ran.out;
      std::ofstream(run + ".run.json") << ran.out;
      runs.push_back(run);
    }
    fit = run_pipeplan("calibrate fit --profile " + profile_ + " -o " + fitted + " " + runs[0] +
                       " " + runs[1]);
    if (fit.status == 0 || fit.out.find("far from the runs'") == std::string::npos) break;
    EXPECT_FALSE(std::filesystem::exists(fitted)) << fit.out;
  }
  ASSERT_EQ(fit.status, 0) << fit.out;
  EXPECT_NE(fit.out.find("op error before"), std::string::npos) << fit.out;
  EXPECT_NE(fit.out.find("wrote " + fitted), std::string::npos) << fit.out;
  const nlohmann::json profile = read_json(fitted);
  EXPECT_EQ(profile.at("gpu"), "cpu");
  EXPECT_FALSE(profile.at("contention").at("slowdown").empty()) << profile.at("contention");
  const std::string notes = profile.at("provenance").at("notes").get<std::string>();
  for (const std::string& run : runs)
    EXPECT_NE(notes.find(run), std::string::npos) << notes;
  const CliResult eval =
      run_pipeplan("calibrate eval --profile " + fitted + " " + runs[0] + " " + runs[1]);
  EXPECT_EQ(eval.status, 0) << eval.out;
  // Each run's row: label, measured, before, error, after, error, then the memory errors before
  // and after from its report (the CPU backend's peaks are predicted exactly), re-simulated.
  std::istringstream rows(eval.out);
  int memory_rows = 0;
  for (std::string line; std::getline(rows, line);) {
    std::istringstream words(line);
    const std::vector<std::string> w{std::istream_iterator<std::string>(words), {}};
    if (w.size() != 9 || w[8] != "(re-simulated)") continue;
    ++memory_rows;
    EXPECT_EQ(w[6], "+0.0%") << line;
    EXPECT_EQ(w[7], "+0.0%") << line;
  }
  EXPECT_EQ(memory_rows, 2) << eval.out;
}

TEST_F(CpuProfileCli, OptionsOnlyAGpuTakesAreOneLineNamingThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--gpu h100",
       "pipeplan: error: --gpu: a CPU profile names the gpus.json entry 'cpu' (leave "
       "--gpu out)\n"},
      {"--attention flash",
       "pipeplan: error: --attention: the CPU backend materialises the probabilities "
       "(materialized), not flash\n"},
      {"--sm-partition 16", "pipeplan: error: --sm-partition: only with --backend cuda\n"},
      {"--gemm-candidates 1", "pipeplan: error: --gemm-candidates: only with --backend cuda\n"},
      {"--mbs 65536 --seq 65536",
       "pipeplan: error: --mbs: micro-batch size 65536 x sequence 65536 = 4294967296 tokens is "
       "above the limit of 16777216 (docs/reference/limits.md)\n"},
      {"--sustain-seconds 1",
       "pipeplan: error: --sustain-seconds, --cooldown-seconds: only with --backend cuda (a load "
       "run measures the GPU)\n"},
  };
  for (const auto& [args, line] : cases) {
    const std::string out = path("never.json");
    const CliResult r = run_pipeplan("profile --backend cpu --model tiny " + args + " -o " + out);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_EQ(r.out, line) << args;
    EXPECT_FALSE(std::filesystem::exists(out)) << args;
  }
  const CliResult other = run_pipeplan("profile --backend tpu --model tiny");
  EXPECT_NE(other.status, 0);
  EXPECT_EQ(other.out, "pipeplan: error: --backend: 'tpu' is not cuda or cpu\n");
}

// What the backend cannot run, and an output it cannot write, fail before the first layer is
// measured: a model with a learned position table (the backend applies RoPE), a sequence past
// a sliding window (its attention sees every earlier token).
TEST_F(CpuProfileCli, WhatCannotBeMeasuredOrWrittenFailsBeforeMeasuring) {
  // The profile's model with `field` set to `value`, profiled to `out`: the command's output.
  const auto profile_with = [&](const char* field, const nlohmann::json& value, const char* out) {
    nlohmann::json model = read_json(profile_)["model"];
    model[field] = value;
    const std::string file = path(std::string(field) + ".json");
    std::ofstream(file) << model.dump();
    return run_pipeplan("profile --backend cpu --model " + file + " -o " + path(out)).out;
  };
  EXPECT_EQ(profile_with("learned_positions", 32, "l.json"),
            "pipeplan: error: model 'tiny': backend cpu needs rotary positions (a learned position "
            "table, learned_positions, is planned only)\n");
  EXPECT_EQ(profile_with("sliding_window", 8, "w.json"),
            "pipeplan: error: model 'tiny': sequence 32 is longer than its sliding_window 8, and "
            "the runtime's attention sees every earlier token (planned only)\n");
  // Seconds of measuring (64 sequences of every pass, 64 concatenated p2 calls) never start.
  const CliResult folder = run_pipeplan(
      "profile --backend cpu --model tiny --mbs 64 --max-concat 64 -o " + path("none/p.json"));
  EXPECT_EQ(folder.out, "pipeplan: error: " + path("none/p.json") + ": cannot write: folder '" +
                            path("none") + "' does not exist\n");
  for (const char* out : {"l.json", "w.json"})
    EXPECT_FALSE(std::filesystem::exists(path(out))) << out;
}

// The estimate --max-host-gib compares holds the measurement's own bytes: the largest layer's
// state (f32 weight, gradient, m, v), two stashes and max_concat retained sets with their dX.
TEST_F(CpuProfileCli, TheHostMemoryEstimateCoversWhatTheMeasurementHolds) {
  const Profile p = load_profile(profile_);
  cpu::CpuProfileOptions options;
  options.model = p.model;
  options.micro_batch_sizes = {1, 2};
  options.max_concat = 3;
  std::int64_t held = 0;
  for (const auto& [kind, by_mbs] : p.layers) {
    for (const auto& [mbs, cost] : by_mbs) {
      const std::int64_t state = cost.param_bytes + cost.grad_bytes + cost.optimizer_bytes;
      held = std::max(held, state + 2 * cost.stash_bytes + 3 * cost.retained_bytes);
    }
  }
  EXPECT_GE(cpu::estimate_host_bytes(options), held);
}

// Before anything is allocated: a measurement estimated above --max-host-gib (the largest
// layer's f32 state and activations; tests/bad_inputs.sh has llama-65b above the default), and
// a gpus.json without the 'cpu' entry every plan from the profile would look up.
TEST_F(CpuProfileCli, AMeasurementTooLargeOrWithoutItsEntryIsRefusedBeforeItStarts) {
  const std::string out = path("never.json");
  const CliResult small =
      run_pipeplan("profile --backend cpu --model tiny --max-host-gib 0.01 -o " + out);
  EXPECT_EQ(small.status, 1);
  EXPECT_EQ(small.out.rfind("pipeplan: error: --max-host-gib: measuring model 'tiny' on the CPU "
                            "needs about 0.1",
                            0),
            0U)
      << small.out;
  EXPECT_NE(small.out.find("above 0.01 GiB"), std::string::npos) << small.out;
  const CliResult analytic =
      run_pipeplan("profile --analytic --model tiny --max-host-gib 1 -o " + out);
  EXPECT_EQ(analytic.out, "pipeplan: error: --max-host-gib: only with --backend cpu\n");
  // A gpus.json with every entry but 'cpu'.
  auto gpus = read_json(std::string(PIPEPLAN_SOURCE_DIR) + "/profiles/gpus.json");
  auto& list = gpus["gpus"];
  list.erase(std::remove_if(list.begin(), list.end(),
                            [](const nlohmann::json& g) { return g["name"] == "cpu"; }),
             list.end());
  std::filesystem::create_directories(path("data"));
  std::ofstream(path("data/gpus.json")) << gpus.dump();
  const CliResult no_entry = run_pipeplan("profile --backend cpu --model tiny -o " + out,
                                          "PIPEPLAN_DATA_DIR=" + path("data"));
  EXPECT_EQ(no_entry.out, "pipeplan: error: --backend cpu: " + path("data/gpus.json") +
                              " has no entry 'cpu', which a CPU profile names (plans from it "
                              "read its memory and peak there)\n");
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace pipeplan::testing
