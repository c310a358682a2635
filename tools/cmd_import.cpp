#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"
#include "planner/plan/make_plan.h"
#include "schedules/torch_csv.h"
#include "tools/commands.h"
#include "tools/plan_options.h"
#include "tools/report.h"

namespace pipeplan {

namespace {

struct ImportCommand {
  std::string csv_path;
  PlanOptions options;
  bool join_w = false;
  const CLI::Option* p2_concat = nullptr;  // given: bounds --join-w's groups
  const CLI::Option* stages = nullptr;
  const CLI::Option* chunks_option = nullptr;
  std::string output;

  // The CSV fixes ranks, chunks and micro-batches; the options may repeat them but not differ.
  static void take(int& option, int from_csv, const std::string& name, const std::string& path) {
    if (option != 0 && option != from_csv)
      throw Error(name + ": " + std::to_string(option) + " differs from " +
                  std::to_string(from_csv) + " in " + path);
    option = from_csv;
  }

  // The split export wrote beside the CSV, for the same model; nullopt (and why) otherwise.
  std::optional<std::vector<int>> side_split(const PlanRequest& r, const Schedule& schedule,
                                             std::string& note) const {
    const auto side = load_torch_csv_layers(csv_path);
    if (!side) return std::nullopt;
    const std::string side_path = torch_csv_layers_path(csv_path).string();
    const ModelConfig& model = r.profile.model;
    if (side->model != model.name) {
      note = side_path + " is for model '" + side->model + "', not '" + model.name + "': " +
             (r.layers_per_stage.empty() ? "balanced split"
              : options.layout.empty()   ? "the split of --layers-per-stage"
                                         : "the split of --layout") +
             "\n";
      return std::nullopt;
    }
    int sum = 0;
    for (const int b : side->blocks_per_stage)
      sum += b;
    if (static_cast<int>(side->blocks_per_stage.size()) != schedule.stage_count() ||
        sum != model.layers) {
      throw Error(side_path + ": field 'blocks_per_stage' gives " +
                  std::to_string(side->blocks_per_stage.size()) + " stages and " +
                  std::to_string(sum) + " blocks; the CSV has " +
                  std::to_string(schedule.stage_count()) + " stages and " + model.name + " " +
                  std::to_string(model.layers) + " blocks");
    }
    std::string list;
    for (const int b : side->blocks_per_stage)
      list += (list.empty() ? "" : ",") + std::to_string(b);
    note = "blocks per stage " + list + " from " + side_path + "\n";
    return side->blocks_per_stage;
  }

