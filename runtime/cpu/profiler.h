// The CPU profiler behind `pipeplan profile --backend cpu`: runs each layer kind of the model
// (embedding, one block, head) on the CPU reference backend (runtime/cpu: one thread, f32) at
// each micro-batch size and writes the planner's Profile with the times measured and the bytes
// the executor counts (stash, retained, parameters, gradients, AdamW moments). A plan made from
// it predicts `pipeplan run --backend cpu` on this machine, so the whole loop (profile, plan,
// run, diff, calibrate) runs where there is no GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiles/profile.h"

namespace pipeplan::cpu {

struct CpuProfileOptions {
  ModelConfig model;
  int seq = 0;  // 0: the model's
  std::vector<int> micro_batch_sizes = {1};
  int max_concat = 8;     // p2 over k = 1..max_concat concatenated micro-batches
  int warmup = 1;         // untimed runs before each measurement
  int repetitions = 20;   // timed runs; the profile keeps the median
  std::string command;    // for the provenance
  bool progress = false;  // a progress bar on stderr
};

// The gpus.json entry CPU profiles name (the planner's nominal peak and memory for them).
inline constexpr const char* kCpuDeviceName = "cpu";

// Throws Error naming the option for a bad one, or a model the CPU backend cannot run.
Profile measure_profile(const CpuProfileOptions& options);
// About the most host memory measure_profile holds at once (one layer's f32 state, its
// activations at the largest micro-batch size, the link probe), before it allocates anything.
// Throws as measure_profile does for a bad option.
std::int64_t estimate_host_bytes(const CpuProfileOptions& options);

// The host's processor as /proc/cpuinfo names it ("" where it does not).
std::string host_cpu_name();

}  // namespace pipeplan::cpu
