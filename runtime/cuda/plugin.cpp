// The entry point of libpipeplan_cuda.so, the CUDA backend as a module (runtime/gpu_plugin.h):
// `pipeplan` dlopens it for `--backend cuda` (and `pipeplan env`) and reaches CudaRun, the
// profiler and the environment query through it.
#include <memory>
#include <type_traits>

#include "runtime/cuda/cuda_run.h"
#include "runtime/cuda/env_query.h"
#include "runtime/cuda/profiler.h"
#include "runtime/gpu_plugin.h"

namespace pipeplan::cuda {

namespace {

class CudaPlugin final : public GpuPlugin {
 public:
  Profile measure_profile(const GpuProfileOptions& options) override {
    return cuda::measure_profile(options);
  }
  std::unique_ptr<GpuRun> prepare_run(const TaskGraph& plan,
                                      const GpuRunOptions& options) override {
    return std::make_unique<CudaRun>(plan, options);
  }
  GpuEnvironment environment() override { return query_environment(); }
};

}  // namespace

}  // namespace pipeplan::cuda

// Checked against the declaration the host uses, so the two cannot disagree on the signature.
extern "C" __attribute__((visibility("default"))) pipeplan::GpuPlugin* pipeplan_gpu_plugin(
    int host_version, int* module_version) {
  static_assert(std::is_same_v<decltype(&pipeplan_gpu_plugin), pipeplan::GpuPluginEntry>);
  *module_version = pipeplan::kGpuPluginVersion;
  if (host_version != pipeplan::kGpuPluginVersion) return nullptr;
  // `pipeplan` links no CUDA library: nothing has initialised the driver yet.
  pipeplan::cuda::prefer_many_work_queues();
  static pipeplan::cuda::CudaPlugin plugin;
  return &plugin;
}