  int run() {
    // Standard input ("-") is named "stdin" in every line, as every command names it.
    const std::string csv_name = input_name(csv_path);
    // The CSV's W cells are one micro-batch each: --p2-concat says how many --join-w joins (as a
    // plan made with it groups them), and means nothing without it.
    const bool concat_given = p2_concat != nullptr && p2_concat->count() > 0;
    if (concat_given && !join_w) {
      throw Error(
          "--p2-concat: only with --join-w (it bounds how many consecutive W cells of "
          "a stage one p2 joins)");
    }
    TorchCsvReport report;
    const Schedule schedule =
        load_torch_csv(csv_path, {join_w, concat_given ? options.p2_concat : 0}, &report);
    if (concat_given && schedule.backward == BackwardMode::fused) {
      throw Error("--p2-concat: " + csv_name +
                  " has no W cells (its backward is fused: B cells); leave --p2-concat out");
    }
    if (schedule.stage_count() % schedule.devices != 0)
      throw Error(csv_name + ": " + std::to_string(schedule.stage_count()) + " stages on " +
                  std::to_string(schedule.devices) +
                  " ranks; pipeplan needs the same number of stages per rank");
    // Divisible is not enough: every rank holds stage_count / devices of them (a rank of idle
    // cells holds none, and another then holds more).
    std::vector<int> held(static_cast<std::size_t>(schedule.devices), 0);
    for (const int device : schedule.stage_device)
      ++held[static_cast<std::size_t>(device)];
    // A rank short of its share first: the row of idle cells is the one to name.
    const int per_rank = schedule.stage_count() / schedule.devices;
    std::vector<int> ranks(held.size());
    for (std::size_t r = 0; r < ranks.size(); ++r)
      ranks[r] = static_cast<int>(r);
    std::stable_partition(ranks.begin(), ranks.end(),
                          [&](int r) { return held[static_cast<std::size_t>(r)] < per_rank; });
    for (const int rank : ranks) {
      if (held[static_cast<std::size_t>(rank)] != per_rank) {
        throw Error(csv_name + ": rank " + std::to_string(rank) + " (row " +
                    std::to_string(rank + 1) + ") holds " +
                    std::to_string(held[static_cast<std::size_t>(rank)]) + " of the " +
                    std::to_string(schedule.stage_count()) +
                    " stages; pipeplan needs the same number on every rank (" +
                    std::to_string(per_rank) + ")");
      }
    }
    // The CSV's own counts within the limits, named as the CSV's (not as an option not given).
    if (const int chunks = schedule.stage_count() / schedule.devices; chunks > limits::kMaxChunks) {
      throw Error(csv_name + ": " + std::to_string(schedule.stage_count()) + " stages on " +
                  std::to_string(schedule.devices) + (schedule.devices == 1 ? " rank" : " ranks") +
                  " are " + std::to_string(chunks) + " per rank, above the limit of " +
                  std::to_string(limits::kMaxChunks) + " (docs/reference/limits.md)");
    }
    PlanOptions o = options;
    // A count given is checked as plan checks it, not read as "take the CSV's".
    if (stages != nullptr && stages->count() > 0 && o.stages < 1)
      throw Error("--stages: must be at least 1");
    if (o.microbatches_given && o.microbatches < 1)
      throw Error("--microbatches: must be at least 1");
    take(o.stages, schedule.devices, "--stages", csv_name);
    take(o.microbatches, schedule.microbatches, "--microbatches", csv_name);
    take(o.chunks, schedule.stage_count() / schedule.devices, "--chunks", csv_name);
    PlanRequest request = make_request_for_schedule(o, schedule);
    std::string layers_note;
    if (const auto split = side_split(request, schedule, layers_note)) {
      if (!request.layers_per_stage.empty() && request.layers_per_stage != *split) {
        // The split given: --layout's or --layers-per-stage's (make_request takes one of them).
        const bool by_layout = !options.layout.empty();
        throw Error(std::string(by_layout ? "--layout: '" : "--layers-per-stage: ") +
                    (by_layout ? options.layout + "'" : options.layers_per_stage) +
                    " differs from " + layers_note.substr(0, layers_note.size() - 1));
      }
      request.layers_per_stage = *split;
    }
    // The stage and device counts are the CSV's where no option gave them: an error about them
    // names the file, not an option the command line does not have.
    const Plan plan = [&] {
      try {
        return make_plan_for_schedule(request, schedule);
      } catch (const Error& e) {
        const std::string what = e.what();
        for (const auto& [flag, option] : {std::pair{std::string("--stages: "), stages},
                                           std::pair{std::string("--chunks: "), chunks_option}}) {
          if (what.rfind(flag, 0) == 0 && (option == nullptr || option->count() == 0))
            throw Error(csv_name + ": " + what.substr(flag.size()));
        }
        throw;
      }
    }();
    if (!output.empty()) save_plan(plan.graph, output);
    std::cout << "read " << csv_name << ": " << report.actions << " actions on " << schedule.devices
              << " ranks";
    if (report.cells_in_sequence > 0) {
      std::cout << "; " << report.cells_in_sequence
                << (report.cells_in_sequence == 1 ? " OVERLAP_F_B cell runs its"
                                                  : " OVERLAP_F_B cells run their")
                << " sub-actions in sequence, not overlapped";
    }
    if (report.skipped_total > 0) {
      std::cout << "; skipped " << report.skipped_total << " cells with no task-graph node ("
                << report.skipped_text() << "; docs/reference/torch-csv.md)";
    }
    std::cout << "\n" << layers_note << short_summary(plan.graph, plan.sim);
    if (!output.empty()) std::cout << "wrote " << output << "\n";
    return 0;
  }
};

}  // namespace

Command add_import_command(CLI::App& app) {
  auto cmd = std::make_shared<ImportCommand>();
  auto* sub = app.add_subcommand(
      "import", "read a torch.distributed.pipelining schedule CSV, validate and simulate it");
  sub->add_option("csv", cmd->csv_path,
                  "per-rank schedule CSV: compute-only, or PyTorch's default compute_comms dump "
                  "(its communication, FSDP and wait cells skipped); - reads standard input")
      ->required();
  add_plan_options(*sub, cmd->options, false);
  // Ranks and micro-batches come from the CSV.
  cmd->stages = sub->get_option("--stages")->required(false);
  cmd->chunks_option = sub->get_option("--chunks");
  sub->get_option("--stages")->description("pipeline devices P (default: the CSV's ranks)");
  sub->get_option("--microbatches")
      ->required(false)
      ->description("micro-batches per step m (default: the CSV's)");
  sub->get_option("--bpipe")->description(
      "BPipe activation transfers: off (an imported order runs as written)");
  sub->add_flag("--join-w", cmd->join_w,
                "run consecutive W cells of one stage as one concatenated p2");
  CLI::Option* p2_concat = sub->get_option("--p2-concat");
  cmd->p2_concat = p2_concat;
  p2_concat->description(
      "with --join-w: the most W cells one p2 joins, as --p2-concat grouped them in plan (0 = "
      "all)");
  sub->add_option("-o,--output", cmd->output, "write the plan (task graph JSON)");
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
