// Shared helpers for planner tests: plans from uniform (paper-style) costs.
#pragma once

#include <string>

#include "planner/plan/make_plan.h"
#include "profiles/analytic.h"

namespace pipeplan::testing {

struct UniformPlan {
  int devices = 4;
  int microbatches = 8;
  int chunks = 1;
  std::string schedule = "1f1b";
  BackwardMode backward = BackwardMode::fused;
  double f = 1, b = 1, w = 1, comm = 0;            // ms
  double mem_f = 1, mem_p1 = -0.5, mem_p2 = -0.5;  // GiB
  int p2_concat = 0;
  double memory_limit_bytes = 0;
};

inline PlanRequest uniform_request(const UniformPlan& u) {
  UniformCosts costs;
  costs.forward_ms = u.f;
  costs.p1_ms = u.b;
  costs.p2_ms = u.w;
  costs.comm_ms = u.comm;
  costs.mem_f_gib = u.mem_f;
  costs.mem_p1_gib = u.mem_p1;
  costs.mem_p2_gib = u.mem_p2;
  PlanRequest r;
  // auto may cut each device's stage in two (a V, interleaved): two blocks per device then.
  const int per_device = u.schedule == "auto" ? 2 * u.chunks : u.chunks;
  r.profile = uniform_profile(costs, u.devices * per_device, per_device);
  r.gpu = "h100-sxm";
  r.devices = u.devices;
  r.chunks = u.chunks;
  r.microbatches = u.microbatches;
  r.schedule = u.schedule;
  r.backward = u.backward;
  r.p2_concat = u.p2_concat;
  r.memory_limit_bytes = u.memory_limit_bytes;
  return r;
}

inline Plan uniform_plan(const UniformPlan& u) {
  return make_plan(uniform_request(u));
}

// 1F1B 2BP on 4 uniform devices with BPipe moving device 0's stashes (P1 frees the whole stash,
// so 2BP retains nothing and BPipe lowers device 0's peak): every kind of transfer appears.
inline Plan uniform_bpipe_plan() {
  PlanRequest r = uniform_request({.devices = 4,
                                   .microbatches = 8,
                                   .backward = BackwardMode::twobp,
                                   .comm = 0.1,
                                   .mem_p1 = -1,
                                   .mem_p2 = 0});
  r.bpipe = BpipeMode::on;
  return make_plan(r);
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace pipeplan::testing
