// `pipeplan calibrate`: what a profile could not measure, fitted from measured runs
// (planner/calibrate/): fit, eval, copy and working-memory. A RUN is a path prefix:
// RUN.plan.json (the plan that ran) and RUN.trace.json (`pipeplan run --trace`), and for eval
// RUN.plan.txt (the plan command, under a "# command:" line) and RUN.run.json (the run report)
// where they are there.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/calibrate/contention_fit.h"
#include "planner/calibrate/profile_edit.h"
#include "planner/calibrate/recorded_run.h"
#include "planner/graph/simulator.h"
#include "planner/graph/validator.h"
#include "planner/plan/make_plan.h"
#include "profiles/model.h"
#include "profiles/partition.h"
#include "runtime/trace_diff.h"
#include "schedules/schedule.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"
#include "tools/plan_options.h"
#include "tools/units.h"

namespace pipeplan {

namespace {

namespace fs = std::filesystem;

constexpr int kMaxMinOps = 1000000;
constexpr double kMaxTimeConstantMs = kMaxTimeConstantUs / 1e3;

// "12.3%", or "-" for NaN.
std::string percent(double fraction, int width) {
  if (std::isnan(fraction)) return printf_text("%*s", width, "-");
  return printf_text("%*.1f%%", width - 1, 100 * fraction);
}

// "+12.3%" from a percentage, or "-" for NaN (no device with a predicted peak).
std::string signed_percent(double pct, int width) {
  if (std::isnan(pct)) return printf_text("%*s", width, "-");
  return printf_text("%+*.1f%%", width - 1, pct);
}

// The same run given twice would count twice: as the same path or two spellings of it, or as a
// trace that is the same file (a link) or a copy of another's (a measured trace's times never
// repeat, so two runs' traces are never the same bytes).
void check_distinct_runs(const std::vector<std::string>& prefixes) {
  std::vector<std::string> seen;
  std::vector<std::optional<std::uintmax_t>> sizes;  // of each run's trace, where it is a file
  for (std::size_t r = 0; r < prefixes.size(); ++r) {
    const std::string& prefix = prefixes[r];
    std::string path = fs::absolute(fs::path(prefix)).lexically_normal().string();
    if (std::find(seen.begin(), seen.end(), path) != seen.end())
      throw Error("RUN: " + prefix + " is given twice");
    const fs::path trace = prefix + ".trace.json";
    std::error_code error;
    std::optional<std::uintmax_t> size;
    if (fs::is_regular_file(trace, error)) size = fs::file_size(trace);
    for (std::size_t i = 0; i < r && size; ++i) {
      const fs::path earlier = prefixes[i] + ".trace.json";
      if (sizes[i] == size && (fs::equivalent(trace, earlier, error) ||
                               read_text_file(trace) == read_text_file(earlier))) {
        throw Error("RUN: " + trace.string() + " is the trace of " + prefixes[i] +
                    " again (a run counts once)");
      }
    }
    seen.push_back(std::move(path));
    sizes.push_back(size);
  }
}

// Whether two paths name one file: the same file under any name or link where both are there,
// else the same path once made absolute and its links resolved.
bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code error;
  if (fs::exists(a, error) && fs::exists(b, error)) {
    const bool same = fs::equivalent(a, b, error);
    if (!error) return same;
  }
  const fs::path x = fs::weakly_canonical(fs::absolute(a), error);
  const fs::path y = error ? fs::path() : fs::weakly_canonical(fs::absolute(b), error);
  if (error) return fs::absolute(a).lexically_normal() == fs::absolute(b).lexically_normal();
  return x == y;
}

// The files a recorded run keeps (recorded_run.h), each with what it is.
constexpr std::pair<std::string_view, std::string_view> kRunFiles[] = {
    {".plan.json", "plan"},
    {".trace.json", "trace"},
    {".plan.txt", "plan command's output"},
    {".run.json", "run report"}};

// `fit -o` onto the profile it reads or onto a file of a run given would replace an input: one
// the fit reads, or one a later `calibrate eval` of the run does.
void check_output_of_fit(const std::string& output, const std::string& profile_path,
                         const std::vector<std::string>& runs) {
  if (output == "-") return;  // not a file: check_output refuses it
  if (profile_path != "-" && same_file(output, profile_path)) {
    throw Error(output +
                ": cannot write: it is the --profile the runs are fitted with (-o names "
                "a new profile)");
  }
  for (const std::string& prefix : runs) {
    for (const auto& [suffix, what] : kRunFiles) {
      if (same_file(output, prefix + std::string(suffix))) {
        throw Error(output + ": cannot write: it is the " + std::string(what) + " of run " +
                    prefix + " (" + prefix + std::string(suffix) + "; -o names a new profile)");
      }
    }
  }
}

// A recorded run's plan against the profile it is fitted or evaluated with: planned for the
// profile's model shape (its name aside: a model from a config.json is named after where it was
// read), GPU and sequence length, or one line naming the plan's field that differs.
void check_run_of_profile(const TaskGraph& plan, const std::string& plan_path,
                          const Profile& profile, const std::string& profile_path) {
  const auto differs = [&](const std::string& field, const std::string& planned,
                           const std::string& profiled) {
    throw Error(plan_path + ": field 'meta." + field + "' is '" + planned + "', but " +
                profile_path + " is for '" + profiled +
                "' (give the profile the run was planned from)");
  };
  const auto text = [](const nlohmann::json& value) {
    return value.is_string() ? value.get<std::string>() : value.dump();
  };
  nlohmann::json planned = model_to_json(plan.meta.model);
  nlohmann::json profiled = model_to_json(profile.model);
  planned.erase("name");
  profiled.erase("name");
  for (const auto& [key, value] : planned.items()) {
    const auto other = profiled.find(key);
    if (other == profiled.end()) {
      differs("model." + key, text(value), "no " + key);
    } else if (*other != value) {
      differs("model." + key, text(value), text(*other));
    }
  }
  for (const auto& [key, value] : profiled.items()) {
    if (!planned.contains(key)) differs("model." + key, "absent", text(value));
  }
  if (plan.meta.gpu != profile.gpu) differs("gpu", plan.meta.gpu, profile.gpu);
  if (plan.meta.seq != profile.seq) {
    differs("seq", std::to_string(plan.meta.seq), std::to_string(profile.seq));
  }
}

// A recorded run's forward times against `profile`'s: the fit takes each node's planned time as
// its profiled time and writes the model into `profile`, so the runs must have been planned from
// its times (a calibrated copy of it keeps them), or one line naming the first stage that differs.
void check_planned_from(const TaskGraph& plan, const std::string& plan_path, const Profile& profile,
                        const std::string& profile_path) {
  const PlanMeta& meta = plan.meta;
  // A profile without the run's micro-batch size has no time to compare (the profiler is given
  // its sizes): named with the file, as plan names it.
  if (const std::string missing = profile.missing_cost(meta.model, meta.mbs); !missing.empty()) {
    throw Error(profile_path + ": " + missing + ", the meta.mbs of " + plan_path +
                " (fit the runs with the profile they were planned from)");
  }
  const std::vector<StageCost> costs =
      stage_costs(meta.model, profile, meta.mbs, Partition{meta.stage_layers}, 1, meta.recompute);
  for (const Node& node : plan.nodes()) {
    if (node.kind != NodeKind::compute || node.op != OpType::F) continue;
    const double profiled = costs.at(static_cast<std::size_t>(node.stage)).forward_us;
    if (std::abs(node.duration_us - profiled) > 1e-6 * std::max(1.0, profiled)) {
      throw Error(printf_text(
          "%s: stage %d's forward takes %.1f us in the plan but %.1f us by %s (fit the runs with "
          "the profile they were planned from)",
          plan_path.c_str(), node.stage, node.duration_us, profiled, profile_path.c_str()));
    }
  }
}

// Where a schedule made again differs from the one that ran: its family, backward mode or shape,
// or the first device and position whose action differs; "" when none does.
std::string schedule_differs(const Schedule& ran, const Schedule& again) {
  const auto both = [](const std::string& field, const std::string& a, const std::string& b) {
    return field + " (" + a + " ran, " + b + " now)";
  };
  if (ran.family != again.family) return both("schedule family", ran.family, again.family);
  if (ran.backward != again.backward) {
    return both("schedule backward", std::string(to_string(ran.backward)),
                std::string(to_string(again.backward)));
  }
  if (ran.devices != again.devices) {
    return both("schedule devices", std::to_string(ran.devices), std::to_string(again.devices));
  }
  if (ran.microbatches != again.microbatches) {
    return both("schedule microbatches", std::to_string(ran.microbatches),
                std::to_string(again.microbatches));
  }
  if (ran.replicas != again.replicas) {
    return both("schedule replicas", std::to_string(ran.replicas), std::to_string(again.replicas));
  }
  if (ran.stage_device != again.stage_device) return "schedule stage_device";
  const auto text = [](const Action& action) {
    return format_action(action) + (action.overlaps_next ? " overlapping the next" : "");
  };
  const std::size_t devices = std::min(ran.per_device.size(), again.per_device.size());
  for (std::size_t d = 0; d < devices; ++d) {
    const std::vector<Action>& a = ran.per_device[d];
    const std::vector<Action>& b = again.per_device[d];
    const std::string device = "device " + std::to_string(d);
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      if (!(a[i] == b[i]))
        return both(device + "'s action " + std::to_string(i), text(a[i]), text(b[i]));
    }
    if (a.size() != b.size()) {
      return both(device + "'s actions", std::to_string(a.size()), std::to_string(b.size()));
    }
  }
  if (ran.per_device.size() != again.per_device.size()) return "schedule per-device lists";
  return "";
}

