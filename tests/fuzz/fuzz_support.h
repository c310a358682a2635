// What every fuzz target shares: bytes in, a loader's result or a pipeplan::Error out. Any other
// way out is a finding: another exception escapes LLVMFuzzerTestOneInput and aborts, sanitizers
// report on their own, libFuzzer catches hangs and allocations beyond -rss_limit_mb, and an
// InternalError or an Error of more than one line aborts here (bad input must never read as
// pipeplan's fault, and the CLI prints an error as one line).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "planner/base/error.h"

namespace pipeplan::fuzz {

inline std::string_view text_of(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `load` on the input; returns 0 as libFuzzer wants.
template <typename Load>
int run(Load&& load) {
  try {
    load();
  } catch (const InternalError& e) {
    std::fprintf(stderr, "finding: bad input ends in an internal error: %s\n", e.what());
    std::abort();
  } catch (const Error& e) {
    const std::string_view message = e.what();
    if (message.find('\n') != std::string_view::npos) {
      std::fprintf(stderr, "finding: an error of more than one line: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}

}  // namespace pipeplan::fuzz
