#include "tools/cli.h"

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "tools/cli_checks.h"
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

bool has_command(CLI::App& app, const std::string& name) {
  return !app.get_subcommands([&](CLI::App* sub) { return sub->check_name(name); }).empty();
}

std::string command_names(CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    names += (names.empty() ? "" : ", ") + sub->get_name();
  return names;
}

// CLI11's message in one line. An unknown argument is what a user most needs to hear about,
// even when CLI11 reports a missing required option first.
std::string usage_error(CLI::App& app, const CLI::ParseError& e) {
  std::string message = e.what();
  if (e.get_name() != "ExtrasError") {
    const std::vector<std::string> extras = app.remaining(true);
    if (!extras.empty()) {
      message = "unexpected argument" + std::string(extras.size() > 1 ? "s" : "") + ":";
      for (const std::string& extra : extras)
        message += " " + extra;
    }
  }
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  // Integer options take decimal digits only (cli_checks.cpp), so a value CLI11 cannot convert
  // into an integer option's type is one outside its range ("Could not convert: --stages = 1e11").
  if (e.get_name() == "ConversionError") {
    constexpr std::string_view kPrefix = "Could not convert: ";
    const std::size_t equals = message.find(" = ");
    if (message.starts_with(kPrefix) && equals != std::string::npos) {
      const std::string name = message.substr(kPrefix.size(), equals - kPrefix.size());
      const std::string value = message.substr(equals + 3);
      const bool integer =
          !value.empty() && value.find_first_not_of("-0123456789") == std::string::npos;
      return name + ": '" + value + "' is " +
             (integer ? std::string("out of range for this option") : "not a value it takes");
    }
  }
  // A single-valued option given twice: say so in words, not CLI11's count.
  if (e.get_name() == "ArgumentMismatch") {
    constexpr std::string_view kTwice = ": At Most 1 required but received ";
    if (const std::size_t at = message.find(kTwice); at != std::string::npos) {
      return message.substr(0, at) + ": given " + message.substr(at + kTwice.size()) +
             " times; give it once";
    }
  }
  // A bad value names its option and says what is wrong; other usage errors point to --help.
  return e.get_name() == "ValidationError" ? message : message + " (see --help)";
}

// `status`, unless what the command printed did not reach standard output (a full disk, a closed
// pipe): then 1 (or the command's own failure) with one line saying so.
int with_stdout_written(int status) {
  errno = 0;
  std::cout.flush();
  if (std::cout) return status;
  const int error = errno;
  std::cerr << "pipeplan: error: standard output: write failed"
            << (error != 0 ? std::string(": ") + std::strerror(error) : std::string()) << "\n";
  return status != 0 ? status : 1;
}

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
      add_bpipe_command(app),   add_env_command(app),     add_calibrate_command(app),
  };
  refuse_empty_values(app);
  try {
    if (argc > 1 && argv[1][0] != '-' && !has_command(app, argv[1])) {
      throw CLI::ExtrasError(
          "unknown command '" + std::string(argv[1]) + "' (commands: " + command_names(app) + ")",
          CLI::ExitCodes::ExtrasError);
    }
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print on standard output: a write that fails fails them too.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      return with_stdout_written(app.exit(e));
    }
    std::cerr << "pipeplan: error: " << usage_error(app, e) << "\n";
    return 1;  // as every refusal (CLI11's own codes, 105 to 109, would tell nothing more)
  }
  try {
    // No output of the command replaces a file it read or wrote.
    const FileGuard guard;
    for (const Command& command : commands) {
      if (!command.app->parsed()) continue;
      // What it printed reached standard output, or it failed.
      return with_stdout_written(command.run());
    }
  } catch (const std::exception& e) {
    return report_failure(e, std::cerr);
  }
  return 0;
}

int report_failure(const std::exception& e, std::ostream& err) {
  if (const auto* internal = dynamic_cast<const InternalError*>(&e)) {
    err << "pipeplan: internal error: "
        << std::string_view(internal->what()).substr(InternalError::kPrefix.size()) << "\n";
    return 3;
  }
  if (dynamic_cast<const Error*>(&e) != nullptr) {
    err << "pipeplan: error: " << e.what() << "\n";
    return 1;
  }
  err << "pipeplan: internal error: " << e.what() << "\n";
  return 3;
}

}  // namespace pipeplan