// Where a plan made again differs from the one that ran, in the fields that decide what ran (its
// stages' layers, micro-batch size, recomputation and every node but its times and bytes): the
// field or node, or "" when none does.
std::string what_differs(const TaskGraph& ran, const TaskGraph& again) {
  const PlanMeta& a = ran.meta;
  const PlanMeta& b = again.meta;
  if (a.mbs != b.mbs) return "meta.mbs";
  if (a.stage_layers.size() != b.stage_layers.size()) return "meta.stage_layers";
  for (std::size_t s = 0; s < a.stage_layers.size(); ++s) {
    if (a.stage_layers[s].first_layer != b.stage_layers[s].first_layer ||
        a.stage_layers[s].layer_count != b.stage_layers[s].layer_count)
      return "meta.stage_layers[" + std::to_string(s) + "]";
  }
  if (!(a.recompute == b.recompute)) return "meta.recompute";
  if (ran.node_count() != again.node_count()) {
    return "nodes (" + std::to_string(ran.node_count()) + " ran, " +
           std::to_string(again.node_count()) + " now)";
  }
  for (int id = 0; id < ran.node_count(); ++id) {
    const Node& x = ran.node(id);
    const Node& y = again.node(id);
    if (x.kind != y.kind || x.op != y.op || x.transfer != y.transfer || x.device != y.device ||
        x.stream != y.stream || x.stage != y.stage || !(x.microbatches == y.microbatches) ||
        x.overlaps_next != y.overlaps_next || x.peer != y.peer || x.match != y.match)
      return "node " + std::to_string(id) + " (" + node_label(x) + " ran, " + node_label(y) +
             " now)";
  }
  return "";
}

