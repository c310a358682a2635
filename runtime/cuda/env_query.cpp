#include "runtime/cuda/env_query.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <link.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#ifdef PIPEPLAN_HAVE_NCCL
#include <nccl.h>
#endif

#include "runtime/cuda/sdpa.h"

namespace pipeplan::cuda {

namespace {

// Absolute, with symbolic links resolved: libcudart.so.13 names its full version that way.
std::string resolved(const char* loader_path) {
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::canonical(loader_path, ec);
  return ec ? std::filesystem::absolute(loader_path, ec).string() : canonical.string();
}

// The file the dynamic loader mapped `symbol` from ("" when it cannot say).
std::string library_of(const void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  return resolved(info.dli_fname);
}

template <typename Function>
std::string library_of_function(Function* function) {
  return library_of(reinterpret_cast<const void*>(function));
}

// "13.0" from 13000: the CUDA runtime and driver number versions major·1000 + minor·10.
std::string cuda_version(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// major.minor.patch of a version numbered major·unit + minor·100 + patch.
std::string dotted(std::size_t version, std::size_t major_unit) {
  return std::to_string(version / major_unit) + "." + std::to_string(version % major_unit / 100) +
         "." + std::to_string(version % 100);
}

std::vector<std::string> loaded_objects() {
  std::vector<std::string> paths;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        if (info->dlpi_name != nullptr && *info->dlpi_name != '\0') {
          static_cast<std::vector<std::string>*>(data)->emplace_back(info->dlpi_name);
        }
        return 0;
      },
      &paths);
  return paths;
}

GpuLibraryInfo cudart() {
  GpuLibraryInfo library{"libcudart", library_of_function(&cudaRuntimeGetVersion), "", ""};
  int version = 0;
  if (cudaRuntimeGetVersion(&version) == cudaSuccess) library.version = cuda_version(version);
  return library;
}

GpuLibraryInfo cublas() {
  GpuLibraryInfo library{"libcublas", library_of_function(&cublasGetProperty), "", ""};
  int major = 0;
  int minor = 0;
  int patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
    library.version =
        std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  }
  return library;
}

GpuLibraryInfo cublas_lt() {
  // cuBLASLt numbers its versions major·10000 + minor·100 + patch (130100: 13.1.0).
  return {"libcublasLt", library_of_function(&cublasLtGetVersion),
          dotted(cublasLtGetVersion(), 10000), ""};
}

// cuDNN is opened with RTLD_LOCAL (sdpa.cpp), so its symbols are not global: find the mapped
// object that defines cudnnGetVersion among those whose name mentions cudnn.
GpuLibraryInfo cudnn() {
  GpuLibraryInfo library{"libcudnn", "", "", ""};
  if (!fused_attention_built()) {
    library.error = fused_attention_unavailable();
    return library;
  }
  const std::string why = fused_attention_unavailable();  // loads cuDNN on first use
  for (const std::string& object : loaded_objects()) {
    if (std::filesystem::path(object).filename().string().find("cudnn") == std::string::npos) {
      continue;
    }
    void* handle = dlopen(object.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
    if (handle == nullptr) continue;
    void* symbol = dlsym(handle, "cudnnGetVersion");
    dlclose(handle);  // RTLD_NOLOAD took a reference; the loader keeps what sdpa.cpp opened
    if (symbol == nullptr) continue;
    library.path = library_of(symbol);
    using GetVersion = std::size_t (*)();
    const std::size_t version = reinterpret_cast<GetVersion>(symbol)();
    // cuDNN 9 numbers its versions major·10000 + minor·100 + patch, cuDNN 8 major·1000 + ….
    library.version = dotted(version, version < 90000 ? 1000 : 10000);
    break;
  }
  if (library.path.empty()) library.error = why.empty() ? "not loaded" : why;
  return library;
}

void query_gpus(GpuEnvironment& env) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    env.gpu_error = cudaGetErrorString(status);
    cudaGetLastError();  // not sticky: clear it for whatever runs next
    return;
  }
  if (count == 0) {
    env.gpu_error = "no CUDA device found";
    return;
  }
  for (int index = 0; index < count; ++index) {
    cudaDeviceProp prop{};
    if (const cudaError_t error = cudaGetDeviceProperties(&prop, index); error != cudaSuccess) {
      env.gpu_error = "GPU " + std::to_string(index) + ": " + cudaGetErrorString(error);
      cudaGetLastError();
      continue;
    }
    env.gpus.push_back({index, prop.name, prop.multiProcessorCount,
                        static_cast<std::int64_t>(prop.totalGlobalMem), prop.major, prop.minor});
  }
}

}  // namespace

GpuEnvironment query_environment() {
  GpuEnvironment env;
  env.built_cuda_version = CUDART_VERSION;
  if (cudaDriverGetVersion(&env.driver_version) != cudaSuccess) env.driver_version = 0;
  if (cudaRuntimeGetVersion(&env.runtime_version) != cudaSuccess) env.runtime_version = 0;
  env.fused_attention_built = fused_attention_built();
  env.fused_attention_error = fused_attention_unavailable();
#ifdef PIPEPLAN_HAVE_NCCL
  env.nccl_built = true;
#endif
  query_gpus(env);
  env.libraries = {cudart(), cublas(), cublas_lt(), cudnn(), loaded_nccl()};
  return env;
}

GpuLibraryInfo loaded_nccl() {
#ifdef PIPEPLAN_HAVE_NCCL
  GpuLibraryInfo library{"libnccl", library_of_function(&ncclGetVersion), "", ""};
  int version = 0;
  // NCCL 2.9 and later number versions major·10000 + minor·100 + patch.
  if (ncclGetVersion(&version) == ncclSuccess) {
    library.version = dotted(static_cast<std::size_t>(version), 10000);
  }
  return library;
#else
  return {"libnccl", "", "",
          "this CUDA module was built without NCCL (set PIPEPLAN_NCCL_ROOT and configure again)"};
#endif
}

std::string loaded_nccl_text() {
  const GpuLibraryInfo nccl = loaded_nccl();
  if (!nccl.error.empty()) return "NCCL (not built)";
  std::string text = "NCCL";
  if (!nccl.version.empty()) text += " " + nccl.version;
  if (!nccl.path.empty()) text += " from " + nccl.path;
  return text;
}

}  // namespace pipeplan::cuda
