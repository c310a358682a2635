// The GPU profiler behind `pipeplan profile --backend cuda`: runs each layer kind of the model
// (embedding, one block, head) on the CUDA backend at each micro-batch size and writes the
// planner's Profile (profiles/profile.h) with measured times and allocator-counted bytes.
#pragma once

#include <string>
#include <vector>

#include "profiles/profile.h"

namespace pipeplan::cuda {

struct CudaProfileOptions {
  ModelConfig model;
  int seq = 0;  // 0: the model's
  std::vector<int> micro_batch_sizes = {1};
  Attention attention = Attention::flash;
  int max_concat = 8;     // p2 over k = 1..max_concat concatenated micro-batches
  int warmup = 3;         // untimed runs before each measurement
  int repetitions = 20;   // timed runs; the profile keeps the median
  int sm_partition = 0;   // > 0: run inside a green context of this many SMs
  std::string command;    // for the provenance
  bool progress = false;  // a progress bar on stderr
};

// Throws Error("no CUDA device found") without a GPU.
Profile measure_profile(const CudaProfileOptions& options);

}  // namespace pipeplan::cuda