std::vector<MeasuredRun> load_runs(const std::vector<std::string>& prefixes) {
  check_distinct_runs(prefixes);
  const std::vector<std::string> labels = run_labels(prefixes);
  std::vector<MeasuredRun> runs;
  runs.reserve(prefixes.size());
  for (std::size_t i = 0; i < prefixes.size(); ++i) {
    MeasuredRun run;
    run.name = labels[i];
    run.plan = load_valid_plan(prefixes[i] + ".plan.json");
    const std::string trace = prefixes[i] + ".trace.json";
    run.times = read_trace_times(run.plan, trace);
    runs.push_back(std::move(run));
  }
  return runs;
}

// A line of progress on stderr: when it is a terminal, or asked for.
std::function<void(const std::string&)> progress_sink(bool asked) {
  if (!asked && isatty(STDERR_FILENO) == 0) return {};
  return [](const std::string& line) { std::cerr << "calibrate: " << line << "\n"; };
}

struct FitCommand {
  std::string profile_path;
  std::string output;
  std::vector<std::string> runs;
  bool copy_only = false;
  bool sustained = false;
  bool overlap = false;
  int min_ops = 20;
  double min_factor = 0;
  double max_factor = 2;
  std::vector<double> time_constants_ms = {10,  20,  30,  50,   70,   100,  150,  200,
                                           300, 500, 700, 1000, 1500, 2000, 3000, 5000};
  bool progress = false;
  std::string
      sustained_grid_flag;  // the first of --min-factor, --max-factor, --time-constants-ms given

