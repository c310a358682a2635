// A CPU stand-in for the parts of the CUDA runtime, driver, cuBLAS and cuBLASLt that runtime/cuda
// calls, so that the GPU tests (tests/runtime/cuda/*.cpp) run in CI, where there is no GPU, on the
// real backend code: its host side, its hand-written kernels (through ../kernels/kernel_sim.h)
// and its GEMMs (fp32 loops here). Linked instead of libcudart, libcublas and libcublasLt.
//
// One device, shaped like an H100 SXM (132 SMs, 80 GiB, compute capability 9.0; its name,
// kDefaultDeviceName, contains "H100" so that the backend picks that gpus.json entry). "Device"
// memory is host memory, so ASan sees every access. Work runs synchronously when it is queued (a
// GPU that is infinitely fast), except device-to-device copies (cudaMemcpyAsync,
// cudaMemcpyBatchAsync): those run only when something must follow them, namely later work on
// their stream, a wait on or a synchronisation with an event recorded after them, a
// synchronisation of their stream or the device, or cudaFree. Both are legal CUDA schedules; the
// second makes a reader on another stream that does not wait for a copy (the transports' copies
// between stages) read stale memory, so the tests check that cross-stream order, not only what the
// backend computes. Times mean nothing.
//
// It enforces the CUDA rules the backend is written against, each a call that fails with an
// error naming the rule (the driver would fail, or silently misbehave):
// - an event is recorded only on a stream of the context the event was created in;
// - a stream waits only on an event already recorded (a GPU takes a wait on an event never
//   recorded and orders nothing: a lost dependency, silently);
// - kernels, copies, memsets and cuBLAS calls go to a stream of the calling thread's current
//   context (the backend pushes a stage's context around every call);
// - a green context is current on at most one thread at a time (driver documentation of
//   cuGreenCtxCreate: "a green context can be current to only one thread at a time");
// - cudaFree and cudaFreeHost take only what cudaMalloc and cudaMallocHost gave.
#pragma once

#include <cstdint>
#include <string>

namespace pipeplan::fake_cuda {

// What the stand-in has counted since the process started (tests read it).
struct Counters {
  std::int64_t launches = 0;     // kernels run through kernel_sim
  std::int64_t gemms = 0;        // cuBLASLt and batched cuBLAS calls
  std::int64_t live_device = 0;  // cudaMalloc'd bytes not yet freed
  std::int64_t rule_errors = 0;  // calls refused for breaking one of the rules above
};
Counters counters();

// The last rule a call broke, in words ("" if none): tests check the message.
std::string last_rule_error();

inline constexpr const char* kDefaultDeviceName = "fake_device: CPU stand-in shaped like an H100";

// The name cudaGetDeviceProperties reports from now on ("" restores the default).
void set_device_name(const std::string& name);

}  // namespace pipeplan::fake_cuda
