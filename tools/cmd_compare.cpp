#include "tools/commands.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/plan/make_plan.h"
#include "profiles/layout.h"
#include "profiles/profile.h"
#include "profiles/recompute.h"
#include "schedules/family.h"
#include "tools/plan_options.h"
#include "tools/report.h"
#include "tools/units.h"

namespace pipeplan {

namespace {

struct CompareCommand {
  PlanOptions options;
  bool json = false;

  struct Row {
    std::string schedule, backward, error;
    int chunks = 1;
    Plan plan;
  };

  // `profile`: the --profile file read once for every row (null: none given).
  std::vector<Row> rows(const std::shared_ptr<const Profile>& profile) const {
    std::vector<Row> out;
    for (const ScheduleFamily* family : schedule_families()) {
      // One row per backward mode the family accepts (its own placement only, for those that
      // place p2 themselves); --chunks where the family takes it, else its preferred count.
      const ChunkRule& chunks = family->traits().chunks;
      for (const BackwardMode mode : family->backward_modes()) {
        Row row;
        row.schedule = family->name();
        row.backward = std::string(to_string(mode));
        PlanOptions o = options;
        o.profile_read = profile;
        o.schedule = family->name();
        o.backward = row.backward;
        // A --layout sets each row's chunks from its stage count (a count the family does not
        // run is refused naming the layout); auto chooses its own (0: the family's).
        if (options.layout.empty()) {
          o.chunks = chunks.max > 1 ? std::clamp(std::max(options.chunks, chunks.preferred),
                                                 chunks.min, chunks.max)
                                    : 0;
        }
        row.chunks = o.chunks > 0 ? o.chunks : default_chunks(*family);
        // A family that places each p2 itself, and a fused backward, which defers none, take no
        // --p2-concat (plan refuses it): their rows are the plans made without it.
        if (!family->takes_p2_concat(mode)) o.p2_concat = PlanOptions{}.p2_concat;
        try {
          row.plan = make_plan(make_request(o));
          row.chunks = row.plan.graph.meta.chunks;
        } catch (const Error& e) {
          row.error = e.what();
        }
        out.push_back(std::move(row));
      }
    }
    return out;
  }