  void check_options() const {
    if (sustained && copy_only)
      throw Error("--copy-only: keeps the compute curves, which --sustained fits (give one)");
    if (!sustained && !sustained_grid_flag.empty()) {
      throw Error(sustained_grid_flag + ": only with --sustained (the grid its fit tries)");
    }
    if (min_factor < 0) throw Error("--min-factor: must be at least 0");
    if (max_factor < min_factor) {
      throw Error(printf_text("--max-factor: %g is below --min-factor %g", max_factor, min_factor));
    }
    for (const double ms : time_constants_ms) {
      if (!(ms > 0) || ms > kMaxTimeConstantMs) {
        throw Error(
            printf_text("--time-constants-ms: %g is not in (0, %g]", ms, kMaxTimeConstantMs));
      }
    }
  }

  int run() const {
    check_options();
    check_output_of_fit(output, profile_path, runs);
    Profile profile = load_profile(profile_path);
    if (copy_only && profile.contention.empty()) {
      // A sustained term alone (separate GPUs) has a contention object but no curve to keep.
      throw Error(profile_path + ": field '" +
                  (profile.contention.has_model() ? "contention.slowdown" : "contention") +
                  "' is missing (--copy-only keeps its compute curves)");
    }
    const std::vector<MeasuredRun> measured = load_runs(runs);
    for (std::size_t i = 0; i < runs.size(); ++i) {
      check_run_of_profile(measured[i].plan, runs[i] + ".plan.json", profile, profile_path);
      check_planned_from(measured[i].plan, runs[i] + ".plan.json", profile, profile_path);
    }
    check_output(output);
    const double given_overlap = profile.overlap.efficiency;
    std::optional<OverlapFit> pairs;  // before the longer fit: a run without pairs fails first
    if (overlap) pairs = fit_overlap(measured);
    ContentionFitOptions options;
    options.min_ops = min_ops;
    options.copy_only = copy_only;
    options.sustained = sustained;
    options.min_factor = min_factor;
    options.max_factor = max_factor;
    options.time_constants_us.clear();
    for (const double ms : time_constants_ms)
      options.time_constants_us.push_back(ms * 1e3);
    if (pairs) options.overlap = OverlapModel{pairs->efficiency, ""};  // the step after the fit
    const ContentionFit fit =
        fit_contention(measured, profile.contention, options, progress_sink(progress));

    std::string names;
    for (const MeasuredRun& run : measured)
      names += (names.empty() ? "" : ", ") + run.name;
    const std::string source = "fitted by pipeplan calibrate fit from " +
                               std::to_string(measured.size()) + " measured run(s) (" + names +
                               ") on " + measured.front().plan.meta.gpu;
    const std::string given_source = profile.contention.source;
    profile.contention = fit.contention;
    profile.contention.source =
        copy_only ? given_source + (given_source.empty() ? "copy " : "; copy ") + source : source;
    if (fit.copy_kept) {
      profile.contention.source +=
          "; copy factors kept from " + fs::path(profile_path).filename().string();
    }
    std::string listed;
    for (const std::string& prefix : runs)
      listed += (listed.empty() ? "" : ", ") + prefix;
    add_provenance_note(profile, std::string(copy_only ? "Copy factors" : "Contention") +
                                     (pairs ? " and overlap efficiency" : "") +
                                     " fitted by pipeplan calibrate fit on " +
                                     std::to_string(runs.size()) + " measured run(s): " + listed +
                                     ".");
    if (pairs) {
      profile.overlap = {pairs->efficiency,
                         source + ": the median over " + std::to_string(pairs->pairs) +
                             " overlapped pairs of each pair's efficiency beside its ops run "
                             "alone"};
    }
    save_profile(profile, output);
    if (pairs) {
      std::cout << printf_text(
          "overlap efficiency of overlapped pairs: %.2f -> %.2f (the median over %d pairs whose "
          "ops also ran alone)\n",
          given_overlap, pairs->efficiency, pairs->pairs);
    }
    print(fit);
    std::cout << "wrote " << output << "\n";
    return 0;
  }

