// One function per subcommand: each adds its CLI11 subcommand to `app` and returns the action
// to run when it was chosen. tools/cli.cpp lists them.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace pipeplan {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_plan_command(CLI::App& app);
Command add_show_command(CLI::App& app);
Command add_validate_command(CLI::App& app);
Command add_compare_command(CLI::App& app);
Command add_profile_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_import_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_diff_command(CLI::App& app);
Command add_bpipe_command(CLI::App& app);
Command add_env_command(CLI::App& app);
Command add_calibrate_command(CLI::App& app);
// The NVIDIA kernel module's version in the text of /proc/driver/nvidia/version ("NVRM version:
// NVIDIA UNIX x86_64 Kernel Module  580.95.05  ..."), "" when the text names none.
std::string nvidia_kernel_driver(std::string_view proc_version_text);

}  // namespace pipeplan
