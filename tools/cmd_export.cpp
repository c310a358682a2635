#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/graph/taskgraph.h"
#include "planner/graph/validator.h"
#include "profiles/recompute.h"
#include "schedules/torch_csv.h"
#include "tools/commands.h"

namespace pipeplan {

namespace {

// Two separate p2 calls of one stage next to each other on a device (e.g. "0P2_4 0P2_5"), which
// --join-w would join (within --p2-concat), or "" when there are none.
std::string separate_p2_side_by_side(const TaskGraph& graph) {
  const int cap = graph.meta.p2_concat;
  for (std::size_t s = 0; s < graph.streams().size(); ++s) {
    if (graph.streams()[s].role != StreamRole::compute) continue;
    const std::vector<int>& order = graph.stream_order(static_cast<int>(s));
    for (std::size_t i = 0; i + 1 < order.size(); ++i) {
      const Node& a = graph.node(order[i]);
      const Node& b = graph.node(order[i + 1]);
      if (a.op != OpType::P2 || b.op != OpType::P2 || a.stage != b.stage) continue;
      if (cap > 0 && a.microbatches.size() + b.microbatches.size() > static_cast<std::size_t>(cap))
        continue;
      return node_label(a) + " " + node_label(b);
    }
  }
  return "";
}

struct ExportCommand {
  std::string plan_path;
  std::string format = "torch-csv";
  std::string output;
  int run() const {
    if (format != "torch-csv")
      throw Error("--format: unknown export format '" + format + "' (valid: torch-csv)");
    // A plan that cannot run exports nothing (a cycle, an unmatched send, a bad stage, ...).
    const TaskGraph graph = load_valid_plan(plan_path);
    const std::string plan_name = input_name(plan_path);  // "stdin" for "-"
    // What the plan holds but the CSV cannot, named with the plan it came from.
    const std::string csv = [&] {
      try {
        return schedule_to_torch_csv(graph.schedule);
      } catch (const Error& e) {
        throw Error(plan_name + ": " + e.what());
      }
    }();
    int stash_moves = 0;
    for (int id = 0; id < graph.node_count(); ++id) {
      const Node& n = graph.node(id);
      if (n.kind == NodeKind::send && is_stash_move(n.transfer)) ++stash_moves;
    }
    if (stash_moves > 0) {
      std::cerr << "pipeplan: warning: " << plan_name << ": " << stash_moves
                << " BPipe stash transfers (evict/load) are not representable in PyTorch's "
                   "CSV and are left out\n";
    }
    if (graph.meta.recompute.any()) {
      std::cerr << "pipeplan: warning: " << plan_name << ": the plan recomputes "
                << recompute_text(graph.meta.recompute)
                << ", which PyTorch's CSV cannot carry (checkpoint those blocks in the model; "
                   "import with --recompute "
                << to_string(graph.meta.recompute) << " to plan it again)\n";
    }
    if (output.empty()) {
      std::cout << csv;
      return 0;
    }
    // The CSV and its split, both or neither.
    OutputFiles outputs;
    outputs.add(output, csv);
    outputs.add(torch_csv_layers_path(output),
                json_text(torch_csv_layers_to_json(
                              torch_csv_layers(graph.meta.model, graph.meta.stage_layers)),
                          2) +
                    "\n");
    outputs.commit();
    std::cout << "wrote " << output << " (" << graph.schedule.devices << " ranks, "
              << graph.schedule.stage_count() << " stages, " << graph.schedule.microbatches
              << " micro-batches) and its stage-to-layers split "
              << torch_csv_layers_path(output).string() << "\n";
    // PyTorch's cells hold one micro-batch: a concatenated p2 becomes consecutive W cells.
    int largest = 0;
    for (const Node& n : graph.nodes()) {
      if (n.kind == NodeKind::compute && n.op == OpType::P2)
        largest = std::max(largest, static_cast<int>(n.microbatches.size()));
    }
    if (largest > 1) {
      std::cout << "its concatenated p2 calls (up to " << largest
                << " micro-batches) are one W cell per micro-batch";
      const std::string side_by_side = separate_p2_side_by_side(graph);
      if (graph.meta.backward == BackwardMode::twobp_fill) {
        // Its bubble-filling p2s are single ones beside the concatenated rest: --join-w would
        // join those too.
        std::cout << "; 2bp-fill's single p2s between them look alike, so no import reads this "
                     "plan's calls back\n";
      } else if (!side_by_side.empty()) {
        std::cout << "; separate p2 calls of one stage side by side (" << side_by_side
                  << ") look like one, so no import reads this plan's calls back\n";
      } else {
        std::cout << ": `pipeplan import --join-w"
                  << (graph.meta.p2_concat > 0
                          ? " --p2-concat " + std::to_string(graph.meta.p2_concat)
                          : std::string())
                  << "` reads them back as this plan's calls\n";
      }
    }
    return 0;
  }
};

}  // namespace

Command add_export_command(CLI::App& app) {
  auto cmd = std::make_shared<ExportCommand>();
  auto* sub = app.add_subcommand("export", "write a plan's schedule in another tool's format");
  sub->add_option("plan", cmd->plan_path, "plan JSON (- reads standard input)")->required();
  sub->add_option("--format", cmd->format, "torch-csv (torch.distributed.pipelining)")
      ->capture_default_str();
  sub->add_option("-o,--output", cmd->output, "output file (default: stdout)");
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
