#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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

// A model-less --uniform profile's model name (profiles/analytic.h uniform_profile): the one a
// side file of a --uniform plan names.
constexpr std::string_view kUniformModel = "uniform";

struct ImportCommand {
  std::string csv_path;
  PlanOptions options;
  bool join_w = false;
  const CLI::Option* p2_concat = nullptr;  // given: bounds --join-w's groups
  const CLI::Option* stages = nullptr;
  const CLI::Option* chunks_option = nullptr;
  // What plan reads for --schedule auto (--objective, --auto-copies) or for a schedule that
  // overlaps pairs (--overlap-efficiency): given where the CSV's schedule has no use for them,
  // each is refused as plan refuses it.
  const CLI::Option* objective = nullptr;
  const CLI::Option* auto_copies = nullptr;
  const CLI::Option* overlap_efficiency = nullptr;
  std::string output;

  static bool given(const CLI::Option* option) { return option != nullptr && option->count() > 0; }

  // The CSV fixes ranks, chunks and micro-batches; the options may repeat them but not differ.
  static void take(int& option, int from_csv, const std::string& name, const std::string& path) {
    if (option != 0 && option != from_csv)
      throw Error(name + ": " + std::to_string(option) + " differs from " +
                  std::to_string(from_csv) + " in " + path);
    option = from_csv;
  }

  // "7,9,9,7"
  static std::string list_text(const std::vector<int>& values) {
    std::string list;
    for (const int v : values)
      list += (list.empty() ? "" : ",") + std::to_string(v);
    return list;
  }

  // The split export wrote beside the CSV, for the same model; nullopt (and why) otherwise.
  std::optional<std::vector<int>> side_split(const std::optional<TorchCsvLayers>& side,
                                             const PlanRequest& r, const Schedule& schedule,
                                             std::string& note) const {
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
    // The layers for people say the same as the block counts import uses.
    const StageLayers& last = side->stage_layers.back();
    if (torch_csv_layers(model, side->stage_layers, "").blocks_per_stage !=
            side->blocks_per_stage ||
        last.first_layer + last.layer_count != static_cast<int>(model.layer_list().size())) {
      throw Error(side_path + ": field 'stage_layers' does not split " + model.name + "'s " +
                  std::to_string(model.layer_list().size()) +
                  " layers as field 'blocks_per_stage' splits its blocks (" +
                  list_text(side->blocks_per_stage) + ")");
    }
    note = "blocks per stage " + list_text(side->blocks_per_stage) + " from " + side_path +
           (side->csv ? ""
                      : " (version 1, which records no CSV: not checked against " +
                            input_name(csv_path) + ")") +
           "\n";
    return side->blocks_per_stage;
  }

  // What plan refuses beside a schedule other than auto (PlanCommand::check_modes): the CSV's
  // schedule is given.
  void check_modes(const std::string& csv_name) const {
    for (const auto& [flag, option] :
         {std::pair{"--objective", objective}, std::pair{"--auto-copies", auto_copies}}) {
      if (given(option)) {
        throw Error(std::string(flag) + ": what --schedule auto chooses by; the schedule of " +
                    csv_name + " is given (leave it out)");
      }
    }
  }

