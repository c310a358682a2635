// `pipeplan env`: what this pipeplan was built with and what it finds on this machine (the CUDA
// module, the GPUs, the CUDA libraries, the variables it reads), so a GPU script can ask pipeplan
// instead of deriving the same facts on its own. Without a GPU or a CUDA build it says why and
// still exits 0: that is an answer, not a failure.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "profiles/gpu.h"
#include "runtime/emulate.h"
#include "runtime/gpu_plugin.h"
#include "runtime/mpi/mpi_session.h"
#include "tools/commands.h"
#include "tools/units.h"

extern char** environ;  // POSIX: <unistd.h> declares it only under _GNU_SOURCE

namespace pipeplan {

namespace {

// `--emulate P` is listed for P up to this many stages, while each still gets 8 SMs.
constexpr int kMaxListedStages = 16;

// Set by tools/CMakeLists.txt: whether libpipeplan_cuda.so was built beside this executable.
constexpr bool kCudaModuleBuilt = PIPEPLAN_CUDA_MODULE_BUILT != 0;

// What pipeplan itself reads: its own variables, NCCL's, the one the cuDNN frontend takes the
// CUDA runtime's name from, and the CUDA runtime's that change what a run or profile measures:
// the work queues and GPUs it gets, launches made synchronous (CUDA_LAUNCH_BLOCKING=1: every op
// time then includes the host's launch gaps) and eager module loading (a larger context, which
// the memory reserve does not count).
bool read_by_pipeplan(std::string_view name) {
  static constexpr std::string_view kPrefixes[] = {"PIPEPLAN_", "NCCL_"};
  static constexpr std::string_view kNames[] = {
      "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING",
      "CUDA_MODULE_LOADING", "CUDNN_FRONTEND_CUDART_LIB_NAME"};
  return std::any_of(std::begin(kPrefixes), std::end(kPrefixes),
                     [&](std::string_view prefix) { return name.starts_with(prefix); }) ||
         std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

std::map<std::string, std::string> pipeplan_variables() {
  std::map<std::string, std::string> variables;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::size_t equals = text.find('=');
    if (equals == std::string_view::npos || !read_by_pipeplan(text.substr(0, equals))) continue;
    variables.emplace(text.substr(0, equals), text.substr(equals + 1));
  }
  return variables;
}

// "13.0" from 13000 (the CUDA runtime's and driver's numbering); "" for 0 (none).
std::string cuda_version(int version) {
  if (version <= 0) return "";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// The gpus.json entry a device is taken for; "none" where none is (or gpus.json does not load:
// the report says why beside its path).
std::string gpu_entry(const std::string& device_name) {
  try {
    return gpu_for_device_name(device_name).name;
  } catch (const Error&) {
    return "none";
  }
}

struct SmShare {
  int stages = 0;
  int sms_per_stage = 0;
};

// The shares `run --backend cuda --emulate P` gives each stage; a P it would refuse is left out.
std::vector<SmShare> emulate_shares(int sms) {
  std::vector<SmShare> shares;
  for (int stages = 1; stages <= kMaxListedStages; ++stages) {
    try {
      shares.push_back({stages, emulated_sm_share(sms, stages)});
    } catch (const Error&) {
      break;  // fewer SMs per stage as P grows: every larger P is refused too
    }
  }
  return shares;
}

// load_gpu_plugin's messages are written for --backend cuda; here nobody passed that flag.
std::string module_error(const std::string& message) {
  const std::string prefix = field_name("backend") + " cuda: ";
  return message.starts_with(prefix) ? message.substr(prefix.size()) : message;
}

struct EnvReport {
  std::map<std::string, std::string> variables;
  std::string module_path;
  std::string module_error;  // empty: loaded
  std::optional<GpuEnvironment> gpu;
  std::string gpu_error;        // why no GPU (or not every GPU) is listed
  std::string kernel_driver;    // the NVIDIA kernel module's version; empty: none
  std::string gpus_json;        // the gpus.json plan, profile and run read
  std::string gpus_json_error;  // why it does not load; empty: it does
};

// The kernel module's version, which the CUDA driver API does not give (it numbers its own API,
// "13.0"); "" without the NVIDIA driver.
std::string kernel_driver() {
  std::ifstream in("/proc/driver/nvidia/version");
  if (!in) return "";
  std::string first_line;
  std::getline(in, first_line);
  return nvidia_kernel_driver(first_line);
}

EnvReport gather() {
  EnvReport report;
  // Before the module loads: it sets CUDA_DEVICE_MAX_CONNECTIONS for itself when unset.
  report.variables = pipeplan_variables();
  report.module_path = gpu_plugin_path().string();
  report.kernel_driver = kernel_driver();
  report.gpus_json = (data_dir() / "gpus.json").string();
  try {
    static_cast<void>(load_gpus(report.gpus_json));
  } catch (const Error& e) {
    report.gpus_json_error = e.what();
  }
  try {
    report.gpu = load_gpu_plugin().environment();
  } catch (const Error& e) {
    report.module_error = module_error(e.what());
  }
  if (!report.module_error.empty()) {
    report.gpu_error = kCudaModuleBuilt
                           ? "the CUDA module does not load (" + report.module_error + ")"
                           : "this pipeplan was built without the CUDA backend";
  } else {
    report.gpu_error = report.gpu->gpu_error;  // with GPUs listed: one that could not be read
    // Without the kernel module CUDA's reason reads as a version mismatch ("CUDA driver
    // version is insufficient for CUDA runtime version"): what is missing is the driver.
    if (report.gpu->gpus.empty() && report.kernel_driver.empty() && !report.gpu_error.empty()) {
      report.gpu_error =
          "no NVIDIA kernel driver is loaded (no /proc/driver/nvidia/version; the "
          "CUDA runtime says: " +
          report.gpu_error + ")";
    }
  }
  return report;
}

nlohmann::json optional_string(const std::string& text) {
  return text.empty() ? nlohmann::json(nullptr) : nlohmann::json(text);
}

nlohmann::json to_json(const EnvReport& r) {
  const GpuEnvironment* gpu = r.gpu ? &*r.gpu : nullptr;
  nlohmann::json out;
  out["pipeplan"] = {
      {"version", PIPEPLAN_VERSION},
      {"compiler", PIPEPLAN_COMPILER},
      {"build_type", PIPEPLAN_BUILD_TYPE},
      {"cuda_backend", kCudaModuleBuilt},
      {"fused_attention",
       gpu != nullptr ? nlohmann::json(gpu->fused_attention_built) : nlohmann::json(nullptr)},
      {"nccl", gpu != nullptr ? nlohmann::json(gpu->nccl_built) : nlohmann::json(nullptr)},
      {"mpi", mpi_support_built()},
      {"gpus_json", r.gpus_json},
      {"gpus_json_error", optional_string(r.gpus_json_error)},
  };
  out["cuda_module"] = {
      {"path", r.module_path},
      {"loaded", gpu != nullptr},
      {"error", optional_string(r.module_error)},
      {"kernel_driver", optional_string(r.kernel_driver)},
      {"built_with_cuda",
       optional_string(gpu != nullptr ? cuda_version(gpu->built_cuda_version) : "")},
      {"driver_version", optional_string(gpu != nullptr ? cuda_version(gpu->driver_version) : "")},
      {"runtime_version",
       optional_string(gpu != nullptr ? cuda_version(gpu->runtime_version) : "")},
      {"fused_attention_error", optional_string(gpu != nullptr ? gpu->fused_attention_error : "")},
  };
  out["gpus"] = nlohmann::json::array();
  if (gpu != nullptr) {
    for (const GpuDeviceInfo& device : gpu->gpus) {
      nlohmann::json shares = nlohmann::json::array();
      for (const SmShare& share : emulate_shares(device.sms))
        shares.push_back({{"stages", share.stages}, {"sms_per_stage", share.sms_per_stage}});
      out["gpus"].push_back({
          {"index", device.index},
          {"name", device.name},
          {"gpu_entry", gpu_entry(device.name)},
          {"sms", device.sms},
          {"memory_bytes", device.memory_bytes},
          {"compute_capability",
           std::to_string(device.compute_major) + "." + std::to_string(device.compute_minor)},
          {"driver_version", optional_string(cuda_version(gpu->driver_version))},
          {"runtime_version", optional_string(cuda_version(gpu->runtime_version))},
          {"emulate_sm_share", shares},
      });
    }
  }
  out["gpu_error"] = optional_string(r.gpu_error);
  out["libraries"] = nlohmann::json::array();
  if (gpu != nullptr) {
    for (const GpuLibraryInfo& library : gpu->libraries) {
      out["libraries"].push_back({{"name", library.name},
                                  {"path", optional_string(library.path)},
                                  {"version", optional_string(library.version)},
                                  {"error", optional_string(library.error)}});
    }
  }
  out["environment"] = r.variables;
  return out;
}

// One titled section of "  label  value" rows, the values aligned.
class Section {
 public:
  explicit Section(std::string title) : title_(std::move(title)) {}
  void row(std::string label, std::string value) {
    rows_.emplace_back(std::move(label), std::move(value));
  }
  void print(std::ostream& out) const {
    std::size_t width = 0;
    for (const auto& [label, value] : rows_)
      width = std::max(width, label.size());
    out << title_ << "\n";
    for (const auto& [label, value] : rows_) {
      out << "  " << label << std::string(width - label.size() + 2, ' ') << value << "\n";
    }
  }

 private:
  std::string title_;
  std::vector<std::pair<std::string, std::string>> rows_;
};

std::string yes_no(bool value) {
  return value ? "yes" : "no";
}

std::string fused_attention_text(const GpuEnvironment* gpu) {
  if (!kCudaModuleBuilt && gpu == nullptr) return "no (no CUDA backend)";
  if (gpu == nullptr) return "unknown (the CUDA module does not load)";
  if (!gpu->fused_attention_built) return "no (built without the cudnn-frontend headers)";
  if (!gpu->fused_attention_error.empty())
    return "built, unavailable: " + gpu->fused_attention_error;
  return "yes";
}

// "1:128 2:64 3:40 ...": stages, then the SMs each gets.
std::string share_list(const std::vector<SmShare>& shares) {
  std::string text;
  for (const SmShare& share : shares) {
    text += (text.empty() ? "" : " ") + std::to_string(share.stages) + ":" +
            std::to_string(share.sms_per_stage);
  }
  return text;
}

void print_text(const EnvReport& r, std::ostream& out) {
  const GpuEnvironment* gpu = r.gpu ? &*r.gpu : nullptr;
  Section build("pipeplan");
  build.row("version", PIPEPLAN_VERSION);
  build.row("compiler", PIPEPLAN_COMPILER);
  build.row("build type", PIPEPLAN_BUILD_TYPE);
  build.row("CUDA backend", yes_no(kCudaModuleBuilt));
  build.row("fused attention", fused_attention_text(gpu));
  build.row("NCCL", gpu != nullptr ? yes_no(gpu->nccl_built) : "unknown");
  build.row("MPI", yes_no(mpi_support_built()));
  build.row("gpus.json", r.gpus_json + (r.gpus_json_error.empty()
                                            ? std::string()
                                            : " (does not load: " + r.gpus_json_error + ")"));
  build.print(out);

  Section module("\nCUDA module");
  module.row("path", r.module_path);
  module.row("loads", r.module_error.empty() ? "yes" : "no: " + r.module_error);
  module.row("kernel driver", r.kernel_driver.empty() ? "none" : r.kernel_driver);
  if (gpu != nullptr) {
    module.row("built with", "CUDA " + cuda_version(gpu->built_cuda_version));
    const std::string driver = cuda_version(gpu->driver_version);
    module.row("driver", driver.empty() ? "none" : "CUDA " + driver);
    module.row("runtime", "CUDA " + cuda_version(gpu->runtime_version));
  }
  module.print(out);

  out << "\nGPUs\n";
  if (gpu == nullptr || gpu->gpus.empty()) {
    out << "  no GPU found: " << r.gpu_error << "\n";
  } else {
    for (const GpuDeviceInfo& device : gpu->gpus) {
      Section section("  " + std::to_string(device.index) + ": " + device.name);
      section.row("  gpus.json", gpu_entry(device.name));
      section.row("  SMs", std::to_string(device.sms));
      section.row("  memory", format_gib(static_cast<double>(device.memory_bytes)));
      section.row("  compute capability", std::to_string(device.compute_major) + "." +
                                              std::to_string(device.compute_minor));
      const std::vector<SmShare> shares = emulate_shares(device.sms);
      section.row("  --emulate P:SMs",
                  shares.empty() ? "none (below 8 SMs per stage)" : share_list(shares));
      section.print(out);
    }
    if (!r.gpu_error.empty()) out << "  " << r.gpu_error << "\n";
  }

  if (gpu != nullptr) {
    Section libraries("\nlibraries (as the CUDA module loads them)");
    std::size_t width = 0;
    for (const GpuLibraryInfo& library : gpu->libraries)
      width = std::max(width, library.version.empty() ? 1 : library.version.size());
    for (const GpuLibraryInfo& library : gpu->libraries) {
      if (library.path.empty()) {
        libraries.row(library.name, "not loaded: " + library.error);
        continue;
      }
      const std::string version = library.version.empty() ? "?" : library.version;
      libraries.row(library.name,
                    version + std::string(width - version.size() + 2, ' ') + library.path);
    }
    libraries.print(out);
  }

  Section variables("\nenvironment");
  for (const auto& [name, value] : r.variables)
    variables.row(printable_text(name), printable_text(value));
  variables.print(out);
  if (r.variables.empty()) {
    out << "  none set (PIPEPLAN_*, NCCL_*, CUDA_DEVICE_MAX_CONNECTIONS, CUDA_VISIBLE_DEVICES, "
           "CUDA_LAUNCH_BLOCKING, CUDA_MODULE_LOADING, CUDNN_FRONTEND_CUDART_LIB_NAME)\n";
  }
}

}  // namespace

std::string nvidia_kernel_driver(std::string_view proc_version_text) {
  const std::size_t module = proc_version_text.find("Module");
  if (module == std::string_view::npos) return "";
  std::istringstream words{std::string(proc_version_text.substr(module))};
  std::string word;
  while (words >> word) {
    const bool version = !word.empty() && std::isdigit(static_cast<unsigned char>(word[0])) &&
                         word.find('.') != std::string::npos &&
                         word.find_first_not_of("0123456789.") == std::string::npos;
    if (version) return word;
  }
  return "";
}

Command add_env_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* sub = app.add_subcommand(
      "env", "what pipeplan sees here: its build, the CUDA module, GPUs, libraries, variables");
  sub->add_flag("--json", *json, "one JSON object instead of text");
  return {sub, [json] {
            const EnvReport report = gather();
            if (*json) {
              std::cout << json_text(to_json(report), 2) << "\n";
            } else {
              print_text(report, std::cout);
            }
            return 0;
          }};
}

}  // namespace pipeplan
