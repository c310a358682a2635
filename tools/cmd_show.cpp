#include "tools/commands.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <string_view>
#include <utility>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"
#include "planner/graph/evaluate.h"
#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"
#include "planner/graph/trace.h"
#include "planner/graph/validator.h"
#include "tools/cli_checks.h"
#include "tools/report.h"
#include "tools/timeline.h"

namespace pipeplan {

namespace {

// $COLUMNS when it is a width --width would take (decimal, 1 to limits::kMaxWidth), else the
// terminal's, else 100. A value the shell or another program left there is no option given to
// pipeplan: one out of range or not a number is passed over, not refused.
int terminal_width() {
  if (const char* columns = std::getenv("COLUMNS")) {
    const std::string_view text(columns);
    int w = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), w);
    if (error == std::errc() && end == text.data() + text.size() && w >= 1 &&
        w <= limits::kMaxWidth) {
      return w;
    }
  }
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    return ws.ws_col;
  }
  return 100;
}

struct ShowCommand {
  std::string plan_path;
  std::string trace;
  std::string dot;
  int width = 0;
  bool no_color = false;
  bool json = false;
  int run() const {
    const TaskGraph graph = load_plan(plan_path);
    CheckedSimulation checked = validate_and_simulate(graph);
    if (checked.violation) {
      throw Error(input_name(plan_path) + ": invalid plan: " + checked.violation->message);
    }
    const SimResult sim = std::move(checked.sim);
    // The text first, so that a width it cannot take writes no output file. $COLUMNS or a
    // terminal narrower than the timeline's least width gets that width; --width is refused.
    std::string text;
    if (!json) {
      const int least = timeline_min_width(graph, sim);
      if (width > 0 && width < least) {
        throw Error("--width: " + std::to_string(width) +
                    " is too narrow for this plan's timeline (" + std::to_string(least) +
                    " columns at least)");
      }
      const bool color = !no_color && isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;
      text = render_timeline(graph, sim, width > 0 ? width : std::max(terminal_width(), least),
                             color) +
             render_summary(graph, sim);
    }
    // Both outputs or neither.
    OutputFiles outputs;
    if (!trace.empty()) {
      outputs.add_stream(trace, [&](const OutputFiles::Writer& write) {
        write_perfetto_trace(graph, sim, plan_path, write);
      });
    }
    if (!dot.empty()) {
      std::ostringstream out;
      write_dot(graph, out);
      outputs.add(dot, out.str());
    }
    outputs.commit();
    if (json) {
      std::cout << json_text(metrics_json(graph, sim), 2) << "\n";
      return 0;
    }
    std::cout << text;
    if (!trace.empty()) std::cout << "wrote trace " << trace << " (open in ui.perfetto.dev)\n";
    if (!dot.empty()) std::cout << "wrote " << dot << "\n";
    return 0;
  }
};

}  // namespace

Command add_show_command(CLI::App& app) {
  auto cmd = std::make_shared<ShowCommand>();
  auto* sub = app.add_subcommand("show", "draw a plan's simulated timeline and metrics");
  sub->add_option("plan", cmd->plan_path, "plan JSON (- reads standard input)")->required();
  sub->add_option("--trace", cmd->trace, "write a Chrome/Perfetto trace");
  sub->add_option("--dot", cmd->dot, "write the task graph as Graphviz DOT");
  sub->add_option("--width", cmd->width, "columns (default: the terminal's)")
      ->check(int_range(1, limits::kMaxWidth));
  sub->add_flag("--no-color", cmd->no_color, "no ANSI colours");
  sub->add_flag("--json", cmd->json, "print machine-readable metrics only");
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