  void print(const ContentionFit& fit) const {
    const Contention& c = fit.contention;
    if (!copy_only) {
      if (c.sustained) {
        std::cout << printf_text(
            "sustained load: x (1 + %.2f H), H the share of devices computing over %g ms, %s "
            "(the curves below are at H = 0)\n",
            c.sustained->factor, c.sustained->time_constant_us / 1e3,
            fit.sustained_kept    ? "kept from the profile"
            : fit.sustained_fixed ? "fixed"
                                  : "fitted");
      }
      std::cout << "slowdown by compute ops running at once (1 = alone):\n";
      const auto curve_line = [](const std::string& name, const std::vector<double>& curve) {
        std::string line = printf_text("  %-4s", name.c_str());
        for (std::size_t k = 0; k < curve.size(); ++k)
          line += printf_text(" %zu: %.3f", k + 1, curve[k]);
        return line + "\n";
      };
      std::cout << curve_line("all", c.slowdown);
      for (const auto& [op, curve] : c.by_op)
        std::cout << curve_line(op, curve);
    }
    std::size_t width = 28;
    for (const RunFitReport& r : fit.runs)
      width = std::max(width, r.name.size());
    const int w = static_cast<int>(width);
    if (!copy_only) {
      std::cout << printf_text("%-*s %5s %16s %8s\n", w, "run", "ops", "op error before", "after");
      for (const RunFitReport& r : fit.runs) {
        std::cout << printf_text("%-*s %5d %s %s\n", w, r.name.c_str(), r.ops,
                                 percent(r.op_error_before, 16).c_str(),
                                 percent(r.op_error_after, 8).c_str());
      }
    }
    if (!fit.copy_fitted) {
      const std::string why = !fit.copy_note.empty()
                                  ? fit.copy_note
                                  : "too few to fit (or too few beside / away from the sender's "
                                    "compute)";
      std::cout << "copies: " << why
                << (fit.copy_kept
                        ? printf_text("; kept from the profile: %.3f x link time with the sender "
                                      "idle, %.3f x beside its compute",
                                      c.copy->sender_idle, c.copy->sender_computing)
                        : std::string("; no copy factors"))
                << "\n";
    } else {
      std::cout << printf_text(
          "copies between stages: %.3f x link time with the sender idle, %.3f x beside its "
          "compute\n",
          c.copy->sender_idle, c.copy->sender_computing);
      std::cout << printf_text("%-*s %5s %18s %8s\n", w, "run", "sends", "copy error before",
                               "after");
      for (const RunFitReport& r : fit.runs) {
        std::cout << printf_text("%-*s %5d %s %s\n", w, r.name.c_str(), r.sends,
                                 percent(r.copy_error_before, 18).c_str(),
                                 percent(r.copy_error_after, 8).c_str());
      }
    }
    std::cout << "step time, the recorded plans simulated (before: as planned; after: the fit):\n"
              << printf_text("%-*s %12s %10s %8s %10s %8s\n", w, "run", "measured ms", "before ms",
                             "error", "after ms", "error");
    for (const RunFitReport& r : fit.runs) {
      std::cout << printf_text("%-*s %12.3f %10.3f %+7.1f%% %10.3f %+7.1f%%\n", w, r.name.c_str(),
                               r.measured_makespan_us / 1e3, r.predicted_before_us / 1e3,
                               100 * (r.measured_makespan_us / r.predicted_before_us - 1),
                               r.predicted_after_us / 1e3,
                               100 * (r.measured_makespan_us / r.predicted_after_us - 1));
    }
    if (const std::string warning = worse_steps_warning(fit.runs); !warning.empty())
      std::cerr << "pipeplan: warning: " << warning << "\n";
  }
};

