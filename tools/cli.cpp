#include "tools/cli.h"

#include <iostream>

#include <CLI/CLI.hpp>

#include "planner/base/error.h"
#include "tools/commands.h"
#include "tools/fields.h"

namespace pipeplan {

namespace {

// The core's messages name request fields; here they name the flags that set them.
class FlagNames {
 public:
  FlagNames() : previous_(set_field_namer(flag_for_field)) {}
  ~FlagNames() { set_field_namer(previous_); }
  FlagNames(const FlagNames&) = delete;
  FlagNames& operator=(const FlagNames&) = delete;

 private:
  FieldNamer previous_;
};

}  // namespace

int run_cli(int argc, char** argv) {
  const FlagNames flag_names;
  CLI::App app{"pipeplan: plan, simulate and inspect pipeline-parallel schedules (2BP, BPipe)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pipeplan 0.1.0");
  // One line per subcommand (tools/cmd_*.cpp).
  const std::vector<Command> commands = {
      add_plan_command(app),    add_show_command(app),    add_validate_command(app),
      add_compare_command(app), add_profile_command(app), add_export_command(app),
      add_import_command(app),  add_run_command(app),     add_diff_command(app),
      add_bpipe_command(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const Command& command : commands) {
      if (command.app->parsed()) return command.run();
    }
  } catch (const Error& e) {
    std::cerr << "pipeplan: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "pipeplan: internal error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}

}  // namespace pipeplan
