#include "runtime/cuda/clock_sampler.h"

#include <dlfcn.h>

#include <array>

#include <cuda_runtime.h>

namespace pipeplan::cuda {

namespace {

// The few NVML entry points used, as the NVML API reference declares them (nvmlReturn_t is an
// int enum, 0 = NVML_SUCCESS; nvmlDevice_t an opaque pointer).
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;                                // NVML_CLOCK_SM
constexpr unsigned long long kSwPowerCap = 0x4ULL;             // ...ClocksEventReasonSwPowerCap
constexpr unsigned long long kHwPowerBrakeSlowdown = 0x80ULL;  // ...ReasonHwPowerBrakeSlowdown
using InitFn = NvmlReturn (*)();
using ShutdownFn = NvmlReturn (*)();
using HandleByBusIdFn = NvmlReturn (*)(const char*, NvmlDevice*);
using ClockInfoFn = NvmlReturn (*)(NvmlDevice, int, unsigned int*);
using ReasonsFn = NvmlReturn (*)(NvmlDevice, unsigned long long*);
using PowerFn = NvmlReturn (*)(NvmlDevice, unsigned int*);

}  // namespace

struct ClockSampler::Library {
  void* handle = nullptr;
  bool initialised = false;
  ShutdownFn shutdown = nullptr;
  ClockInfoFn clock = nullptr;
  ReasonsFn reasons = nullptr;
  PowerFn power = nullptr;
  ~Library() {
    if (initialised && shutdown != nullptr) shutdown();
    if (handle != nullptr) dlclose(handle);
  }
  template <typename Fn>
  Fn symbol(const char* name) const {
    return reinterpret_cast<Fn>(dlsym(handle, name));  // NOLINT: dlsym's documented use
  }
};

ClockSampler::ClockSampler(int cuda_device) : library_(std::make_unique<Library>()) {
  Library& lib = *library_;
  lib.handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib.handle == nullptr) {
    note_ = "clock not sampled: libnvidia-ml.so.1 (the driver's NVML) not found";
    return;
  }
  const auto init = lib.symbol<InitFn>("nvmlInit_v2");
  const auto by_bus = lib.symbol<HandleByBusIdFn>("nvmlDeviceGetHandleByPciBusId_v2");
  lib.shutdown = lib.symbol<ShutdownFn>("nvmlShutdown");
  lib.clock = lib.symbol<ClockInfoFn>("nvmlDeviceGetClockInfo");
  lib.reasons = lib.symbol<ReasonsFn>("nvmlDeviceGetCurrentClocksEventReasons");
  if (lib.reasons == nullptr) {
    lib.reasons = lib.symbol<ReasonsFn>("nvmlDeviceGetCurrentClocksThrottleReasons");
  }
  lib.power = lib.symbol<PowerFn>("nvmlDeviceGetPowerUsage");
  if (init == nullptr || by_bus == nullptr || lib.clock == nullptr) {
    note_ = "clock not sampled: NVML lacks the entry points needed";
    return;
  }
  if (init() != kNvmlSuccess) {
    note_ = "clock not sampled: NVML did not initialise";
    return;
  }
  lib.initialised = true;
  std::array<char, 64> bus{};
  NvmlDevice device = nullptr;
  if (cudaDeviceGetPCIBusId(bus.data(), static_cast<int>(bus.size()), cuda_device) != cudaSuccess) {
    cudaGetLastError();  // not a kernel's error: clear it for the next launch check
    note_ = "clock not sampled: the CUDA device has no PCI bus id";
    return;
  }
  if (by_bus(bus.data(), &device) != kNvmlSuccess) {
    note_ = "clock not sampled: NVML does not know the CUDA device's PCI bus id";
    return;
  }
  device_ = device;
  note_ = "clock sampled through NVML";
}

ClockSampler::~ClockSampler() {
  if (thread_.joinable()) stop();
}

void ClockSampler::start(std::chrono::steady_clock::time_point origin,
                         std::chrono::milliseconds period) {
  if (!available() || thread_.joinable()) return;
  samples_.clear();
  running_ = true;
  thread_ = std::thread([this, origin, period] {
    const Library& lib = *library_;
    auto next = std::chrono::steady_clock::now();
    while (running_) {
      ClockSample s;
      s.t_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin)
                   .count();
      unsigned int mhz = 0, milliwatts = 0;
      unsigned long long reasons = 0;
      if (lib.clock(device_, kNvmlClockSm, &mhz) == kNvmlSuccess) {
        s.sm_mhz = mhz;
        if (lib.reasons != nullptr && lib.reasons(device_, &reasons) == kNvmlSuccess) {
          s.power_capped = (reasons & (kSwPowerCap | kHwPowerBrakeSlowdown)) != 0;
        }
        if (lib.power != nullptr && lib.power(device_, &milliwatts) == kNvmlSuccess) {
          s.power_w = milliwatts / 1000.0;
        }
        samples_.push_back(s);
      }
      next += period;
      std::this_thread::sleep_until(next);
    }
  });
}

std::vector<ClockSample> ClockSampler::stop() {
  running_ = false;
  if (thread_.joinable()) thread_.join();
  return std::move(samples_);
}

}  // namespace pipeplan::cuda
