// The `pipeplan` command line: plan, show, validate, compare, profile.
#pragma once

namespace pipeplan {

// Returns the process exit status: 0 on success, 1 on a pipeplan error (one line on stderr),
// CLI11's code on a usage error (also one line: unknown command or argument, bad or empty
// value; tools/cli_checks.h).
int run_cli(int argc, char** argv);

}  // namespace pipeplan
