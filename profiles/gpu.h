// GPU specifications from profiles/gpus.json: dense bf16 peak, HBM, interconnect.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "profiles/link.h"

namespace pipeplan {

struct GpuSpec {
  std::string name;  // canonical key, e.g. "h100-sxm"
  std::string description;
  std::vector<std::string> aliases;  // e.g. "h100"
  double peak_bf16_tflops = 0;       // dense; never the 2:4-sparsity figure
  double hbm_bytes = 0;
  double hbm_bandwidth_GBps = 0;
  double nvlink_bandwidth_GBps = 0;  // per direction, one GPU
  double pcie_bandwidth_GBps = 0;    // per direction
  double p2p_latency_us = 0;         // NCCL p2p latency over NVLink
};

// Directory holding gpus.json and shipped profiles: $PIPEPLAN_DATA_DIR, else the source tree's
// profiles/ folder compiled in.
std::filesystem::path data_dir();
// The GPUs of a gpus.json (docs/reference/gpus-json.md); every error is one line naming
// `source` and the field, values within docs/reference/limits.md.
std::vector<GpuSpec> load_gpus(const std::filesystem::path& gpus_json);
std::vector<GpuSpec> gpus_from_json(const nlohmann::json& json, const std::string& source);
GpuSpec find_gpu(std::string_view name_or_alias);  // throws Error naming the unknown GPU
// The HBM of the gpus.json entry `key`, or 0 when there is none.
double gpu_hbm_bytes(std::string_view key);
// The link between two GPUs of one node: NVLink where the GPU has it, else PCIe (an H100 PCIe
// without bridges), with the GPU's p2p latency.
P2pLink node_link(const GpuSpec& gpu);

}  // namespace pipeplan
