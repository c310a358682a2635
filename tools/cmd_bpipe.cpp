// `pipeplan bpipe`: will BPipe pay for this model and cluster? (planner/search/bpipe_estimate.h)
#include <charconv>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/limits.h"
#include "planner/search/bpipe_estimate.h"
#include "profiles/gpu.h"
#include "profiles/recompute.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"
#include "tools/plan_options.h"

namespace pipeplan {

namespace {

// Tensor-parallel degrees tried by `--tensor-parallel auto`: powers of two up to one 8-GPU
// node, where TP's all-reduces stay on NVLink (Narayanan et al. 2021, §3.3). The smallest that
// fits is the one to use: every step up adds TP communication, and it is the regime BPipe is for
// (memory-bound pipeline stages).
constexpr int kAutoTensorParallel[] = {1, 2, 4, 8};

struct BpipeCommand {
  PlanOptions options;
  int global_batch = 0;
  std::string mbs_list;
  std::string tensor_parallel = "auto";
  std::string baseline_recompute = "none";  // as plan's --recompute (profiles/recompute.h)
  bool json = false;

  BpipeEstimate estimate_at(int t) const {
    PlanOptions o = options;
    o.tensor_parallel = t;
    o.microbatches = global_batch;  // placeholder: each candidate sets m = global batch / mbs
    const SearchRequest request = make_search_request(o, global_batch, mbs_list, "--mbs-list");
    std::optional<SearchRequest> recomputing;
    if (baseline_recompute != "none") {
      PlanOptions r = o;
      r.recompute = baseline_recompute;
      recomputing = make_search_request(r, global_batch, mbs_list, "--mbs-list");
    }
    BpipeEstimate e = estimate_bpipe(request, recomputing ? &*recomputing : nullptr);
    e.tensor_parallel = t;
    e.memory_note = memory_budget_text(o, find_gpu(request.base.gpu));
    return e;
  }

  // --tensor-parallel other than auto: one degree, a positive integer.
  int given_tensor_parallel() const {
    int t = 0;
    const char* end = tensor_parallel.data() + tensor_parallel.size();
    const auto [ptr, ec] = std::from_chars(tensor_parallel.data(), end, t);
    if (tensor_parallel.empty() || ec != std::errc() || ptr != end || t < 1) {
      throw Error("--tensor-parallel: '" + tensor_parallel +
                  "' is neither one positive integer (GPUs per stage) nor 'auto'");
    }
    return t;
  }

  // A measured profile or --uniform already describes one pipeline device: auto means 1 there.
  BpipeEstimate estimate() const {
    if (tensor_parallel != "auto") {
      BpipeEstimate e = estimate_at(given_tensor_parallel());
      e.tensor_parallel_note = "given";
      return e;
    }
    if (!options.profile.empty() || !options.uniform.empty()) {
      BpipeEstimate e = estimate_at(1);
      e.tensor_parallel_note = "auto: a profile is per pipeline device";
      return e;
    }
    // Degrees that do not divide the model's heads are not candidates (the user gave none).
    std::string last;
    int last_degree = 0;
    for (const int t : kAutoTensorParallel) {
      try {
        BpipeEstimate e = estimate_at(t);
        e.tensor_parallel_note =
            "auto: smallest of 1, 2, 4, 8 at which a plan fits, with BPipe or without";
        return e;
      } catch (const NothingFitsError& e) {
        last = e.what();
        last_degree = t;
      } catch (const FieldError& e) {
        if (e.field() != "tensor_parallel") throw;
      }
    }
    if (last_degree == 0) {
      throw Error("--tensor-parallel: auto found no degree of 1, 2, 4, 8 that divides the heads");
    }
    throw Error("--tensor-parallel: auto found no degree of 1, 2, 4, 8 at which a plan fits (TP " +
                std::to_string(last_degree) + ": " + last + ")");
  }

  int run() const {
    if (global_batch < 1) throw Error("--global-batch: required (samples per step)");
    if (options.stages < 2) {
      throw Error("--stages: BPipe pairs stage x with stage P - 1 - x: needs at least 2, got " +
                  std::to_string(options.stages));
    }
    try {
      static_cast<void>(recompute_from_string(baseline_recompute));
    } catch (const FieldError& e) {
      throw Error("--baseline-recompute: " + e.detail());
    }
    const BpipeEstimate e = estimate();
    if (json) {
      nlohmann::json out = estimate_to_json(e);
      out["tensor_parallel_note"] = e.tensor_parallel_note;
      out["memory_note"] = e.memory_note;
      out["baseline_recompute"] = baseline_recompute;
      std::cout << out.dump(2) << "\n";
    } else {
      std::cout << format_estimate(e);
    }
    return 0;
  }
};

}  // namespace

Command add_bpipe_command(CLI::App& app) {
  auto cmd = std::make_shared<BpipeCommand>();
  auto* sub = app.add_subcommand(
      "bpipe",
      "estimate BPipe's benefit: best 1f1b plan without and with it (docs/design/bpipe.md)");
  PlanOptions& o = cmd->options;
  sub->add_option("--model", o.model, "model preset or a Hugging Face config.json");
  sub->add_option("--gpu", o.gpu,
                  "GPU from profiles/gpus.json (default: the --profile's, else h100)");
  sub->add_option("--profile", o.profile, "profile JSON with several micro-batch sizes");
  sub->add_option("--stages", o.stages, "pipeline devices P")->required();
  sub->add_option("--global-batch", cmd->global_batch,
                  "samples per step (every replica's with --data-parallel)")
      ->required()
      ->check(int_range(1, limits::kMaxGlobalBatch));
  sub->add_option("--seq", o.seq, "sequence length (default: the model's)")
      ->check(int_range(1, limits::kMaxSeq));
  sub->add_option("--memory", o.memory, "memory per GPU, e.g. 80GiB (default: HBM)");
  sub->add_option("--reserve", o.reserve,
                  "kept back from --memory for CUDA context, NCCL, fragmentation (default: 1GiB "
                  "+ 4 %)");
  sub->add_option("--attention", o.attention,
                  "materialized, recompute, flash (analytic model; default: flash, a --profile's "
                  "own)");
  sub->add_option("--tensor-parallel", cmd->tensor_parallel,
                  "GPUs per stage, or auto: the smallest of 1, 2, 4, 8 at which a plan fits, with "
                  "BPipe or without")
      ->capture_default_str();
  add_data_parallel_options(*sub, o);
  sub->add_option("--p2-concat", o.p2_concat, "micro-batches per p2 call in 2bp modes (0 = all)")
      ->capture_default_str();
  sub->add_option("--mbs-list", cmd->mbs_list, "micro-batch sizes to try (default 1,2,4,8)");
  sub->add_option("--link-bandwidth", o.link_bandwidth,
                  "GB/s per direction between stages, BPipe's pairs included; 0: no bandwidth "
                  "limit, latency only (default: the profile's p2p, the GPU's NVLink or PCIe)");
  sub->add_option("--link-latency", o.link_latency,
                  "microseconds per transfer between stages (default: the profile's)");
  sub->add_option("--baseline-recompute", cmd->baseline_recompute,
                  "none, full, N or auto (as plan's --recompute): the plans without BPipe may "
                  "also recompute activations, BPipe's keep them")
      ->capture_default_str();
  sub->add_flag("--json", cmd->json, "print machine-readable output");
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