// The recorded plan command of a run, made again in this process with `profile_path`: its
// --profile replaced and its output dropped. A plan the memory limit refuses under the new
// model is made without the limit (`over_memory`).
Plan replan(const std::string& prefix, const std::string& profile_path, bool& over_memory) {
  const std::string source = prefix + ".plan.txt";
  std::vector<std::string> words = recorded_command(read_text_file(source), source);
  if (words.size() < 2 || words[1] != "plan")
    throw Error(source + ": the recorded command is not 'pipeplan plan'");
  // bench/gpu/run.sh writes its output folder as "{out}": the folder the run lies in.
  std::string folder = fs::path(prefix).parent_path().string();
  if (folder.empty()) folder = ".";
  for (std::string& word : words) {
    for (std::size_t at = word.find("{out}"); at != std::string::npos;
         at = word.find("{out}", at + folder.size()))
      word.replace(at, 5, folder);
  }
  CLI::App app{"plan"};
  PlanOptions options;
  std::string output;
  std::string search_mbs;
  bool json = false;
  bool search = false;
  int global_batch = 0;
  add_plan_options(app, options, true);
  app.add_option("-o,--output", output);
  app.add_option("--search-mbs", search_mbs);
  app.add_option("--global-batch", global_batch);
  app.add_flag("--json", json);
  app.add_flag("--search", search);
  std::vector<std::string> args(words.rbegin(), words.rend() - 2);  // CLI11 takes them reversed
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    throw Error(source + ": the recorded command does not parse (" + e.what() + ")");
  }
  if (options.profile.empty()) throw Error(source + ": the recorded command has no --profile");
  if (search || options.bpipe == "auto") {
    throw Error(source +
                ": a --search or --bpipe auto command is not re-planned (give --resimulate)");
  }
  options.profile = profile_path;
  try {
    try {
      return make_plan(make_request(options));
    } catch (const FieldError& e) {
      if (e.field() != "memory_limit_bytes") throw;
      over_memory = true;
      options.memory = "0";
      options.reserve.clear();  // nothing is kept back from no limit
      return make_plan(make_request(options));
    }
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    throw Error(source + ": re-planning failed: " + e.what());
  }
}

struct EvalCommand {
  std::string profile_path;
  std::vector<std::string> runs;
  bool resimulate = false;
  bool progress = false;

