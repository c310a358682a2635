#include "tools/cli.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "planner/analytic.h"
#include "planner/error.h"
#include "planner/gpu.h"
#include "planner/io.h"
#include "planner/planner.h"
#include "planner/trace.h"
#include "planner/validator.h"
#include "schedules/registry.h"
#include "tools/plan_options.h"
#include "tools/report.h"
#include "tools/timeline.h"
#include "tools/units.h"

namespace pipeplan {

namespace {

int terminal_width() {
  if (const char* columns = std::getenv("COLUMNS")) {
    const int w = std::atoi(columns);
    if (w > 0) return w;
  }
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    return ws.ws_col;
  }
  return 100;
}

// --- plan -----------------------------------------------------------------------------------

struct PlanCommand {
  PlanOptions options;
  std::string output;
  bool json = false;
  int run() const {
    const Plan plan = make_plan(make_request(options));
    if (!output.empty()) save_plan(plan.graph, output);
    if (json) {
      std::cout << metrics_json(plan.graph, plan.sim).dump(2) << "\n";
    } else {
      std::cout << short_summary(plan.graph, plan.sim);
      if (!output.empty()) std::cout << "wrote " << output << "\n";
    }
    return 0;
  }
};

// --- show -----------------------------------------------------------------------------------

struct ShowCommand {
  std::string plan_path;
  std::string trace;
  std::string dot;
  int width = 0;
  bool no_color = false;
  bool json = false;
  int run() const {
    const TaskGraph graph = load_plan(plan_path);
    validate(graph);
    const SimResult sim = simulate(graph);
    if (!trace.empty()) write_perfetto_trace(graph, sim, trace, plan_path);
    if (!dot.empty()) {
      std::ostringstream out;
      write_dot(graph, out);
      write_file_atomic(dot, out.str());
    }
    if (json) {
      std::cout << metrics_json(graph, sim).dump(2) << "\n";
      return 0;
    }
    const bool color = !no_color && isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;
    std::cout << render_timeline(graph, sim, width > 0 ? width : terminal_width(), color);
    std::cout << render_summary(graph, sim);
    if (!trace.empty()) std::cout << "wrote trace " << trace << " (open in ui.perfetto.dev)\n";
    if (!dot.empty()) std::cout << "wrote " << dot << "\n";
    return 0;
  }
};

// --- validate -------------------------------------------------------------------------------

struct ValidateCommand {
  std::string plan_path;
  int run() const {
    const TaskGraph graph = load_plan(plan_path);
    validate(graph);
    std::cout << plan_path << ": valid (" << graph.node_count() << " nodes, "
              << graph.streams().size() << " streams)\n";
    return 0;
  }
};

// --- compare --------------------------------------------------------------------------------

struct CompareCommand {
  PlanOptions options;
  bool json = false;

  struct Row {
    std::string schedule, backward, error;
    int chunks = 1;
    Plan plan;
  };

  std::vector<Row> rows() const {
    std::vector<Row> out;
    for (const ScheduleFamily& family : schedule_families()) {
      for (const BackwardMode mode :
           {BackwardMode::fused, BackwardMode::twobp, BackwardMode::twobp_fill}) {
        Row row;
        row.schedule = family.name;
        row.backward = std::string(to_string(mode));
        PlanOptions o = options;
        o.schedule = family.name;
        o.backward = row.backward;
        o.chunks = family.uses_chunks ? std::max(options.chunks, 2) : 1;
        row.chunks = o.chunks;
        try {
          row.plan = make_plan(make_request(o));
        } catch (const Error& e) {
          row.error = e.what();
        }
        out.push_back(std::move(row));
      }
    }
    return out;
  }

