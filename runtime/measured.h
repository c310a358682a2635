// A measured step in the simulator's result structure (planner/graph/simulator.h), its metrics
// computed by the same function (planner/graph/metrics.h), so the one trace writer
// (planner/graph/trace.h) draws it and `pipeplan diff` sets it beside the prediction.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"

namespace pipeplan {

struct MeasuredDevice {
  std::int64_t peak_bytes = 0;
  std::vector<std::pair<double, std::int64_t>> memory_timeline;  // (µs since step start, bytes)
};

// step_metrics() of the measured node times: every field as simulate() fills it, MFU against
// the plan's GPU (meta.peak_flops_per_device; RunComparison::measured_mfu is against the GPUs it
// ran on). `devices`: empty, or one per plan device; a device with a memory timeline replaces
// the plan's allocations replayed at the measured times with what it counted itself.
SimResult measured_result(const TaskGraph& plan, std::vector<NodeTime> times,
                          std::vector<MeasuredDevice> devices);

// The hardware a measured step ran on, for its MFU.
struct MeasuredHardware {
  std::string device_name;  // as the device reports it, e.g. "NVIDIA H100 80GB HBM3"
  std::string gpu;          // the gpus.json entry of its peak, e.g. "h100-sxm"
  double peak_flops = 0;    // dense bf16 FLOP/s of one whole GPU; 0: unknown (no MFU)
  int gpus = 1;             // physical GPUs the run used
  int total_sms = 0;        // SMs of one GPU
  int sm_per_stage = 0;     // > 0: emulated, each stage in a green context of this many SMs
  int emulated_stages = 0;  // > 0: this many stages shared one GPU
  // CUDA: hardware work queues per context (CUDA_DEVICE_MAX_CONNECTIONS as the run saw it; the
  // driver's default is 8); 0: not reported.
  int work_queues = 0;
  bool emulated() const { return emulated_stages > 0; }
};

// A measured step beside the plan's prediction. MFU is PaLM's (model FLOPs only,
// plan.meta.flops_per_token): tokens/s x FLOPs per token / peak of the GPUs used. An
// emulated run also gets it against the SMs its stages were granted (stages x share / total).
// Errors are (measured - predicted) / predicted in %.
struct RunComparison {
  double predicted_makespan_us = 0;
  double measured_makespan_us = 0;
  double makespan_error_pct = 0;
  double measured_step_time_us = 0;  // wall clock: task graph + optimizer
  // The same quantity predicted: the makespan where the plan has its optimizer steps as nodes
  // (OpType::O, then the step is the graph); 0 where it has none (the optimizer then runs after
  // the graph, outside any prediction).
  double predicted_step_time_us = 0;
  double predicted_tokens_per_s = 0;
  double measured_tokens_per_s = 0;  // over the measured makespan, like the prediction
  double predicted_mfu = 0;          // against the plan's GPU (meta.peak_flops_per_device)
  // The predicted tokens/s against the GPUs it ran on, as measured_mfu is: the figure to set
  // beside it (an emulated run has one GPU where the plan has P); 0 when the peak is unknown.
  double predicted_mfu_on_gpus_used = 0;
  double measured_mfu = 0;           // against the GPUs it ran on; 0 when the peak is unknown
  double measured_mfu_of_share = 0;  // emulated: against the SMs granted
  double sm_share = 1;               // emulated: stages x sm_per_stage / total_sms
  std::vector<std::int64_t> predicted_peak_bytes;  // per device
  std::vector<std::int64_t> measured_peak_bytes;   // per device, from the allocator
  std::vector<double> peak_bytes_error_pct;        // per device
  // Per device: the peak of the runtime's own account of the plan's tensors (static bytes,
  // stashes, retained sets, messages: the trace's memory counter). The allocator's peak above it
  // is memory the plan does not model: an op's temporaries, a send's source held until its copy.
  std::vector<std::int64_t> accounted_peak_bytes;
  // Steady state (set_steady_steps): the median makespan over the steps after the first (the
  // first also fills the allocator's cache and builds cuBLAS/cuDNN plans), or over the one step
  // there is; one step of an emulated run varies by a few % from the next.
  int steady_steps = 0;  // how many steps the median is over; 0: not set
  int steady_first_step = 0;
  double steady_makespan_us = 0;
  double steady_error_pct = 0;
};

double percent_error(double measured, double predicted);  // 0 when predicted is 0

// `allocator_peak_bytes`: per plan device, what its allocator held at most during the step.
RunComparison compare_with_prediction(const TaskGraph& plan, const SimResult& predicted,
                                      const SimResult& measured, double step_time_us,
                                      const std::vector<std::int64_t>& allocator_peak_bytes,
                                      const MeasuredHardware& hardware);

// Sets run's steady_* fields from every step's measured makespan, in step order (steps 2..N,
// or step 1 alone). Throws Error when `makespans_us` is empty.
void set_steady_steps(RunComparison& run, const std::vector<double>& makespans_us);

}  // namespace pipeplan
