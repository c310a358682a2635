#include "runtime/gpu_plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <system_error>

#include "planner/base/error.h"

namespace pipeplan {

namespace {

// "--backend cuda: " from the CLI.
std::string what() {
  return field_name("backend") + " cuda: ";
}

// dlerror() text on one line (it names the missing library or symbol).
std::string last_dl_error() {
  const char* text = dlerror();
  std::string message = text != nullptr ? text : "unknown dlopen error";
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return message;
}

GpuPlugin& load(const std::filesystem::path& path, bool from_env) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    if (from_env) {
      throw Error(what() + "the CUDA backend is not installed (" + kGpuPluginEnv + "=" +
                  path.string() + " names no file)");
    }
    throw Error(what() + "the CUDA backend is not installed (looked for " + path.string() +
                " next to the executable; set " + kGpuPluginEnv + " to the module's path)");
  }
  // RTLD_NOW: a symbol the module cannot resolve is reported here, in one line, not as a crash
  // in the middle of a run. The module is never unloaded: its code backs every object it makes.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw Error(what() + "cannot load " + path.string() + ": " + last_dl_error());
  }
  void* symbol = dlsym(handle, kGpuPluginEntry);
  if (symbol == nullptr) {
    throw Error(what() + path.string() + " is not a pipeplan CUDA plugin (no " + kGpuPluginEntry +
                ": " + last_dl_error() + ")");
  }
  const auto entry = reinterpret_cast<GpuPluginEntry>(symbol);
  int module_version = -1;
  GpuPlugin* plugin = entry(kGpuPluginVersion, &module_version);
  if (plugin == nullptr || module_version != kGpuPluginVersion) {
    throw Error(what() + path.string() + " has plugin interface version " +
                std::to_string(module_version) + ", this pipeplan needs " +
                std::to_string(kGpuPluginVersion) + " (install the module built with it)");
  }
  return *plugin;
}

}  // namespace

std::filesystem::path gpu_plugin_path() {
  const char* env = std::getenv(kGpuPluginEnv);
  if (env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (ec ? std::filesystem::path(".") : exe.parent_path()) / kGpuPluginFile;
}

GpuPlugin& load_gpu_plugin() {
  static std::mutex mutex;
  static GpuPlugin* loaded = nullptr;
  const std::lock_guard lock(mutex);
  if (loaded == nullptr) {
    const char* env = std::getenv(kGpuPluginEnv);
    loaded = &load(gpu_plugin_path(), env != nullptr && *env != '\0');
  }
  return *loaded;
}

}  // namespace pipeplan
