#include "tools/commands.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"
#include "planner/plan/lower_bound.h"
#include "planner/plan/make_plan.h"
#include "planner/search/auto_schedule.h"
#include "planner/search/bpipe_estimate.h"
#include "profiles/recompute.h"
#include "schedules/family.h"
#include "tools/cli_checks.h"
#include "tools/plan_options.h"
#include "tools/report.h"

namespace pipeplan {

namespace {

struct PlanCommand {
  CLI::App* app = nullptr;
  PlanOptions options;
  std::string output;
  bool json = false;
  bool search = false;
  int global_batch = 0;
  std::string search_mbs;

  bool given(const char* flag) const { return app->count(flag) > 0; }
  // What a mode chooses itself is not an option beside it: each one given there is refused.
  void check_modes() const {
    const bool bpipe_auto = options.bpipe == "auto";
    // What auto chooses by: nothing a fixed schedule reads (--search and compare try auto).
    if (!search && options.schedule != kAutoScheduleName) {
      for (const char* flag : {"--objective", "--auto-copies"}) {
        if (given(flag)) {
          throw Error(std::string(flag) + ": what --schedule auto chooses by; schedule '" +
                      options.schedule + "' is given (use --schedule auto or --search)");
        }
      }
    }
    if (!search && !bpipe_auto) {
      if (given("--global-batch")) {
        throw Error(
            "--global-batch: only with --search or --bpipe auto (a plan's batch is -m x --mbs)");
      }
      if (given("--search-mbs")) throw Error("--search-mbs: only with --search or --bpipe auto");
      return;
    }
    if (search && bpipe_auto) {
      throw Error(
          "--bpipe: auto chooses BPipe among 1f1b plans and --search among schedules (give one "
          "of them)");
    }
    const std::string mode = search ? "--search" : "--bpipe auto";
    if (bpipe_auto && given("--schedule") && options.schedule != "1f1b") {
      throw Error("--schedule: --bpipe auto plans 1f1b, not " + options.schedule);
    }
    if (bpipe_auto && given("--backward")) {
      throw Error("--backward: --bpipe auto tries every backward mode (leave it out)");
    }
    for (const char* flag : {"--chunks", "--layers-per-stage", "--layout"}) {
      if (given(flag)) {
        throw Error(std::string(flag) + ": " + mode +
                    " chooses the chunks and the split itself (leave it out)");
      }
    }
    if (search && given("--p2-concat") && given("--backward") && options.backward == "fused") {
      throw Error(
          "--p2-concat: concatenates deferred p2s, and backward fused defers none (each p2 runs "
          "right after its p1): use --backward 2bp or 2bp-fill");
    }
    if (global_batch > 0) {
      for (const char* flag : {"--microbatches", "--mbs"}) {
        if (given(flag)) {
          throw Error(std::string(flag) +
                      ": --global-batch sets the micro-batch size (from --search-mbs) and m = "
                      "global batch / mbs (leave it out)");
        }
      }
    } else if (given("--search-mbs")) {
      throw Error("--search-mbs: needs --global-batch (without it " + mode +
                  " keeps -m and --mbs)");
    }
  }

