#include <iostream>
#include <limits>
#include <memory>

#include "planner/base/io.h"
#include "planner/graph/simulator.h"
#include "planner/graph/validator.h"
#include "runtime/measured.h"
#include "runtime/trace_diff.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"

namespace pipeplan {

namespace {

struct DiffCommand {
  std::string plan_path;
  std::string measured_path;
  int top = 10;
  bool all = false;
  bool json = false;

  int run() const {
    // A plan that cannot run has no prediction to compare (a cycle would fail the simulation
    // without naming the file; a node in no stream order would be left out).
    const TaskGraph plan = load_valid_plan(plan_path);
    const SimResult predicted = simulate(plan);
    std::vector<NodeTime> host_times;
    std::vector<NodeTime> times = read_trace_times(plan, measured_path, &host_times);
    // The trace holds node times only: memory is the plan's, replayed at the measured times.
    SimResult measured = measured_result(plan, std::move(times), {});
    measured.host_times = std::move(host_times);
    const TraceDiff diff = diff_trace(plan, predicted, measured);
    const int shown = all ? -1 : top;
    if (json) {
      std::cout << diff_to_json(diff, shown).dump(2) << "\n";
    } else {
      std::cout << input_name(plan_path) << " (predicted) vs " << input_name(measured_path)
                << " (measured)\n"
                << format_diff(diff, shown);
    }
    return 0;
  }
};

}  // namespace

Command add_diff_command(CLI::App& app) {
  auto cmd = std::make_shared<DiffCommand>();
  auto* sub = app.add_subcommand("diff", "line a plan's predicted ops up with a measured trace");
  sub->add_option("plan", cmd->plan_path, "plan JSON (- reads standard input)")->required();
  sub->add_option("measured", cmd->measured_path, "trace JSON written by `pipeplan run --trace`")
      ->required();
  CLI::Option* top = sub->add_option("--top", cmd->top, "worst ops to show")
                         ->capture_default_str()
                         ->check(int_range(0, std::numeric_limits<int>::max()));
  sub->add_flag("--all", cmd->all, "show every op (not with --top)")->excludes(top);
  sub->add_flag("--json", cmd->json, "print machine-readable results");
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