  int run() const {
    const Profile profile = load_profile(profile_path);
    check_distinct_runs(runs);
    const std::vector<std::string> labels = run_labels(runs);
    const auto report = progress_sink(progress);
    std::size_t width = 28;
    for (const std::string& label : labels)
      width = std::max(width, label.size());
    const int w = static_cast<int>(width);
    // The table is printed once every run is read and predicted: a bad input is one line.
    std::string table =
        printf_text("%-*s %12s %10s %8s %10s %8s %14s %8s\n", w, "run", "measured ms", "before ms",
                    "error", "after ms", "error", "memory before", "after");
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const std::string& prefix = runs[i];
      if (report) report(printf_text("%s (%zu of %zu)", labels[i].c_str(), i + 1, runs.size()));
      const TaskGraph recorded = load_valid_plan(prefix + ".plan.json");
      check_run_of_profile(recorded, prefix + ".plan.json", profile, profile_path);
      const std::string trace = prefix + ".trace.json";
      const std::vector<NodeTime> times = read_trace_times(recorded, trace);
      const double measured = measured_makespan(recorded, times);
      const SimResult before = simulate(recorded);
      SimResult after;
      bool over_memory = false;
      const bool replanned = !resimulate && fs::exists(prefix + ".plan.txt");
      if (replanned) {
        Plan plan = replan(prefix, profile_path, over_memory);
        if (!(plan.graph.schedule == recorded.schedule)) {
          const std::string field = schedule_differs(recorded.schedule, plan.graph.schedule);
          throw Error(prefix + ".plan.txt: the re-planned schedule is not the one that ran (" +
                      (field.empty() ? "schedule" : field) +
                      "); give --resimulate to simulate the recorded plan");
        }
        if (const std::string field = what_differs(recorded, plan.graph); !field.empty()) {
          throw Error(prefix + ".plan.txt: re-planned with " + profile_path +
                      ", the plan is not the one that ran (" + field +
                      "); give --resimulate to simulate the recorded plan");
        }
        after = std::move(plan.sim);
      } else {
        TaskGraph again = recorded;
        again.meta.contention = profile.contention;
        again.meta.overlap = profile.overlap;
        after = simulate(again);
      }
      std::string memory = printf_text("%14s %8s", "-", "-");
      if (fs::exists(prefix + ".run.json")) {
        const std::string path = prefix + ".run.json";
        const RecordedPeaks peaks =
            recorded_peaks(read_text_file(path), path, recorded.meta.devices);
        const std::vector<std::int64_t> predicted =
            peaks.predicted_bytes.empty() ? before.peak_memory_bytes() : peaks.predicted_bytes;
        memory = signed_percent(worst_memory_error_pct(predicted, peaks.measured_bytes), 14) + " " +
                 signed_percent(
                     worst_memory_error_pct(after.peak_memory_bytes(), peaks.measured_bytes), 8);
      }
      table += printf_text("%-*s %12.3f %10.3f %+7.1f%% %10.3f %+7.1f%% %s%s%s\n", w,
                           labels[i].c_str(), measured / 1e3, before.makespan_us / 1e3,
                           100 * (measured / before.makespan_us - 1), after.makespan_us / 1e3,
                           100 * (measured / after.makespan_us - 1), memory.c_str(),
                           replanned ? "" : " (re-simulated)", over_memory ? " over --memory" : "");
    }
    std::cout << table;
    return 0;
  }
};

struct CopyCommand {
  std::string from;
  std::string profile_path;
  std::string output;
  int run() const {
    const Profile source = load_profile(from);
    const Profile profile = load_profile(profile_path);
    check_output(output);
    save_profile(with_contention_of(profile, profile_path, source, from), output);
    std::cout << "contention of " << from << " into " << output << "\n";
    return 0;
  }
};

struct WorkingMemoryCommand {
  std::string from;
  std::string profile_path;
  std::string output;
  int run() const {
    const nlohmann::json measured_json = read_json_file(from);
    const Profile measured = profile_from_json(measured_json, from);
    const Profile profile = load_profile(profile_path);
    check_output(output);
    save_profile(with_working_memory_of(profile, profile_path, measured, measured_json, from),
                 output);
    std::cout << "wrote " << output << "\n";
    return 0;
  }
};

struct CalibrateCommand {
  FitCommand fit;
  EvalCommand eval;
  CopyCommand copy;
  WorkingMemoryCommand working_memory;
  CLI::App* fit_app = nullptr;
  CLI::App* eval_app = nullptr;
  CLI::App* copy_app = nullptr;
  int run() const {
    if (fit_app->parsed()) return fit.run();
    if (eval_app->parsed()) return eval.run();
    if (copy_app->parsed()) return copy.run();
    return working_memory.run();
  }
};

}  // namespace

