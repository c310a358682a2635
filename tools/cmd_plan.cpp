#include "tools/commands.h"

#include <iostream>
#include <memory>

#include "planner/planner.h"
#include "tools/plan_options.h"
#include "tools/report.h"

namespace pipeplan {

namespace {

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

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto cmd = std::make_shared<PlanCommand>();
  auto* sub = app.add_subcommand("plan", "plan a schedule, write its task graph");
  add_plan_options(*sub, cmd->options, true);
  sub->add_option("-o,--output", cmd->output, "write the plan (task graph JSON)");
  sub->add_flag("--json", cmd->json, "print machine-readable metrics");
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
