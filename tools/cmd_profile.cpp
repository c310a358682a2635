#include "tools/commands.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <iostream>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"
#include "profiles/analytic.h"
#include "profiles/gpu.h"
#include "runtime/cpu/profiler.h"
#include "runtime/gpu_plugin.h"
#include "tools/cli_checks.h"
#include "tools/units.h"

namespace pipeplan {

namespace {

constexpr double kMaxLoadSeconds = 3600;  // --sustain-seconds, --cooldown-seconds: an hour
constexpr int kMaxSms = 4096;             // --sm-partition: more SMs than any GPU has
constexpr int kMaxRepetitions = 10000;    // timed runs per pass

// One word of a command line as a POSIX shell reads it back: as it is where it holds only
// characters no shell treats specially, else in single quotes (a quote inside as '\'').
std::string shell_word(std::string_view word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::string_view("_-./:=,+@%").find(c) != std::string_view::npos;
  });
  if (plain) return std::string(word);
  std::string out = "'";
  for (const char c : word)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// `pipeplan profile` and its options, each value quoted for the shell: the profile's
// provenance.command, which re-run gives the same profile.
std::string profile_command(const std::vector<std::pair<std::string, std::string>>& options,
                            std::string_view mode) {
  std::string command = "pipeplan profile " + std::string(mode);
  for (const auto& [flag, value] : options)
    command += " " + flag + " " + shell_word(value);
  return command;
}

struct ProfileCommand {
  std::string model;
  std::string gpu = "h100";
  bool gpu_given = false;  // --gpu on the command line (cuda: else from the device name)
  int seq = 0;
  std::string mbs = "1";
  std::string attention = "flash";
  bool attention_given = false;
  int max_concat = 8;
  bool analytic = false;
  std::string backend;  // "cuda": measure on the GPU (the CUDA plugin, runtime/gpu_plugin.h)
  int sm_partition = 0;
  bool sm_partition_given = false;
  int repetitions = 20;
  bool repetitions_given = false;
  int gemm_candidates = 1;
  bool gemm_candidates_given = false;
  std::string sustain_seconds = "20";
  std::string cooldown_seconds = "5";
  bool load_given = false;  // --sustain-seconds or --cooldown-seconds on the command line
  double max_host_gib = 8;  // cpu: the most host memory a measurement may need
  bool max_host_given = false;
  std::string output;
  int run() const {
    if (max_host_given && backend != "cpu") throw Error("--max-host-gib: only with --backend cpu");
    // The output is checked before anything is measured (a GPU profile takes minutes).
    if (!output.empty()) check_output(output);
    if (!backend.empty() && backend != "cuda" && backend != "cpu")
      throw Error("--backend: '" + backend + "' is not cuda or cpu");
    if (analytic && !backend.empty()) {
      throw Error("--backend: " + backend +
                  " measures its hardware; --analytic estimates without measuring (give one of "
                  "them)");
    }
    if (!analytic && backend == "cuda") return run_cuda();
    if (!analytic && backend == "cpu") return run_cpu();
    if (!analytic) {
      throw Error(
          "profile: give --analytic, or --backend cuda to measure on a GPU (--backend cpu: on "
          "this machine's CPU backend)");
    }
    if (gemm_candidates_given) throw Error("--gemm-candidates: only with --backend cuda");
    if (sm_partition_given) throw Error("--sm-partition: only with --backend cuda");
    if (repetitions_given) {
      throw Error("--repetitions: only with --backend cuda or cpu (--analytic times nothing)");
    }
    if (load_given) {
      throw Error(
          "--sustain-seconds, --cooldown-seconds: only with --backend cuda (a load run "
          "measures the GPU)");
    }
    if (model.empty()) throw Error("--model: required");
    if (max_concat < 1) throw Error("--max-concat: must be at least 1");
    AnalyticOptions options;
    options.seq = seq;
    options.micro_batch_sizes = parse_candidate_list(mbs, "--mbs");
    options.attention = attention_from_string(attention);
    options.max_p2_concat = max_concat;
    Profile profile = analytic_profile(resolve_model(model), find_gpu(gpu), options);
    std::vector<std::pair<std::string, std::string>> args{
        {"--model", model},
        {"--gpu", gpu},
        {"--mbs", mbs},
        {"--attention", attention},
        {"--max-concat", std::to_string(max_concat)}};
    if (seq > 0) args.emplace_back("--seq", std::to_string(seq));
    profile.provenance.command = profile_command(args, "--analytic");
    write(profile);
    return 0;
  }
  // The CPU reference backend on this machine: what `pipeplan run --backend cpu` runs.
  int run_cpu() const {
    if (gpu_given) {
      throw Error("--gpu: a CPU profile names the gpus.json entry '" +
                  std::string(cpu::kCpuDeviceName) + "' (leave --gpu out)");
    }
    if (sm_partition_given) throw Error("--sm-partition: only with --backend cuda");
    if (gemm_candidates_given) throw Error("--gemm-candidates: only with --backend cuda");
    if (load_given) {
      throw Error(
          "--sustain-seconds, --cooldown-seconds: only with --backend cuda (a load run "
          "measures the GPU)");
    }
    if (attention_given && attention_from_string(attention) != Attention::materialized) {
      throw Error(
          "--attention: the CPU backend materialises the probabilities (materialized), not " +
          attention);
    }
    // Plans from the profile look its device up: an entry missing here fails now, not there.
    try {
      static_cast<void>(find_gpu(cpu::kCpuDeviceName));
    } catch (const FieldError&) {
      throw Error("--backend cpu: " + (data_dir() / "gpus.json").string() + " has no entry '" +
                  cpu::kCpuDeviceName +
                  "', which a CPU profile names (plans from it read its memory and peak there)");
    }
    cpu::CpuProfileOptions options;
    options.model = resolve_model(model);
    options.seq = seq;
    options.micro_batch_sizes = parse_candidate_list(mbs, "--mbs");
    options.max_concat = max_concat;
    options.repetitions = repetitions;
    options.progress = isatty(STDERR_FILENO) != 0;
    const auto need = static_cast<double>(cpu::estimate_host_bytes(options));
    if (need > max_host_gib * kBytesPerGiB) {
      throw Error("--max-host-gib: measuring model '" + options.model.name +
                  "' on the CPU needs about " + format_gib(need) + " of host memory, above " +
                  format_gib(max_host_gib * kBytesPerGiB) +
                  " (the CPU backend is for small models such as 'tiny'; raise the limit where "
                  "the host has the memory)");
    }
    std::vector<std::pair<std::string, std::string>> args{
        {"--model", model},
        {"--mbs", mbs},
        {"--max-concat", std::to_string(max_concat)},
        {"--repetitions", std::to_string(repetitions)}};
    if (seq > 0) args.emplace_back("--seq", std::to_string(seq));
    options.command = profile_command(args, "--backend cpu");
    write(cpu::measure_profile(options));
    return 0;
  }
  void write(const Profile& profile) const {
    if (output.empty()) {
      std::cout << json_text(profile_to_json(profile), 2) << "\n";
    } else {
      save_profile(profile, output);
      std::cout << "wrote " << output << "\n";
    }
  }
  int run_cuda() const {
    GpuProfileOptions options;
    options.model = resolve_model(model);
    options.seq = seq;
    options.micro_batch_sizes = parse_candidate_list(mbs, "--mbs");
    options.attention = attention_from_string(attention);
    options.max_concat = max_concat;
    options.repetitions = repetitions;
    options.sm_partition = sm_partition;
    options.gemm_candidates = gemm_candidates;
    options.sustain_seconds =
        parse_number_in(sustain_seconds, "--sustain-seconds", 0, kMaxLoadSeconds);
    options.cooldown_seconds =
        parse_number_in(cooldown_seconds, "--cooldown-seconds", 0, kMaxLoadSeconds);
    if (gpu_given) options.gpu = gpu;
    options.progress = isatty(STDERR_FILENO) != 0;
    std::vector<std::pair<std::string, std::string>> args{
        {"--model", model},
        {"--mbs", mbs},
        {"--attention", attention},
        {"--max-concat", std::to_string(max_concat)},
        {"--repetitions", std::to_string(repetitions)}};
    if (seq > 0) args.emplace_back("--seq", std::to_string(seq));
    args.emplace_back("--sustain-seconds", sustain_seconds);
    args.emplace_back("--cooldown-seconds", cooldown_seconds);
    if (sm_partition > 0) args.emplace_back("--sm-partition", std::to_string(sm_partition));
    if (gpu_given) args.emplace_back("--gpu", gpu);
    if (gemm_candidates > 1)
      args.emplace_back("--gemm-candidates", std::to_string(gemm_candidates));
    options.command = profile_command(args, "--backend cuda");
    write(load_gpu_plugin().measure_profile(options));
    return 0;
  }
};

}  // namespace

