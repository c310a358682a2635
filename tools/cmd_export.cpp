#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
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

// Why `import --join-w --p2-concat <cap>` does not read a plan's p2 calls back from its CSV as
// planned, or nullopt when it does. Import joins greedily (each p2 takes W cells until the cap),
// so a plan that groups them otherwise (auto may leave separate p2 calls side by side) does not
// come back: named by its first such run of p2 calls of one stage and the calls import reads
// instead, "separate p2 calls of one stage side by side (3P2_0 3P2_1+2+3+4) read back as
// 3P2_0+1+2+3 3P2_4".
std::optional<std::string> p2_not_read_back(const Schedule& planned, const std::string& csv,
                                            int cap) {
  Schedule back;
  try {
    back = schedule_from_torch_csv(csv, "its CSV", {true, cap});
  } catch (const Error& e) {
    return std::string("import refuses ") + e.what();
  }
  const auto same = [](const Action& a, const Action& b) {
    return a.op == b.op && a.stage == b.stage && a.microbatches == b.microbatches;
  };
  for (std::size_t d = 0; d < planned.per_device.size(); ++d) {
    const std::vector<Action>& a = planned.per_device[d];
    const std::vector<Action>& b = back.per_device[d];
    std::size_t i = 0;
    while (i < a.size() && i < b.size() && same(a[i], b[i]))
      ++i;
    if (i == a.size() && i == b.size()) continue;
    if (i == a.size() || i == b.size() || a[i].op != OpType::P2 || b[i].op != OpType::P2) {
      // Not a regrouping of p2 calls (the CSV holds every action as planned): the actions apart.
      const auto at = [i](const std::vector<Action>& row) {
        return i < row.size() ? format_action(row[i]) : std::string("nothing");
      };
      return "import reads " + at(b) + " where device " + std::to_string(d) + " has " + at(a);
    }
    // The run of p2 calls of this stage around the first difference, in each.
    const int stage = a[i].stage;
    const auto p2_of_stage = [stage](const Action& x) {
      return x.op == OpType::P2 && x.stage == stage;
    };
    std::size_t first = i;
    while (first > 0 && p2_of_stage(a[first - 1]))
      --first;
    const auto run = [&](const std::vector<Action>& row) {
      std::string text;
      for (std::size_t k = first; k < row.size() && p2_of_stage(row[k]); ++k)
        text += (text.empty() ? "" : " ") + format_action(row[k]);
      return text;
    };
    return "separate p2 calls of one stage side by side (" + run(a) + ") read back as " + run(b);
  }
  return std::nullopt;
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
    // The CSV and its side file (the split, the p2 groups' bound, and the CSV it goes with),
    // both or neither.
    TorchCsvLayers side = torch_csv_layers(graph.meta.model, graph.meta.stage_layers, csv);
    side.p2_concat = graph.meta.p2_concat;
    OutputFiles outputs;
    outputs.add(output, csv);
    outputs.add(torch_csv_layers_path(output), json_text(torch_csv_layers_to_json(side), 2) + "\n");
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
      if (graph.meta.backward == BackwardMode::twobp_fill) {
        // Its bubble-filling p2s are single ones beside the concatenated rest: --join-w would
        // join those too.
        std::cout << "; 2bp-fill's single p2s between them look alike, so no import reads this "
                     "plan's calls back\n";
      } else if (const auto why_not = p2_not_read_back(graph.schedule, csv, graph.meta.p2_concat)) {
        std::cout << "; " << *why_not << ", so no import reads this plan's calls back\n";
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
