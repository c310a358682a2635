#include <iostream>
#include <memory>

#include "planner/base/error.h"
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
  std::string output;

  // The CSV fixes ranks, chunks and micro-batches; the options may repeat them but not differ.
  static void take(int& option, int from_csv, const std::string& name, const std::string& path) {
    if (option != 0 && option != from_csv)
      throw Error(name + ": " + std::to_string(option) + " differs from " +
                  std::to_string(from_csv) + " in " + path);
    option = from_csv;
  }

  int run() {
    const Schedule schedule = load_torch_csv(csv_path, {join_w});
    if (schedule.stage_count() % schedule.devices != 0)
      throw Error(csv_path + ": " + std::to_string(schedule.stage_count()) + " stages on " +
                  std::to_string(schedule.devices) +
                  " ranks; pipeplan needs the same number of stages per rank");
    PlanOptions o = options;
    take(o.stages, schedule.devices, "--stages", csv_path);
    take(o.microbatches, schedule.microbatches, "--microbatches", csv_path);
    const int chunks = schedule.stage_count() / schedule.devices;
    if (o.chunks != 1 && o.chunks != chunks)
      throw Error("--chunks: " + std::to_string(o.chunks) + " differs from " +
                  std::to_string(chunks) + " in " + csv_path);
    o.chunks = chunks;
    o.schedule = schedule.family;
    o.backward = std::string(to_string(schedule.backward));
    const Plan plan = make_plan_for_schedule(make_request(o), schedule);
    if (!output.empty()) save_plan(plan.graph, output);
    std::cout << short_summary(plan.graph, plan.sim);
    if (!output.empty()) std::cout << "wrote " << output << "\n";
    return 0;
  }
};

}  // namespace

Command add_import_command(CLI::App& app) {
  auto cmd = std::make_shared<ImportCommand>();
  auto* sub = app.add_subcommand(
      "import", "read a torch.distributed.pipelining schedule CSV, validate and simulate it");
  sub->add_option("csv", cmd->csv_path, "per-rank schedule CSV (compute-only form)")->required();
  add_plan_options(*sub, cmd->options, false);
  // Ranks and micro-batches come from the CSV.
  sub->get_option("--stages")->required(false);
  sub->get_option("--microbatches")->required(false);
  sub->add_flag("--join-w", cmd->join_w,
                "run consecutive W cells of one stage as one concatenated p2");
  sub->add_option("-o,--output", cmd->output, "write the plan (task graph JSON)");
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
