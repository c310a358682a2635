// Stand-ins for libpipeplan_cuda.so that need no CUDA, so the plugin boundary is tested on every
// build (tests/runtime/CMakeLists.txt builds three modules from this file):
// - FAKE_PLUGIN_VERSION unset: the right interface version; every call throws pipeplan::Error,
//   which the CLI must catch across the module boundary and print as one line;
// - FAKE_PLUGIN_VERSION=0: reports another interface version;
// - FAKE_PLUGIN_NO_ENTRY: a library without the entry point.
#include <memory>
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
