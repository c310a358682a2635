// The host-side rules of an emulated pipeline (`pipeplan run --backend cuda --emulate P`): P
// stages share one GPU, each in its own green context (runtime/cuda/green_context.h) with an
// equal share of the SMs. Kept free of CUDA so the rules are tested on any machine.
#pragma once

#include <string>
#include <string_view>

#include "planner/graph/taskgraph.h"
#include "profiles/gpu.h"

namespace pipeplan {

// Hopper gives green contexts SMs in multiples of 8, at least 8.
constexpr int kGreenContextSmGranularity = 8;

// The SMs each of `stages` emulated stages gets on a GPU of `total_sms`: total / stages rounded
// down to a multiple of 8 (132 / 4 -> 32, 132 / 3 -> 40). Throws Error naming --emulate when
// that is below 8 SMs or the arguments are not positive.
int emulated_sm_share(int total_sms, int stages);

// --emulate P must name the plan's device count (each plan device becomes one emulated stage)
// and needs the CUDA backend; 0 means "not emulated". Throws Error naming --emulate.
void check_emulate(int emulate, const TaskGraph& plan, std::string_view backend);

// The line every report and trace of an emulated run carries.
inline constexpr std::string_view kEmulatedNote = "emulated on one GPU: HBM and L2 shared";

// The gpus.json entry for a CUDA device name ("NVIDIA H100 80GB HBM3" -> h100-sxm, "NVIDIA
// H100 PCIe" -> h100-pcie, "NVIDIA H200" -> h200, "NVIDIA A100-SXM4-80GB" -> a100-80g). Throws
// Error naming the device when no entry fits (pass `pipeplan run --gpu KEY`).
GpuSpec gpu_for_device_name(std::string_view device_name);

// The GPU a measurement on `device_name` is for: the gpus.json entry `requested` names when it is
// not empty (`--gpu`, which also covers a device the name rules do not know), else
// gpu_for_device_name. Throws Error like find_gpu or gpu_for_device_name.
GpuSpec gpu_for_device(std::string_view device_name, const std::string& requested);

}  // namespace pipeplan
