// profile + model + request -> validated, simulated task graph.
#pragma once

#include <string>
#include <vector>

#include "planner/profile.h"
#include "planner/simulator.h"
#include "planner/taskgraph.h"

namespace pipeplan {

struct PlanRequest {
  Profile profile;  // carries the model
  std::string gpu;  // gpus.json key (for the peak FLOP/s)
  double peak_flops_per_device = 0;
  int devices = 0;
  int chunks = 1;
  int microbatches = 0;
  int mbs = 1;
  std::string schedule = "1f1b";
  BackwardMode backward = BackwardMode::fused;
  int p2_concat = 1;                  // 0: all micro-batches of a stage in one call
  double memory_limit_bytes = 0;      // per device; 0 = unlimited
  std::vector<int> layers_per_stage;  // blocks per virtual stage; empty = balanced
};

struct Plan {
  TaskGraph graph;
  SimResult sim;
};

// Throws Error naming the field on bad requests, and on a memory limit the plan exceeds.
Plan make_plan(const PlanRequest& request);

}  // namespace pipeplan
