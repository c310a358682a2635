// `pipeplan bpipe`: will BPipe pay for this model and cluster? (planner/bpipe_estimate.h)
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "planner/bpipe_estimate.h"
#include "planner/error.h"
#include "tools/commands.h"
#include "tools/plan_options.h"

namespace pipeplan {

namespace {

struct BpipeCommand {
  PlanOptions options;
  int global_batch = 0;
  std::string mbs_list;
  bool json = false;
  int run() const {
    if (global_batch < 1) throw Error("--global-batch: required (samples per step)");
    PlanOptions o = options;
    o.microbatches = global_batch;  // placeholder: each candidate sets m = global batch / mbs
    const BpipeEstimate estimate = estimate_bpipe(make_search_request(o, global_batch, mbs_list));
    if (json) {
      std::cout << estimate_to_json(estimate).dump(2) << "\n";
    } else {
      std::cout << format_estimate(estimate);
    }
    return 0;
  }
};

}  // namespace

Command add_bpipe_command(CLI::App& app) {
  auto cmd = std::make_shared<BpipeCommand>();
  auto* sub = app.add_subcommand(
      "bpipe", "estimate BPipe's benefit: best 1f1b plan without and with it (docs/bpipe.md)");
  PlanOptions& o = cmd->options;
  sub->add_option("--model", o.model, "model preset or a Hugging Face config.json");
  sub->add_option("--gpu", o.gpu, "GPU from profiles/gpus.json")->capture_default_str();
  sub->add_option("--profile", o.profile, "profile JSON with several micro-batch sizes");
  sub->add_option("--stages", o.stages, "pipeline devices P")->required();
  sub->add_option("--global-batch", cmd->global_batch, "samples per step")->required();
  sub->add_option("--seq", o.seq, "sequence length (default: the model's)");
  sub->add_option("--memory", o.memory, "memory limit per device, e.g. 80GiB (default: HBM)");
  sub->add_option("--attention", o.attention, "materialized, recompute, flash (analytic)")
      ->capture_default_str();
  sub->add_option("--tensor-parallel", o.tensor_parallel, "GPUs per stage (analytic split)")
      ->capture_default_str();
  sub->add_option("--p2-concat", o.p2_concat, "micro-batches per p2 call in 2bp modes (0 = all)")
      ->capture_default_str();
  sub->add_option("--mbs-list", cmd->mbs_list, "micro-batch sizes to try (default 1,2,4,8)");
  sub->add_flag("--json", cmd->json, "print machine-readable output");
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