  int run() const {
    const auto table = rows();
    double baseline = 0;
    for (const Row& r : table) {
      if (r.schedule == "1f1b" && r.backward == "fused" && r.error.empty()) {
        baseline = r.plan.sim.makespan_us;
      }
    }
    if (json) {
      nlohmann::json out = nlohmann::json::array();
      for (const Row& r : table) {
        nlohmann::json j = {
            {"schedule", r.schedule}, {"backward", r.backward}, {"chunks", r.chunks}};
        if (!r.error.empty()) {
          j["error"] = r.error;
        } else {
          j.update(metrics_json(r.plan.graph, r.plan.sim));
          j["speedup_vs_1f1b_fused"] =
              baseline > 0 ? nlohmann::json(baseline / r.plan.sim.makespan_us) : nullptr;
        }
        out.push_back(j);
      }
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    std::printf("%-14s %-9s %11s %8s %14s %7s %8s\n", "schedule", "backward", "step ms", "bubble",
                "peak mem max", "MFU", "speedup");
    for (const Row& r : table) {
      const std::string name =
          r.chunks > 1 ? r.schedule + " V=" + std::to_string(r.chunks) : r.schedule;
      if (!r.error.empty()) {
        std::printf("%-14s %-9s n/a: %s\n", name.c_str(), r.backward.c_str(), r.error.c_str());
        continue;
      }
      const SimResult& s = r.plan.sim;
      const auto peaks = s.peak_memory_bytes();
      const double peak = static_cast<double>(*std::max_element(peaks.begin(), peaks.end()));
      char mfu[16] = "n/a";
      if (s.mfu > 0) std::snprintf(mfu, sizeof mfu, "%.1f%%", s.mfu * 100);
      std::printf("%-14s %-9s %11.3f %7.1f%% %14s %7s %7.3fx\n", name.c_str(), r.backward.c_str(),
                  s.makespan_us / 1e3, s.bubble_ratio * 100, format_gib(peak).c_str(), mfu,
                  baseline > 0 ? baseline / s.makespan_us : 0.0);
    }
    std::printf("speedup: step time of 1f1b fused / step time. MFU: PaLM model FLOPs.\n");
    return 0;
  }
};

// --- profile --------------------------------------------------------------------------------

struct ProfileCommand {
  std::string model;
  std::string gpu = "h100";
  int seq = 0;
  std::string mbs = "1";
  std::string attention = "flash";
  int max_concat = 8;
  bool analytic = false;
  std::string output;
  int run() const {
    if (!analytic) {
      throw Error("profile: measuring needs the CUDA backend, not built yet; use --analytic");
    }
    if (model.empty()) throw Error("--model: required");
    if (max_concat < 1) throw Error("--max-concat: must be at least 1");
    AnalyticOptions options;
    options.seq = seq;
    options.micro_batch_sizes = parse_int_list(mbs, "--mbs");
    options.attention = attention_from_string(attention);
    options.max_p2_concat = max_concat;
    Profile profile = analytic_profile(resolve_model(model), find_gpu(gpu), options);
    std::string command = "pipeplan profile --analytic --model " + model + " --gpu " + gpu +
                          " --mbs " + mbs + " --attention " + attention;
    if (seq > 0) command += " --seq " + std::to_string(seq);
    profile.provenance.command = command;
    if (output.empty()) {
      std::cout << profile_to_json(profile).dump(2) << "\n";
    } else {
      save_profile(profile, output);
      std::cout << "wrote " << output << "\n";
    }
    return 0;
  }
};

}  // namespace

int run_cli(int argc, char** argv) {
  CLI::App app{"pipeplan: plan, simulate and inspect pipeline-parallel schedules (2BP, BPipe)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pipeplan 0.1.0");

  PlanCommand plan;
  auto* plan_app = app.add_subcommand("plan", "plan a schedule, write its task graph");
  add_plan_options(*plan_app, plan.options, true);
  plan_app->add_option("-o,--output", plan.output, "write the plan (task graph JSON)");
  plan_app->add_flag("--json", plan.json, "print machine-readable metrics");

  ShowCommand show;
  auto* show_app = app.add_subcommand("show", "draw a plan's simulated timeline and metrics");
  show_app->add_option("plan", show.plan_path, "plan JSON")->required();
  show_app->add_option("--trace", show.trace, "write a Chrome/Perfetto trace");
  show_app->add_option("--dot", show.dot, "write the task graph as Graphviz DOT");
  show_app->add_option("--width", show.width, "columns (default: the terminal's)");
  show_app->add_flag("--no-color", show.no_color, "no ANSI colours");
  show_app->add_flag("--json", show.json, "print machine-readable metrics only");

  ValidateCommand validate_cmd;
  auto* validate_app = app.add_subcommand("validate", "check a plan's rules");
  validate_app->add_option("plan", validate_cmd.plan_path, "plan JSON")->required();

  CompareCommand compare;
  auto* compare_app =
      app.add_subcommand("compare", "every schedule x backward mode on the same inputs");
  add_plan_options(*compare_app, compare.options, false);
  compare_app->add_flag("--json", compare.json, "machine-readable rows");

  ProfileCommand profile;
  auto* profile_app = app.add_subcommand("profile", "write a profile (analytic without a GPU)");
  profile_app->add_option("--model", profile.model, "model preset or config.json")->required();
  profile_app->add_option("--gpu", profile.gpu, "GPU from gpus.json")->capture_default_str();
  profile_app->add_option("--seq", profile.seq, "sequence length (default: the model's)");
  profile_app->add_option("--mbs", profile.mbs, "micro-batch sizes, e.g. 1,2,4")
      ->capture_default_str();
  profile_app->add_option("--attention", profile.attention, "materialized, recompute, flash")
      ->capture_default_str();
  profile_app->add_option("--max-concat", profile.max_concat, "p2 concatenation entries 1..K")
      ->capture_default_str();
  profile_app->add_flag("--analytic", profile.analytic, "estimate from FLOPs and bandwidth");
  profile_app->add_option("-o,--output", profile.output, "profile JSON to write");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*plan_app) return plan.run();
    if (*show_app) return show.run();
    if (*validate_app) return validate_cmd.run();
    if (*compare_app) return compare.run();
    if (*profile_app) return profile.run();
  } catch (const Error& e) {
    std::cerr << "pipeplan: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "pipeplan: internal error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}

}  // namespace pipeplan
