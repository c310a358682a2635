// Stand-ins for libpipeplan_cuda.so that need no CUDA, so the plugin boundary is tested on every
// build (tests/runtime/CMakeLists.txt builds three modules from this file):
// - FAKE_PLUGIN_VERSION unset: the right interface version; measure_profile and prepare_run
//   throw pipeplan::Error, which the CLI must catch across the module boundary and print as one
//   line; environment() describes the GPUs $FAKE_GPU_PLUGIN_GPUS lists ("name=SMs,name=SMs";
//   unset or empty: none) and a fixed set of libraries, cuDNN among them not loadable;
// - FAKE_PLUGIN_VERSION=0: reports another interface version;
// - FAKE_PLUGIN_NO_ENTRY: a library without the entry point.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>

#include "planner/base/error.h"
#include "runtime/gpu_plugin.h"

#ifndef FAKE_PLUGIN_NO_ENTRY

#ifndef FAKE_PLUGIN_VERSION
#define FAKE_PLUGIN_VERSION pipeplan::kGpuPluginVersion
#endif

namespace {

class ThrowingPlugin final : public pipeplan::GpuPlugin {
 public:
  // Names the options the CLI passed, so tests can check them.
  pipeplan::Profile measure_profile(const pipeplan::GpuProfileOptions& options) override {
    throw pipeplan::Error("fake plugin: measure_profile refused (gpu '" + options.gpu +
                          "', command '" + options.command + "')");
  }
  std::unique_ptr<pipeplan::GpuRun> prepare_run(const pipeplan::TaskGraph& /*plan*/,
                                                const pipeplan::GpuRunOptions& options) override {
    throw pipeplan::Error("fake plugin: prepare_run refused (--emulate " +
                          std::to_string(options.emulate) + ")");
  }
  pipeplan::GpuEnvironment environment() override {
    pipeplan::GpuEnvironment env;
    env.built_cuda_version = 13000;
    env.driver_version = 13010;
    env.runtime_version = 13000;
    env.fused_attention_built = true;
    env.fused_attention_error = "cannot load libcudnn.so.9: fake plugin";
    env.nccl_built = true;
    const char* list = std::getenv("FAKE_GPU_PLUGIN_GPUS");
    std::istringstream entries(list != nullptr ? list : "");
    std::string entry;
    while (std::getline(entries, entry, ',')) {
      const std::size_t equals = entry.rfind('=');
      pipeplan::GpuDeviceInfo device;
      device.index = static_cast<int>(env.gpus.size());
      device.name = entry.substr(0, equals);
      device.sms = std::stoi(entry.substr(equals + 1));
      device.memory_bytes = std::int64_t{80} << 30;
      device.compute_major = 9;
      device.compute_minor = 0;
      env.gpus.push_back(device);
    }
    if (env.gpus.empty()) env.gpu_error = "fake plugin: no CUDA-capable device is detected";
    env.libraries = {
        {"libcudart", "/fake/cuda/lib64/libcudart.so.13.0.88", "13.0", ""},
        {"libcublas", "/fake/cuda/lib64/libcublas.so.13.1.0.3", "13.1.0", ""},
        {"libcublasLt", "/fake/cuda/lib64/libcublasLt.so.13.1.0.3", "13.1.0", ""},
        {"libcudnn", "", "", env.fused_attention_error},
        {"libnccl", "/fake/nccl/lib/libnccl.so.2.27.3", "2.27.3", ""},
    };
    return env;
  }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) pipeplan::GpuPlugin* pipeplan_gpu_plugin(
    int host_version, int* module_version) {
  *module_version = FAKE_PLUGIN_VERSION;
  if (host_version != FAKE_PLUGIN_VERSION) return nullptr;
  static ThrowingPlugin plugin;
  return &plugin;
}

#else

extern "C" __attribute__((visibility("default"))) int pipeplan_not_a_plugin() {
  return 0;
}

#endif
