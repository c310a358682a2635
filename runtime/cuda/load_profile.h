// The profiler's measurements under load (profiles/load_measurement.h says what and why): a
// block's ops back to back for a while on the whole GPU or on every emulated stage's green
// context at once (the sustained-load model, with the SM clock sampled), and the same op run at
// once on k = 1..P green contexts in short bursts from a cool GPU (the contention curves).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "profiles/contention.h"
#include "profiles/load_measurement.h"
#include "profiles/profile.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/gpu_plugin.h"
#include "runtime/layer_inputs.h"

namespace pipeplan::cuda {

// What a load run takes beside the profile's options (the model, attention, GEMM answers,
// warm-up and repetitions of each burst, --sustain-seconds, --cooldown-seconds).
struct LoadRun {
  int mbs = 1;
  int seq = 0;
  int stages = 0;  // green contexts of sm_per_stage SMs each; 0: the whole GPU, no curves
  int sm_per_stage = 0;
  std::function<void(const std::string&)> progress;  // one call per finished part; may be empty
};

struct LoadProfileResult {
  std::optional<SustainedMeasurement> sustained;  // with profile.sustain_seconds > 0
  std::optional<Contention> contention;           // with stages > 0: curves, `sustained` set
};

// Throws Error from CUDA failures or a load run too short to fit (fit_sustained_load).
LoadProfileResult measure_load(const GpuProfileOptions& profile, const LoadRun& run);

}  // namespace pipeplan::cuda
