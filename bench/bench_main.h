// The main() body of every benchmark program: the process keeps freed memory for the next plan,
// as the pipeplan binary does (tools/main.cpp, planner/base/memory_reuse.h).
#pragma once

#include <benchmark/benchmark.h>

#include "planner/base/memory_reuse.h"

namespace pipeplan::bench {

inline int run_benchmarks(int argc, char** argv) {
  retain_freed_memory();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace pipeplan::bench
