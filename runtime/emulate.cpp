#include "runtime/emulate.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "planner/base/error.h"

namespace pipeplan {

int emulated_sm_share(int total_sms, int stages) {
  if (stages <= 0) throw FieldError("emulate", "must be a positive stage count");
  if (total_sms <= 0) throw FieldError("emulate", "the GPU reports no SMs");
  const int share = total_sms / stages / kGreenContextSmGranularity * kGreenContextSmGranularity;
  if (share < kGreenContextSmGranularity) {
    throw FieldError("emulate", std::to_string(stages) + " stages on " + std::to_string(total_sms) +
                                    " SMs give each stage " + std::to_string(total_sms / stages) +
                                    ", below the green-context minimum of " +
                                    std::to_string(kGreenContextSmGranularity));
  }
  return share;
}

void check_emulate(int emulate, const TaskGraph& plan, std::string_view backend) {
  if (emulate == 0) return;
  if (emulate < 0) throw FieldError("emulate", "must be a positive stage count");
  if (backend != "cuda") {
    throw FieldError(
        "emulate", "needs " + field_name("backend") + " cuda (got '" + std::string(backend) + "')");
  }
  if (emulate != plan.meta.devices) {
    throw FieldError("emulate", std::to_string(emulate) + " stages, but the plan has " +
                                    std::to_string(plan.meta.devices) +
                                    " devices; emulate exactly that many stages on one GPU");
  }
}

GpuSpec gpu_for_device_name(std::string_view device_name) {
  std::string name(device_name);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto has = [&](std::string_view part) { return name.find(part) != std::string::npos; };
  // Variants whose peak, memory or links no entry gives (GH200's 96/144 GB, the NVL parts' lower
  // clocks, the 40 GB A100s, the PCIe A100's lower bandwidth and missing NVLink) are not taken for
  // their neighbours.
  const bool other_variant =
      has("gh200") || has("nvl") || (has("a100") && (has("40gb") || has("pcie")));
  if (other_variant) {
    throw Error("no gpus.json entry for CUDA device '" + std::string(device_name) + "' (pass " +
                field_name("gpu") +
                " with a gpus.json name for its peak FLOP/s, or add an entry for it)");
  }
  if (has("h200")) return find_gpu("h200");
  if (has("h100") && has("pcie")) return find_gpu("h100-pcie");
  if (has("h100")) return find_gpu("h100-sxm");
  if (has("a100")) return find_gpu("a100-80g");
  throw Error("no gpus.json entry for CUDA device '" + std::string(device_name) + "' (pass " +
              field_name("gpu") + " with a gpus.json name for its peak FLOP/s)");
}

GpuSpec gpu_for_device(std::string_view device_name, const std::string& requested) {
  return requested.empty() ? gpu_for_device_name(device_name) : find_gpu(requested);
}

}  // namespace pipeplan