  int run() {
    // Standard input ("-") is named "stdin" in every line, as every command names it.
    const std::string csv_name = input_name(csv_path);
    // The CSV's W cells are one micro-batch each: --p2-concat says how many --join-w joins (as a
    // plan made with it groups them), and means nothing without it.
    const bool concat_given = given(p2_concat);
    if (concat_given && !join_w) {
      throw Error(
          "--p2-concat: only with --join-w (it bounds how many consecutive W cells of "
          "a stage one p2 joins)");
    }
    check_modes(csv_name);
    const std::string text = read_text_file(csv_path);
    // The side file, if it was written with this CSV (else refused): the split, and the plan's
    // p2_concat, which bounds --join-w unless --p2-concat is given.
    const std::optional<TorchCsvLayers> side = load_torch_csv_layers(csv_path, text);
    PlanOptions o = options;
    std::string concat_note;
    if (!concat_given && side && side->version >= 2) {
      o.p2_concat = side->p2_concat;
      if (side->p2_concat != 0) {
        concat_note = "p2_concat " + std::to_string(side->p2_concat) + " (the plan's --p2-concat" +
                      (join_w ? ", the most W cells --join-w joins" : "") + ") from " +
                      torch_csv_layers_path(csv_path).string() + "\n";
      }
    }
    TorchCsvReport report;
    const Schedule schedule =
        schedule_from_torch_csv(text, csv_name, {join_w, o.p2_concat}, &report);
    if (schedule.backward == BackwardMode::fused && (concat_given || join_w)) {
      const std::string flag = concat_given ? "--p2-concat" : "--join-w";
      throw Error(flag + ": " + csv_name +
                  " has no W cells (its backward is fused: B cells); leave " + flag + " out");
    }
    if (given(overlap_efficiency)) {
      const auto& rows = schedule.per_device;
      const bool pairs = std::any_of(rows.begin(), rows.end(), [](const std::vector<Action>& row) {
        return std::any_of(row.begin(), row.end(), [](const Action& a) { return a.overlaps_next; });
      });
      if (!pairs) {
        throw Error("--overlap-efficiency: " + csv_name +
                    " overlaps no pair of ops (an OVERLAP_F_B cell of a forward and another "
                    "stage's or micro-batch's backward is one)");
      }
    }
    check_ranks(schedule, csv_name);
    // A count given is checked as plan checks it, not read as "take the CSV's".
    if (given(stages) && o.stages < 1) throw Error("--stages: must be at least 1");
    if (o.microbatches_given && o.microbatches < 1)
      throw Error("--microbatches: must be at least 1");
    take(o.stages, schedule.devices, "--stages", csv_name);
    take(o.microbatches, schedule.microbatches, "--microbatches", csv_name);
    take(o.chunks, schedule.stage_count() / schedule.devices, "--chunks", csv_name);
    // --uniform's blocks: the side file's, where it has them (a --uniform plan of auto holds two
    // blocks per device, which a stage of one chunk may hold both of); else one per stage.
    if (!o.uniform.empty() && side && side->model == kUniformModel) {
      int blocks = 0;
      for (const int b : side->blocks_per_stage)
        blocks += b;
      if (blocks <= limits::kMaxLayers && blocks % schedule.devices == 0)
        o.uniform_blocks_per_device = blocks / schedule.devices;
    }
    PlanRequest request = make_request_for_schedule(o, schedule);
    std::string layers_note;
    if (const auto split = side_split(side, request, schedule, layers_note)) {
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
          if (what.rfind(flag, 0) == 0 && !given(option))
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
    std::cout << "\n" << layers_note << concat_note << short_summary(plan.graph, plan.sim);
    if (!output.empty()) std::cout << "wrote " << output << "\n";
    return 0;
  }

  // Every rank holds the same number of stages, within the limit of chunks: a rank holding none
  // (a blank row, or one of skipped cells alone) is named first, before the counts.
  static void check_ranks(const Schedule& schedule, const std::string& csv_name) {
    const int stages = schedule.stage_count();
    std::vector<int> held(static_cast<std::size_t>(schedule.devices), 0);
    for (const int device : schedule.stage_device)
      ++held[static_cast<std::size_t>(device)];
    const auto short_of = [&](int rank, const std::string& share) {
      return Error(
          csv_name + ": rank " + std::to_string(rank) + " (row " + std::to_string(rank + 1) +
          ") holds " + std::to_string(held[static_cast<std::size_t>(rank)]) + " of the " +
          std::to_string(stages) + " stages; pipeplan needs the same number on every rank" + share);
    };
    if (stages % schedule.devices != 0) {
      for (int rank = 0; rank < schedule.devices; ++rank) {
        if (held[static_cast<std::size_t>(rank)] == 0) throw short_of(rank, "");
      }
      throw Error(csv_name + ": " + std::to_string(stages) + " stages on " +
                  std::to_string(schedule.devices) +
                  " ranks; pipeplan needs the same number of stages per rank");
    }
    // Divisible is not enough: every rank holds stages / devices of them (a rank of idle cells
    // holds none, and another then holds more). A rank short of its share first: the row of idle
    // cells is the one to name.
    const int per_rank = stages / schedule.devices;
    std::vector<int> ranks(held.size());
    for (std::size_t r = 0; r < ranks.size(); ++r)
      ranks[r] = static_cast<int>(r);
    std::stable_partition(ranks.begin(), ranks.end(),
                          [&](int r) { return held[static_cast<std::size_t>(r)] < per_rank; });
    for (const int rank : ranks) {
      if (held[static_cast<std::size_t>(rank)] != per_rank)
        throw short_of(rank, " (" + std::to_string(per_rank) + ")");
    }
    // The CSV's own counts within the limits, named as the CSV's (not as an option not given).
    if (per_rank > limits::kMaxChunks) {
      throw Error(csv_name + ": " + std::to_string(stages) + " stages on " +
                  std::to_string(schedule.devices) + (schedule.devices == 1 ? " rank" : " ranks") +
                  " are " + std::to_string(per_rank) + " per rank, above the limit of " +
                  std::to_string(limits::kMaxChunks) + " (docs/reference/limits.md)");
    }
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
      "all; default: the p2_concat of the CSV's side file, else 0)");
  cmd->objective = sub->get_option("--objective");
  cmd->auto_copies = sub->get_option("--auto-copies");
  cmd->overlap_efficiency = sub->get_option("--overlap-efficiency");
  sub->add_option("-o,--output", cmd->output, "write the plan (task graph JSON)");
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
