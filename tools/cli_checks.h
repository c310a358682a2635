// Checks of command-line values that CLI11 runs while parsing, so a bad value is one line naming
// the option ("--width: must be at least 1") before any command starts. Request fields are
// checked again by the core (FieldError); these cover what only the command line has: a value
// given but empty (`--memory ''` must not read as "not given"), 0 where 0 means "not given"
// (`--seq 0`), and the CLI's own sizes (planner/base/limits.h: --width, --steps).
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

namespace pipeplan {

// Refuses an empty value. run_cli adds it to every option that takes a value.
const CLI::Validator& non_empty();
// An integer in [lo, hi]: "must be at least <lo>", "<v> is above the limit of <hi>
// (docs/reference/limits.md)". Values that are not integers are left to CLI11's conversion error.
CLI::Validator int_range(std::int64_t lo, std::int64_t hi);
// A finite decimal number above `above` and at most `hi` ("nan", "inf", "0x10", " 8" and, for
// `above` 0, "-1" are refused).
CLI::Validator finite_range(double above, double hi);

// A decimal integer: digits with an optional '-' when `is_signed` ("0x10", "1e3", "-0", and "-1"
// for an unsigned option are refused; CLI11 would read the first as 16 and wrap the last), and
// for an unsigned option at most 2^64 - 1 (CLI11 would read a larger one as that).
CLI::Validator decimal_integer(bool is_signed);
// Adds non_empty() to every option of `app` and of its subcommands that takes a value, and
// decimal_integer() to every integer option.
void refuse_empty_values(CLI::App& app);

}  // namespace pipeplan
