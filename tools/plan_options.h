// The options shared by `pipeplan plan` and `pipeplan compare`, and how they become a request.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "planner/planner.h"

namespace pipeplan {

struct PlanOptions {
  std::string model;
  std::string gpu = "h100";
  std::string profile;  // a profile file; else analytic (or uniform)
  int stages = 0;
  int microbatches = 0;
  int mbs = 1;
  int seq = 0;
  int chunks = 1;
  std::string schedule = "1f1b";
  std::string backward = "fused";
  int p2_concat = 0;
  std::string memory;  // empty: the GPU's HBM size
  std::string attention = "flash";
  std::string layers_per_stage;
  std::string uniform;
  std::string uniform_mem;
};

// `with_schedule` adds --schedule and --backward (plan) or leaves them out (compare).
void add_plan_options(CLI::App& app, PlanOptions& options, bool with_schedule);
// Throws Error naming the option on bad input.
PlanRequest make_request(const PlanOptions& options);

}  // namespace pipeplan
