#include "tools/commands.h"

#include <iostream>
#include <memory>

#include "planner/base/io.h"
#include "planner/graph/taskgraph.h"
#include "planner/graph/validator.h"
#include "tools/run_command.h"

namespace pipeplan {

namespace {

struct ValidateCommand {
  std::string plan_path;
  int run() const {
    const TaskGraph graph = load_plan(plan_path);
    validate(graph, input_name(plan_path));
    check_message_shapes(graph, input_name(plan_path));  // what `run` would refuse
    std::cout << input_name(plan_path) << ": valid (" << graph.node_count() << " nodes, "
              << graph.streams().size() << " streams)\n";
    return 0;
  }
};

}  // namespace

Command add_validate_command(CLI::App& app) {
  auto cmd = std::make_shared<ValidateCommand>();
  auto* sub = app.add_subcommand("validate", "check a plan's rules");
  sub->add_option("plan", cmd->plan_path, "plan JSON (- reads standard input)")->required();
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
