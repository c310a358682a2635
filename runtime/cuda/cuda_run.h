// Everything `pipeplan run --backend cuda` sets up around the executor: one CudaBackend per
// plan device, each on a stream made here (so the device-side node timer and the transport exist
// before the executor does), the transport between them, and the hardware the MFU is held
// against. The CLI reaches it through the plugin boundary (runtime/gpu_plugin.h).
//
// - `emulate == 0`: plan device d runs on GPU d; stages on distinct GPUs talk over NCCL (when
//   built with it), a plan that fits on one GPU uses the device-local transport.
// - `emulate == P` (must equal the plan's device count): all P stages on GPU 0, each in its own
//   green context of emulated_sm_share(SMs, P) SMs, disjoint (GreenContext::partition), with
//   its own streams and allocator; the device-local transport copies between the stages'
//   memory, BPipe stashes included. Every backend call runs with its stage's green context
//   current (and only then), so cuBLAS and every kernel stay inside the stage's SMs.
// - `group` set (one process per GPU under MPI): plan device group->rank() only, on visible GPU
//   local_rank % GPUs, talking to the other ranks over NCCL (NcclTransport::multi_process) with
//   the unique id rank 0 broadcasts through the group.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "planner/graph/taskgraph.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/green_context.h"
#include "runtime/cuda/step_events.h"
#include "runtime/gpu_plugin.h"

namespace pipeplan::cuda {

// CUDA_DEVICE_MAX_CONNECTIONS, the hardware work queues the driver gives each context, is 8 by
// default; more streams than that share queues, and work on one stream then waits behind another
// stream's cross-stream wait (a false dependency). An emulated 8-stage run has 8 compute and up
// to 28 transfer streams: on an H200 its compute streams stalled 90 to 150 ms per device and
// step at 8 queues, 2 to 17 ms at 32 (docs/design/runtime.md, "What measurement on a GPU put into
// the runtime"). This asks for 32, the most, unless the variable is set; it takes effect only
// before the process's first CUDA call (the plugin's entry point calls it). Returns the value in
// effect from then on.
int prefer_many_work_queues();
// The work queues per context as the environment sets them (8 when unset or not a number).
int work_queues();

// Where a rank of a multi-process run computes: GPU local_rank % gpus, shared by the node's ranks
// that map to it (local_size: the node's rank count, local_ranks_from_environment in
// runtime/launch.h; 0: not given).
struct GpuShare {
  int gpu = 0;
  int ranks = 1;  // ranks on this GPU
  int index = 0;  // this rank's place among them (its green context's)
};
// Throws Error when a rank shares its GPU (local_rank >= gpus) and the local size is not given,
// or the local rank is not below it.
GpuShare gpu_share(int local_rank, int local_size, int gpus);

class CudaRun final : public GpuRun {
 public:
  // Throws Error("no CUDA device found") without a GPU, and names --emulate or the plan when
  // the GPUs cannot hold it. A rank of options.group takes its node's rank count (gpu_share's
  // local_size) from `local_ranks` where given, else from its launcher's environment
  // (local_ranks_from_environment). options.timeout bounds every wait of the NCCL transport:
  // making its communicators, and later each send's wait for its receiver.
  CudaRun(const TaskGraph& plan, const GpuRunOptions& options,
          std::optional<int> local_ranks = std::nullopt);
  ~CudaRun() override;
  CudaRun(const CudaRun&) = delete;
  CudaRun& operator=(const CudaRun&) = delete;

  BackendFactory backend_factory() override;
  std::unique_ptr<Transport> take_transport() override;
  std::shared_ptr<NodeTimer> node_timer() const override { return events_; }
  std::string transport_name() const override { return transport_name_; }
  std::string backend_name() const override;
  const MeasuredHardware& hardware() const override { return hardware_; }
  std::vector<std::int64_t> allocator_peak_bytes() const override;
  void reset_peaks() override;

  // Backend of plan device d (valid while the executor lives; throws for another rank's).
  CudaBackend& backend(int device) const;

 private:
  void prepare_rank(const TaskGraph& plan, const GpuRunOptions& options,
                    std::optional<int> local_ranks);
  // A non-blocking stream on the current device, destroyed with this run.
  cudaStream_t own_stream();

  // Emulated: one per stage; a rank sharing its GPU with other ranks: its own.
  std::vector<std::unique_ptr<GreenContext>> green_;
  std::vector<cudaStream_t> own_streams_;          // not emulated: per device, 1 or 2
  std::vector<std::unique_ptr<Backend>> pending_;  // until the executor takes them
  std::vector<CudaBackend*> backends_;             // by plan device; null: another rank's
  std::shared_ptr<StepEvents> events_;
  std::unique_ptr<Transport> transport_;
  std::string transport_name_;
  std::string placement_;  // one process per GPU: where this rank computes, in words
  MeasuredHardware hardware_;
};

}  // namespace pipeplan::cuda
