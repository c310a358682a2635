// The GPU's SM clock, power-cap state and board power sampled while the profiler loads the GPU
// (profiles/load_measurement.h), through the driver's management library (NVML,
// libnvidia-ml.so.1, loaded with dlopen: no link-time dependency, and a machine without it still
// profiles, without clock samples).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "profiles/load_measurement.h"

namespace pipeplan::cuda {

class ClockSampler {
 public:
  // For CUDA device `cuda_device` (found in NVML by its PCI bus id). Never throws for a missing
  // library or device: available() is false and note() says why.
  explicit ClockSampler(int cuda_device);
  ~ClockSampler();
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& note() const { return note_; }
  // Samples every `period` on a thread of its own from now on; t_us counts from `origin`.
  void start(std::chrono::steady_clock::time_point origin,
             std::chrono::milliseconds period = std::chrono::milliseconds(20));
  // Stops the thread and returns the samples (empty when not available).
  std::vector<ClockSample> stop();

 private:
  struct Library;
  std::unique_ptr<Library> library_;
  void* device_ = nullptr;  // nvmlDevice_t
  std::string note_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::vector<ClockSample> samples_;
};

}  // namespace pipeplan::cuda
