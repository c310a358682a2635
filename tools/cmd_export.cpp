#include <iostream>
#include <memory>

#include "planner/base/error.h"
#include "planner/graph/taskgraph.h"
#include "schedules/torch_csv.h"
#include "tools/commands.h"

namespace pipeplan {

namespace {

struct ExportCommand {
  std::string plan_path;
  std::string format = "torch-csv";
  std::string output;
  int run() const {
    if (format != "torch-csv")
      throw Error("--format: unknown export format '" + format + "' (valid: torch-csv)");
    const TaskGraph graph = load_plan(plan_path);
    int stash_moves = 0;
    for (int id = 0; id < graph.node_count(); ++id) {
      const Node& n = graph.node(id);
      if (n.kind == NodeKind::send && is_stash_move(n.transfer)) ++stash_moves;
    }
    if (stash_moves > 0) {
      std::cerr << "pipeplan: warning: " << plan_path << ": " << stash_moves
                << " BPipe stash transfers (evict/load) are not representable in PyTorch's "
                   "CSV and are left out\n";
    }
    if (output.empty()) {
      std::cout << schedule_to_torch_csv(graph.schedule);
      return 0;
    }
    // The split first: a CSV is never left without the split it was exported with.
    save_torch_csv_layers(torch_csv_layers(graph.meta.model, graph.meta.stage_layers), output);
    save_torch_csv(graph.schedule, output);
    std::cout << "wrote " << output << " (" << graph.schedule.devices << " ranks, "
              << graph.schedule.stage_count() << " stages, " << graph.schedule.microbatches
              << " micro-batches) and its stage-to-layers split "
              << torch_csv_layers_path(output).string() << "\n";
    return 0;
  }
};

}  // namespace

Command add_export_command(CLI::App& app) {
  auto cmd = std::make_shared<ExportCommand>();
  auto* sub = app.add_subcommand("export", "write a plan's schedule in another tool's format");
  sub->add_option("plan", cmd->plan_path, "plan JSON")->required();
  sub->add_option("--format", cmd->format, "torch-csv (torch.distributed.pipelining)")
      ->capture_default_str();
  sub->add_option("-o,--output", cmd->output, "output file (default: stdout)");
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
