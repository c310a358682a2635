// The boundary between `pipeplan` and the CUDA backend, which is built as a module
// (libpipeplan_cuda.so) and loaded only when a command asks for `--backend cuda`, so every other
// command starts without cudart, cuBLAS, cuBLASLt and NCCL (docs/design/cuda-backend.md, "Plugin").
// Nothing here names a CUDA type: the CLI compiles and links without CUDA.
//
// The module exports one extern "C" function, kGpuPluginEntry, of type GpuPluginEntry. Its C++
// interface below is only valid between a `pipeplan` and a module built from the same tree: the
// module binds to the executable's copies of the planner and runtime (the executable exports
// them), so both must agree on every type that crosses. kGpuPluginVersion guards the interface
// itself; bump it whenever a declaration in this file changes.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "planner/graph/taskgraph.h"
#include "profiles/profile.h"
#include "runtime/executor.h"
#include "runtime/measured.h"
#include "runtime/node_timer.h"
#include "runtime/process_group.h"
#include "runtime/transport.h"

namespace pipeplan {

// 2: GpuRunOptions::group and ::timeout (one process per GPU under MPI).
// 3: Backend::upload_loss_gradient (the head's dy in f32, not bf16).
// 4: GpuProfileOptions::gpu (the profile's gpus.json entry, checked before measuring).
// 5: GpuProfileOptions::gemm_candidates and GpuRunOptions::gemm_candidates.
// 6: GpuPlugin::environment (`pipeplan env`).
// 7: GpuRunOptions::transport (NCCL between stages of one GPU).
// 8: ProcessGroup (GpuRunOptions::group) holds the messages of later points (its layout changed).
inline constexpr int kGpuPluginVersion = 8;
inline constexpr const char* kGpuPluginEntry = "pipeplan_gpu_plugin";
inline constexpr const char* kGpuPluginFile = "libpipeplan_cuda.so";
inline constexpr const char* kGpuPluginEnv = "PIPEPLAN_CUDA_PLUGIN";

// `pipeplan profile --backend cuda`: each layer kind at each micro-batch size, timed on the GPU.
struct GpuProfileOptions {
  ModelConfig model;
  int seq = 0;  // 0: the model's
  std::vector<int> micro_batch_sizes = {1};
  Attention attention = Attention::flash;
  int max_concat = 8;    // p2 over k = 1..max_concat concatenated micro-batches
  int warmup = 3;        // untimed runs before each measurement
  int repetitions = 20;  // timed runs; the profile keeps the median
  int sm_partition = 0;  // > 0: run inside a green context of this many SMs
  // > 1: each GEMM shape runs the fastest of this many cuBLASLt answers, timed at its first call
  // (runtime/cuda/matmul.h); 1: the heuristic's first. A run predicted from the profile should
  // use the same.
  int gemm_candidates = 1;
  // The gpus.json entry the profile names (the planner's peak FLOP/s and memory); empty: from
  // the device name, and a device with no entry is refused before anything is measured.
  std::string gpu;
  // The load run (runtime/cuda/load_profile.h): a block's ops back to back for this long on the
  // whole GPU, or on every emulated stage at once; 0: none, the profile has no sustained-load
  // model. The idle pause before it, also the longest before each contention burst.
  double sustain_seconds = 20;
  double cooldown_seconds = 5;
  std::string command;    // for the provenance
  bool progress = false;  // a progress bar on stderr
};

// `pipeplan run --transport`: automatic is device-local copies between stages on one GPU (emulated,
// or a one-device plan) and NCCL otherwise; device_local asks for the copies (one GPU only); nccl
// asks for NCCL, also between stages of one GPU, which needs NCCL 2.30 or later with
// NCCL_MULTI_RANK_GPU_ENABLE=1 (several NCCL ranks on one GPU).
enum class GpuTransport { automatic, device_local, nccl };

// `pipeplan run --backend cuda`.
struct GpuRunOptions {
  int emulate = 0;  // > 0: emulate that many stages on GPU 0 (docs/design/runtime.md, "On GPUs")
  std::string gpu;  // gpus.json entry for the MFU peak; empty: from the device name
  // One process per GPU (docs/design/runtime.md, "Multi-process runs"): this process runs plan
  // device group->rank() on visible GPU group->local_rank() % (GPUs visible), and talks to the
  // other ranks over NCCL, one communicator per directed link, made from a unique id that rank 0
  // sends the others through the group (so the module itself needs no MPI). The run's setup is
  // collective: every rank calls prepare_run. Null: this process drives every plan device.
  ProcessGroup* group = nullptr;
  // The group's waits during setup and every NCCL wait (communicators made, connections, a
  // send or receive completing): a peer that fails or hangs ends the run after this long.
  std::chrono::milliseconds timeout{60000};
  // As GpuProfileOptions::gemm_candidates, per stage: each stage times the answers on its own SMs
  // (in the first step, beside the other stages' work).
  int gemm_candidates = 1;
  // How stages exchange tensors (docs/design/runtime.md, "NCCL on one GPU").
  GpuTransport transport = GpuTransport::automatic;
};

// What the executor needs for one run on GPUs, prepared before it starts: one backend per plan
// device, the transport between them and the device-side node timer.
class GpuRun {
 public:
  virtual ~GpuRun() = default;
  // Hands the prepared backends to the executor, one per plan device (callable once each).
  virtual BackendFactory backend_factory() = 0;
  // The transport the executor takes ownership of (call once).
  virtual std::unique_ptr<Transport> take_transport() = 0;
  virtual std::shared_ptr<NodeTimer> node_timer() const = 0;
  virtual std::string transport_name() const = 0;
  // e.g. "cuda-bf16 (attention flash: cuDNN SDPA, cuDNN 9.19.0, cudnn-frontend 1.32.0)"
  virtual std::string backend_name() const = 0;
  virtual const MeasuredHardware& hardware() const = 0;
  // The allocators' peaks (requested bytes) since reset_peaks(), by plan device (0 for the
  // devices of other ranks).
  virtual std::vector<std::int64_t> allocator_peak_bytes() const = 0;
  virtual void reset_peaks() = 0;
};

// One visible CUDA device, as cudaGetDeviceProperties reports it.
struct GpuDeviceInfo {
  int index = 0;  // the CUDA ordinal, after CUDA_VISIBLE_DEVICES
  std::string name;
  int sms = 0;
  std::int64_t memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

// A library the module uses, where the dynamic loader mapped it from.
struct GpuLibraryInfo {
  std::string name;     // "libcudart", "libcublas", "libcublasLt", "libcudnn", "libnccl"
  std::string path;     // absolute, symbolic links resolved; empty when not loaded
  std::string version;  // as the library reports it, e.g. "13.0" or "9.19.0"; empty: none
  std::string error;    // why it is not loaded; empty when it is
};

// `pipeplan env`: what the module sees on this machine. Gathering it never throws for a missing
// GPU or library: those are what it reports.
struct GpuEnvironment {
  int built_cuda_version = 0;          // CUDART_VERSION the module was compiled with (13000: 13.0)
  int driver_version = 0;              // cudaDriverGetVersion: 0 without a driver
  int runtime_version = 0;             // cudaRuntimeGetVersion
  bool fused_attention_built = false;  // compiled with the cudnn-frontend headers
  // Empty when fused attention runs here (cuDNN loaded), else why not.
  std::string fused_attention_error;
  bool nccl_built = false;
  std::vector<GpuDeviceInfo> gpus;
  std::string gpu_error;  // why `gpus` is empty or lacks a device (the CUDA runtime's reason)
  std::vector<GpuLibraryInfo> libraries;
};

class GpuPlugin {
 public:
  virtual ~GpuPlugin() = default;
  // Both throw Error("no CUDA device found") without a GPU.
  virtual Profile measure_profile(const GpuProfileOptions& options) = 0;
  // Also throws Error naming --emulate or the plan when the GPUs cannot hold it.
  virtual std::unique_ptr<GpuRun> prepare_run(const TaskGraph& plan,
                                              const GpuRunOptions& options) = 0;
  // Loads cuDNN as --attention flash would, so its path and version are known.
  virtual GpuEnvironment environment() = 0;
};

// The module's entry point: sets *module_version to the kGpuPluginVersion it was built with and
// returns its plugin (alive until the process exits) when that equals host_version, else null.
using GpuPluginEntry = GpuPlugin* (*)(int host_version, int* module_version);

// Where the module is looked for: $PIPEPLAN_CUDA_PLUGIN when set, else libpipeplan_cuda.so in
// the folder of the running executable (/proc/self/exe).
std::filesystem::path gpu_plugin_path();

// Loads the module once per process (later calls return the same plugin) and checks its
// version. Throws a one-line Error: "--backend cuda: the CUDA backend is not installed ..."
// (naming the path and PIPEPLAN_CUDA_PLUGIN) when the file is missing, or naming the file and
// dlerror() when it does not load, lacks the entry point or has another interface version.
GpuPlugin& load_gpu_plugin();

}  // namespace pipeplan
