#include "tools/commands.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"
#include "planner/plan/make_plan.h"
#include "planner/search/bpipe_estimate.h"
#include "tools/cli_checks.h"
#include "tools/plan_options.h"
#include "tools/report.h"

namespace pipeplan {

namespace {

struct PlanCommand {
  PlanOptions options;
  std::string output;
  bool json = false;
  bool search = false;
  int global_batch = 0;
  std::string search_mbs;
  int run() const {
    if (search) return run_search();
    if (options.bpipe == "auto") return run_bpipe_auto();
    const PlanRequest request = make_request(options);
    check_output_early();
    // The planner's own time: make_plan alone (schedule, lowering, validation, simulation).
    const auto started = std::chrono::steady_clock::now();
    const Plan plan = make_plan(request);
    const std::chrono::duration<double, std::milli> planning =
        std::chrono::steady_clock::now() - started;
    if (!output.empty()) save_plan(plan.graph, output);
    if (json) {
      nlohmann::json j = metrics_json(plan.graph, plan.sim);
      j["objective"] = options.objective;
      j["lower_bound_ms"] = plan.bound.makespan_us / 1e3;
      if (!plan.chosen.empty()) j["chosen"] = plan.chosen;
      j["planning_ms"] = planning.count();
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << short_summary(plan.graph, plan.sim) << bound_line(plan);
      if (!output.empty()) std::cout << "wrote " << output << "\n";
    }
    return 0;
  }
  // Once the inputs are read: a target that cannot be written fails before the planning.
  void check_output_early() const {
    if (!output.empty()) check_output(output);
  }
  static std::string bound_line(const Plan& plan) {
    char line[160];
    std::snprintf(line, sizeof line, "lower bound on step time %.3f ms, gap %.1f %%\n",
                  plan.bound.makespan_us / 1e3,
                  100 * gap_to_bound(plan.sim.makespan_us, plan.bound.makespan_us));
    std::string out = line;
    if (!plan.chosen.empty())
      out = plan.graph.meta.schedule + " chose: " + plan.chosen + "\n" + out;
    return out;
  }
  // --bpipe auto: the fastest 1f1b plan over micro-batch size, backward mode and BPipe on/off.
  int run_bpipe_auto() const {
    if (global_batch < 1) throw Error("--global-batch: required by --bpipe auto");
    BpipeConfig chosen;
    const SearchRequest request =
        make_search_request(options, global_batch, search_mbs, "--search-mbs");
    check_output_early();
    const Plan plan = best_bpipe_plan(request, &chosen);
    if (!output.empty()) save_plan(plan.graph, output);
    if (json) {
      std::cout << metrics_json(plan.graph, plan.sim).dump(2) << "\n";
      return 0;
    }
    std::cout << "bpipe auto: mbs " << chosen.mbs << ", backward " << to_string(chosen.backward)
              << ", BPipe " << (chosen.bpipe ? "on" : "off") << "\n"
              << short_summary(plan.graph, plan.sim) << bound_line(plan);
    if (!output.empty()) std::cout << "wrote " << output << "\n";
    return 0;
  }
  int run_search() const {
    if (global_batch == 0 && options.microbatches < 1)
      throw Error("--global-batch: required by --search (or give --microbatches)");
    const SearchRequest request =
        make_search_request(options, global_batch, search_mbs, "--search-mbs");
    check_output_early();
    const SearchResult result = search_plans(request);
    if (!output.empty()) save_plan(result.best.graph, output);
    if (json) {
      std::cout << metrics_json(result.best.graph, result.best.sim).dump(2) << "\n";
      return 0;
    }
    std::cout << format_pareto(result) << "best:\n"
              << short_summary(result.best.graph, result.best.sim) << bound_line(result.best);
    if (!output.empty()) std::cout << "wrote " << output << "\n";
    return 0;
  }
};

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto cmd = std::make_shared<PlanCommand>();
  auto* sub = app.add_subcommand("plan", "plan a schedule, write its task graph");
  add_plan_options(*sub, cmd->options, true);
  sub->add_option("-o,--output", cmd->output, "write the plan (task graph JSON)");
  sub->add_flag("--json", cmd->json, "print machine-readable metrics");
  sub->add_flag("--search", cmd->search,
                "search mbs, schedule (auto included), backward, chunks and partition; print the "
                "Pareto front of step time vs peak memory, write the best plan with -o");
  sub->add_option("--global-batch", cmd->global_batch,
                  "samples per step for --search (m = global batch / mbs)")
      ->check(int_range(1, limits::kMaxGlobalBatch));
  sub->add_option("--search-mbs", cmd->search_mbs,
                  "micro-batch sizes --search tries, e.g. 1,2,4 (default 1,2,4,8)");
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