Command add_calibrate_command(CLI::App& app) {
  auto cmd = std::make_shared<CalibrateCommand>();
  auto* sub = app.add_subcommand(
      "calibrate",
      "fit a profile's contention model from measured runs; carry a model or working memory "
      "between profiles");
  sub->require_subcommand(1);

  auto* fit = sub->add_subcommand(
      "fit",
      "fit the contention model from runs (RUN.plan.json + RUN.trace.json), write a profile");
  fit->add_option("--profile", cmd->fit.profile_path, "the profile the runs were planned from")
      ->required();
  fit->add_option("-o,--output", cmd->fit.output, "the profile to write")->required();
  fit->add_flag("--copy-only", cmd->fit.copy_only,
                "keep the profile's compute curves; fit the copy factors alone");
  fit->add_flag("--sustained", cmd->fit.sustained,
                "also fit the sustained-load term: a factor in [--min-factor, --max-factor] by "
                "0.05 and a time constant of --time-constants-ms");
  fit->add_flag("--overlap", cmd->fit.overlap,
                "also fit the overlap efficiency of overlapped pairs (dualpipe-v, dualpipe): the "
                "median, over the runs' pairs whose ops also ran alone, of the efficiency each "
                "pair's measured time gives");
  const auto grid_flag = [cmd](const char* flag) {
    return [cmd, flag](const std::string&) {
      if (cmd->fit.sustained_grid_flag.empty()) cmd->fit.sustained_grid_flag = flag;
    };
  };
  fit->add_option("--min-factor", cmd->fit.min_factor,
                  "--sustained: the smallest sustained-load factor tried")
      ->capture_default_str()
      ->check(finite_range(-1, kMaxSlowdown))
      ->each(grid_flag("--min-factor"));
  fit->add_option("--max-factor", cmd->fit.max_factor,
                  "--sustained: the largest sustained-load factor tried")
      ->capture_default_str()
      ->check(finite_range(-1, kMaxSlowdown))
      ->each(grid_flag("--max-factor"));
  fit->add_option("--time-constants-ms", cmd->fit.time_constants_ms,
                  "--sustained: the time constants tried, ms, comma-separated (default "
                  "10,20,30,50,70,100,150,200,300,500,700,1000,1500,2000,3000,5000)")
      ->delimiter(',')
      ->each(grid_flag("--time-constants-ms"));
  fit->add_option("--min-ops", cmd->fit.min_ops,
                  "ops of one type needed for a curve of its own, and transfers for the copy "
                  "factors")
      ->capture_default_str()
      ->check(int_range(1, kMaxMinOps));
  fit->add_flag("--progress", cmd->fit.progress,
                "report progress on stderr also when it is not a terminal");
  fit->add_option("runs", cmd->fit.runs, "RUN: path prefix of RUN.plan.json and RUN.trace.json")
      ->required();
  cmd->fit_app = fit;

  auto* eval = sub->add_subcommand(
      "eval", "predicted against measured step time and peak memory, before and after");
  eval->add_option("--profile", cmd->eval.profile_path, "the profile to predict with")->required();
  eval->add_flag("--resimulate", cmd->eval.resimulate,
                 "simulate each recorded plan with the profile's contention model instead of "
                 "re-planning its RUN.plan.txt command");
  eval->add_flag("--progress", cmd->eval.progress,
                 "report progress on stderr also when it is not a terminal");
  eval->add_option("runs", cmd->eval.runs,
                   "RUN: RUN.plan.json + RUN.trace.json (+ RUN.plan.txt, RUN.run.json)")
      ->required();
  cmd->eval_app = eval;

  auto* copy = sub->add_subcommand(
      "copy", "a profile with the contention model of another of the same model and SM share");
  copy->add_option("--from", cmd->copy.from, "the profile whose contention to copy")->required();
  copy->add_option("-o,--output", cmd->copy.output, "the profile to write")->required();
  copy->add_option("profile", cmd->copy.profile_path, "the profile to copy it into")->required();
  cmd->copy_app = copy;

  auto* memory = sub->add_subcommand(
      "working-memory", "a profile with the working memory of a measured profile of its model");
  memory->add_option("--from", cmd->working_memory.from, "the measured profile with working memory")
      ->required();
  memory->add_option("-o,--output", cmd->working_memory.output, "the profile to write")->required();
  memory->add_option("profile", cmd->working_memory.profile_path, "the profile to copy it into")
      ->required();
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