  int run() const {
    check_modes();
    if (search) return run_search();
    if (options.bpipe == "auto") return run_bpipe_auto();
    const PlanRequest request = make_request(options);
    if (given("--p2-concat") && request.backward == BackwardMode::fused) {
      throw Error(
          "--p2-concat: concatenates deferred p2s, and backward fused defers none (each p2 runs "
          "right after its p1): use --backward 2bp or 2bp-fill");
    }
    if (given("--p2-concat")) {
      const ScheduleFamily& family = find_schedule_family(request.schedule);
      if (family.places_p2() && !family.traits().needs_costs) {
        throw Error("--p2-concat: schedule '" + family.name() +
                    "' places each p2 itself, one micro-batch a call (it applies to 2bp and "
                    "2bp-fill of the families that leave p2 to --backward, and to auto)");
      }
    }
    check_output_early();
    // The planner's own time: make_plan alone (schedule, lowering, validation, simulation).
    const auto started = std::chrono::steady_clock::now();
    const Plan plan = make_plan_noting_sequence(request);
    const std::chrono::duration<double, std::milli> planning =
        std::chrono::steady_clock::now() - started;
    // A fixed family that pairs no ops has nothing the efficiency applies to.
    if (given("--overlap-efficiency") && request.schedule != kAutoScheduleName) {
      const auto nodes = plan.graph.nodes();
      if (std::none_of(nodes.begin(), nodes.end(), [](const Node& n) { return n.overlaps_next; })) {
        throw Error("--overlap-efficiency: schedule '" + request.schedule +
                    "' overlaps no pair of ops (dualpipe and dualpipe-v do)");
      }
    }
    if (!output.empty()) save_plan(plan.graph, output);
    if (json) {
      nlohmann::json j = plan_json(plan, planning.count());
      j["objective"] = options.objective;
      std::cout << json_text(j, 2) << "\n";
    } else {
      std::cout << short_summary(plan.graph, plan.sim) << bound_line(plan);
      if (request.bpipe == BpipeMode::on && transfer_json(plan.graph).empty()) {
        std::cout << "BPipe: no stash moved: no pair's larger peak falls with transfers"
                  << (plan.graph.meta.memory_limited() ? ", or the pair fits --memory without them"
                                                       : "")
                  << "\n";
      }
      if (request.recompute.method == Recompute::Method::automatic &&
          !plan.graph.meta.recompute.any()) {
        std::cout << "activation recompute: auto chose none: the plan fits keeping every "
                     "block's activations\n";
      }
      if (!output.empty()) std::cout << "wrote " << output << "\n";
    }
    return 0;
  }
  // `plan()`, a memory-limit error noting a config.json's own sequence: its
  // max_position_embeddings (Qwen2.5-7B: 131072), a context capacity rather than a training
  // length (config_sequence_note).
  template <typename Planning>
  auto noting_sequence(const Profile& profile, const Planning& plan) const {
    try {
      return plan();
    } catch (const FieldError& e) {
      const std::string note = config_sequence_note(options, profile);
      if (e.field() != "memory_limit_bytes" || note.empty()) throw;
      throw FieldError(e.field(), e.detail() + note);
    }
  }
  Plan make_plan_noting_sequence(const PlanRequest& request) const {
    return noting_sequence(request.profile, [&] { return make_plan(request); });
  }
  // What --json prints of a plan: its metrics, its lower bound and the gap to it, what auto
  // chose, and the planner's time (ms).
  static nlohmann::json plan_json(const Plan& plan, double planning_ms) {
    nlohmann::json j = metrics_json(plan.graph, plan.sim);
    j["lower_bound_ms"] = plan.bound.makespan_us / 1e3;
    j["gap_to_bound"] = gap_to_bound(plan.sim.makespan_us, plan.bound.makespan_us);
    if (!plan.chosen.empty()) j["chosen"] = plan.chosen;
    j["planning_ms"] = planning_ms;
    return j;
  }
  static double ms_since(std::chrono::steady_clock::time_point started) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
        .count();
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
    // The bound knows no memory limit: a step twice it or more is held back by the memory.
    const PlanMeta& meta = plan.graph.meta;
    if (meta.memory_limited() && !meta.recompute.any() &&
        gap_to_bound(plan.sim.makespan_us, plan.bound.makespan_us) >= 1.0) {
      out += std::string(
                 "the bound ignores memory: a plan this far above it has too little of it "
                 "to keep micro-batches in flight (") +
             (meta.model.family == "uniform" ? "more --memory" : "--recompute auto") +
             " or more --stages give it room)\n";
    }
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
    const auto started = std::chrono::steady_clock::now();
    const Plan plan = best_bpipe_plan(request, &chosen);
    const double planning_ms = ms_since(started);
    if (!output.empty()) save_plan(plan.graph, output);
    if (json) {
      nlohmann::json j = plan_json(plan, planning_ms);
      j["objective"] = options.objective;
      j["bpipe_auto"] = {{"mbs", chosen.mbs},
                         {"backward", std::string(to_string(chosen.backward))},
                         {"bpipe", chosen.bpipe}};
      std::cout << json_text(j, 2) << "\n";
      return 0;
    }
    std::cout << "bpipe auto: mbs " << chosen.mbs << ", backward " << to_string(chosen.backward)
              << ", BPipe " << (chosen.bpipe ? "on" : "off") << "\n"
              << short_summary(plan.graph, plan.sim) << bound_line(plan);
    if (!output.empty()) std::cout << "wrote " << output << "\n";
    return 0;
  }
  int run_search() const {
    // A -m given is checked as plain `plan` checks it (make_search_request): only a missing one
    // asks for the global batch.
    if (global_batch == 0 && !options.microbatches_given)
      throw Error("--global-batch: required by --search (or give --microbatches)");
    SearchRequest request = make_search_request(options, global_batch, search_mbs, "--search-mbs");
    // --schedule and --backward, when given, keep the search to that family and mode.
    if (given("--schedule")) request.only_schedule = options.schedule;
    if (given("--backward")) request.only_backward = backward_mode_from_string(options.backward);
    check_output_early();
    const auto started = std::chrono::steady_clock::now();
    const SearchResult result =
        noting_sequence(request.base.profile, [&] { return search_plans(request); });
    const double planning_ms = ms_since(started);
    if (!output.empty()) save_plan(result.best.graph, output);
    if (json) {
      nlohmann::json out = plan_json(result.best, planning_ms);
      out["objective"] = std::string(to_string(result.objective));
      out["evaluated"] = result.evaluated;
      out["infeasible"] = result.infeasible;
      nlohmann::json front = nlohmann::json::array();
      for (const SearchPoint& p : result.pareto) {
        front.push_back({{"step_time_ms", p.step_time_us / 1e3},
                         {"span_ms", p.span_us / 1e3},
                         {"peak_memory_bytes", p.peak_memory_bytes},
                         {"gap", p.bound_us > 0 ? (p.step_time_us - p.bound_us) / p.bound_us : 0.0},
                         {"mbs", p.mbs},
                         {"microbatches", p.microbatches},
                         {"schedule", p.schedule},
                         {"chunks", p.chunks},
                         {"backward", std::string(to_string(p.backward))},
                         {"layers_per_stage", p.layers_per_stage},
                         {"recompute", recompute_to_json(p.recompute)}});
      }
      out["pareto"] = std::move(front);
      std::cout << json_text(out, 2) << "\n";
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
  cmd->app = sub;
  add_plan_options(*sub, cmd->options, true);
  sub->add_option("-o,--output", cmd->output, "write the plan (task graph JSON)");
  sub->add_flag("--json", cmd->json, "print machine-readable metrics");
  sub->add_flag("--search", cmd->search,
                "search mbs, schedule (auto included), backward, chunks and partition (--schedule "
                "and --backward keep it to one family and mode); print the Pareto front of step "
                "time vs peak memory, write the best plan with -o");
  sub->add_option("--global-batch", cmd->global_batch,
                  "samples per step for --search and --bpipe auto, every replica's (m = global "
                  "batch / (mbs x --data-parallel))")
      ->check(int_range(1, limits::kMaxGlobalBatch));
  sub->add_option("--search-mbs", cmd->search_mbs,
                  "micro-batch sizes --search and --bpipe auto try with --global-batch, e.g. "
                  "1,2,4 (default 1,2,4,8)");
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