Command add_profile_command(CLI::App& app) {
  auto cmd = std::make_shared<ProfileCommand>();
  auto* sub = app.add_subcommand(
      "profile",
      "write a profile: --analytic (no GPU needed), or measured with --backend cuda or cpu");
  sub->add_option("--model", cmd->model, "model preset or config.json")->required();
  sub->add_option("--gpu", cmd->gpu, "GPU from gpus.json (cuda: default from the device's name)")
      ->capture_default_str()
      ->each([cmd](const std::string&) { cmd->gpu_given = true; });
  sub->add_option("--seq", cmd->seq, "sequence length (default: the model's)")
      ->check(int_range(1, limits::kMaxSeq));
  sub->add_option("--mbs", cmd->mbs, "micro-batch sizes, e.g. 1,2,4")->capture_default_str();
  sub->add_option("--attention", cmd->attention,
                  "materialized, recompute, flash (cpu: materialized, its only one)")
      ->capture_default_str()
      ->each([cmd](const std::string&) { cmd->attention_given = true; });
  sub->add_option("--max-concat", cmd->max_concat, "p2 concatenation entries 1..K")
      ->capture_default_str();
  sub->add_flag("--analytic", cmd->analytic, "estimate from FLOPs and bandwidth");
  sub->add_option("--backend", cmd->backend,
                  "cuda: measure on the GPU; cpu: on the CPU reference backend");
  sub->add_option("--sm-partition", cmd->sm_partition, "cuda: run in a green context of N SMs")
      ->check(int_range(0, kMaxSms))
      ->each([cmd](const std::string&) { cmd->sm_partition_given = true; });
  sub->add_option("--repetitions", cmd->repetitions, "cuda, cpu: timed runs per pass (median kept)")
      ->capture_default_str()
      ->check(int_range(1, kMaxRepetitions))
      ->each([cmd](const std::string&) { cmd->repetitions_given = true; });
  sub->add_option("--gemm-candidates", cmd->gemm_candidates,
                  "cuda: run each GEMM shape with the fastest of N cuBLASLt answers (timed in the "
                  "warm-up; 1: the heuristic's first)")
      ->capture_default_str()
      ->check(int_range(1, limits::kMaxGemmCandidates))
      ->each([cmd](const std::string&) { cmd->gemm_candidates_given = true; });
  sub->add_option("--sustain-seconds", cmd->sustain_seconds,
                  "cuda: seconds of a block's ops back to back at full load, for the sustained "
                  "clock (0: none)")
      ->capture_default_str()
      ->each([cmd](const std::string&) { cmd->load_given = true; });
  sub->add_option("--cooldown-seconds", cmd->cooldown_seconds,
                  "cuda: idle seconds before the load run (and at most before each contention "
                  "burst)")
      ->capture_default_str()
      ->each([cmd](const std::string&) { cmd->load_given = true; });
  sub->add_option("--max-host-gib", cmd->max_host_gib,
                  "cpu: refuse a measurement estimated to need more host memory than this, GiB")
      ->capture_default_str()
      ->check(finite_range(0, limits::kMaxMemoryBytes / kBytesPerGiB))
      ->each([cmd](const std::string&) { cmd->max_host_given = true; });
  sub->add_option("-o,--output", cmd->output, "profile JSON to write");
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
