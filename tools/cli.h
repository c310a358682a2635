// The `pipeplan` command line: plan, show, validate, compare, profile.
#pragma once

#include <exception>
#include <ostream>

namespace pipeplan {

// Returns the process exit status: 0 on success; 1 on bad input, a usage error (unknown command
// or argument, bad or empty value; tools/cli_checks.h) or a command's refusal; 3 on pipeplan's
// own fault. Every failure prints one line on stderr (report_failure).
int run_cli(int argc, char** argv);

// The line a command that threw `e` prints on `err`, and the exit status it ends with: 1 and
// "pipeplan: error: ..." for an Error (the input's fault); 3 and "pipeplan: internal error: ..."
// for an InternalError or any other exception (a bug of pipeplan's).
int report_failure(const std::exception& e, std::ostream& err);

}  // namespace pipeplan