  int run() const {
    if (options.bpipe == "auto") {
      throw Error(
          "--bpipe: compare takes off or on (auto chooses micro-batch sizes for a global batch: "
          "plan --bpipe auto --global-batch N)");
    }
    // Inputs every row shares (model, GPU, profile, costs, sizes, memory, a --layout's split)
    // are checked once: bad ones are one error line and a non-zero exit, not a table of rows
    // that all failed. A --layout of several stages per device is checked as an interleaved
    // plan's (the rows of one chunk per device refuse it, each in its row).
    PlanOptions common = options;
    if (!common.profile.empty() && !common.profile_read)
      common.profile_read = std::make_shared<const Profile>(load_profile(common.profile));
    if (!common.layout.empty()) {
      const int stages = megatron_layout_stages(common.layout);
      if (common.stages > 0 && stages > common.stages && stages % common.stages == 0)
        common.schedule = "interleaved";
    }
    const std::string sequence_note = config_sequence_note(options, make_request(common).profile);
    const auto table = rows(common.profile_read);
    const auto failed = [](const Row& r) { return !r.error.empty(); };
    if (std::all_of(table.begin(), table.end(), failed)) {
      // Not one schedule plans these inputs: one line with each distinct reason, once.
      std::vector<std::string> reasons;
      for (const Row& r : table) {
        if (std::find(reasons.begin(), reasons.end(), r.error) == reasons.end())
          reasons.push_back(r.error);
      }
      // A config.json's own sequence (its max_position_embeddings) said once, where the memory
      // limit is among the reasons.
      const std::string note =
          std::any_of(reasons.begin(), reasons.end(),
                      [](const std::string& r) { return r.starts_with("--memory: "); })
              ? sequence_note
              : "";
      if (reasons.size() == 1) throw Error(reasons.front() + note);
      std::string text = "no schedule plans these inputs: ";
      for (std::size_t i = 0; i < reasons.size() && i < 3; ++i)
        text += (i > 0 ? "; " : "") + reasons[i];
      if (reasons.size() > 3) text += "; and " + std::to_string(reasons.size() - 3) + " more";
      throw Error(text + note);
    }
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
          j["lower_bound_ms"] = r.plan.bound.makespan_us / 1e3;
          j["gap_to_bound"] = gap_to_bound(r.plan.sim.makespan_us, r.plan.bound.makespan_us);
          j["speedup_vs_1f1b_fused"] =
              baseline > 0 ? nlohmann::json(baseline / r.plan.sim.makespan_us) : nullptr;
          j["objective"] = options.objective;
          if (!r.plan.chosen.empty()) j["chosen"] = r.plan.chosen;  // auto's layout and candidate
          // Stages that share one GPU: whether their summed peaks are over its HBM (the text's
          // "over HBM").
          if (!r.plan.graph.meta.contention.empty())
            j["over_hbm"] = over_shared_gpu_hbm(r.plan.graph.meta, r.plan.sim);
        }
        out.push_back(j);
      }
      std::cout << json_text(out, 2) << "\n";
      return 0;
    }
    std::printf("objective: %s (auto minimises the %s, the %s breaks ties)\n",
                options.objective.c_str(),
                options.objective == "steady" ? "largest stage span" : "step time",
                options.objective == "steady" ? "step time" : "largest stage span");
    // Stages on one GPU (emulated): the GPU holds the sum of their peaks (--memory limits each).
    const auto ok =
        std::find_if(table.begin(), table.end(), [](const Row& r) { return r.error.empty(); });
    const bool shared = !ok->plan.graph.meta.contention.empty();
    bool any_over = false;
    // With --recompute, what each row recomputes (auto chooses per row).
    const bool recomputes = !options.recompute.empty() && options.recompute != "none";
    std::printf("%-16s %-9s %11s %8s %8s %14s %7s %8s %7s%s\n", "schedule", "backward", "step ms",
                "bubble", "span bbl", shared ? "peak mem sum" : "peak mem max", "MFU", "speedup",
                "gap", recomputes ? "  recompute" : "");
    for (const Row& r : table) {
      const std::string name =
          r.chunks > 1 ? r.schedule + " V=" + std::to_string(r.chunks) : r.schedule;
      if (!r.error.empty()) {
        std::printf("%-16s %-9s n/a: %s\n", name.c_str(), r.backward.c_str(), r.error.c_str());
        continue;
      }
      const SimResult& s = r.plan.sim;
      const double peak =
          static_cast<double>(shared ? s.shared_gpu_memory_bytes() : s.largest_peak_memory_bytes());
      char mfu[16] = "n/a";
      if (s.mfu > 0) std::snprintf(mfu, sizeof mfu, "%.1f%%", s.mfu * 100);
      char speedup[32] = "n/a";  // no 1f1b fused plan fits: nothing to compare with
      if (baseline > 0) std::snprintf(speedup, sizeof speedup, "%.3fx", baseline / s.makespan_us);
      const std::string recomputed =
          recomputes ? "  " + to_string(r.plan.graph.meta.recompute) : std::string();
      // Stages that together need more than their one GPU: the row cannot run emulated.
      const bool over = over_shared_gpu_hbm(r.plan.graph.meta, s);
      any_over = any_over || over;
      std::printf("%-16s %-9s %11.3f %7.1f%% %7.1f%% %14s %7s %8s %6.1f%%%s%s\n", name.c_str(),
                  r.backward.c_str(), s.makespan_us / 1e3, s.bubble_ratio * 100,
                  s.span_bubble_ratio * 100, format_gib(peak).c_str(), mfu, speedup,
                  100 * gap_to_bound(s.makespan_us, r.plan.bound.makespan_us), recomputed.c_str(),
                  over ? "  over HBM" : "");
    }
    const std::string basis = " " + mfu_basis(ok->plan.graph.meta);
    if (any_over) {
      std::printf(
          "over HBM: the stages' peaks add up to more than the %s's %s: `run --emulate` "
          "cannot hold that plan on one GPU\n",
          ok->plan.graph.meta.gpu.c_str(),
          format_gib(shared_gpu_hbm_bytes(ok->plan.graph.meta)).c_str());
    }
    std::printf(
        "span bbl: bubble of the largest stage span (overlapping iterations).%s speedup: step "
        "time of 1f1b fused / step time (n/a where 1f1b fused does not fit). MFU: PaLM model "
        "FLOPs%s. gap: step time above that row's own lower bound (of its stage layout and "
        "chunks: rows with different layouts have different bounds, so a small gap is not a "
        "short step; docs/design/auto-schedule.md).%s\n",
        shared ? " peak mem sum: the stages' peaks added, what their one GPU holds (each stage's "
                 "allocator keeps its own)."
               : "",
        basis.c_str(),
        recomputes ? " recompute: the blocks of each stage that recompute (none, full or N: the "
                     "first N; auto chooses per row)."
                   : "");
    return 0;
  }
};

}  // namespace

Command add_compare_command(CLI::App& app) {
  auto cmd = std::make_shared<CompareCommand>();
  auto* sub = app.add_subcommand("compare", "every schedule x backward mode on the same inputs");
  add_plan_options(*sub, cmd->options, false);
  sub->get_option("--bpipe")->description("BPipe activation transfers: off, on");
  sub->add_flag("--json", cmd->json, "machine-readable rows");
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
