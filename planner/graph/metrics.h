// Step metrics from node times: the one definition of makespan, busy time, spans, bubbles,
// tokens/s, MFU and memory timelines, shared by the simulator's prediction (simulator.h) and the
// runtime's measurement (runtime/measured.h), so that a predicted and a measured step are
// compared on exactly the same terms.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "planner/graph/taskgraph.h"

namespace pipeplan {

struct NodeTime {
  double start_us = 0;
  double end_us = 0;
};

struct DeviceMetrics {
  double busy_us = 0;       // compute-stream time
  double optimizer_us = 0;  // of it, the optimizer step's (and the DP collectives it holds)
  double first_start_us = 0;
  double last_end_us = 0;              // of the compute stream
  double span_us = 0;                  // last_end - first_start
  double bubble_ratio = 0;             // (makespan - (busy - optimizer)) / makespan
  std::int64_t peak_memory_bytes = 0;  // static + activations
  std::vector<std::pair<double, std::int64_t>> memory_timeline;  // (time, bytes) after each change
  // The pipeline's F, B and W: what the bubble ratios count as work.
  double work_us() const { return busy_us - optimizer_us; }
};

struct StepMetrics {
  double makespan_us = 0;        // first op anywhere to last op anywhere
  double max_stage_span_us = 0;  // largest per-device span (steady-state iteration time)
  std::vector<DeviceMetrics> devices;
  // 1 - Σ (busy - optimizer) / (devices · makespan): the pipeline's F, B and W are the work,
  // (step - m·(T_F + T_B + T_W)) / step per device; the optimizer step is not.
  double bubble_ratio = 0;
  double span_bubble_ratio = 0;  // 1 - Σ (busy - optimizer) / (devices · max_stage_span)
  double tokens_per_s = 0;       // tokens per step (every data-parallel replica's) / makespan
  // PaLM model FLOPs against meta.peak_flops_per_device; 0 when either is unknown.
  double mfu = 0;
  std::vector<std::int64_t> peak_memory_bytes() const;
  // The largest of peak_memory_bytes(): what one device must hold (0 with no devices).
  std::int64_t largest_peak_memory_bytes() const;
  // What one GPU that the stages share holds: the sum of their peaks (each stage's caching
  // allocator keeps its own).
  std::int64_t shared_gpu_memory_bytes() const;
};

// `times` by node id. Busy time is Σ (end − start) over each device's compute nodes; memory is
// meta.static_bytes plus every node's alloc_bytes from its start and less its free_bytes from its
// end (releases first at equal times: an op that starts when another ends reuses its memory).
// Throws Error when the times do not cover the graph or a node names an unknown device.
StepMetrics step_metrics(const TaskGraph& graph, std::span<const NodeTime> times);

// The step's MFU against one whole GPU: `step.mfu`, or where the stages share one GPU
// (meta.contention has curves: emulated stages) that many times it, as they compute on it together.
double mfu_of_one_gpu(const PlanMeta& meta, const StepMetrics& step);
// "" when mfu_of_one_gpu is at most 100 %, else one line saying that the step's times are faster
// than the GPU's peak computes the model's FLOPs: "MFU 527.0 % is above 100 % of gpu 'h100-sxm'
// (989.4 TFLOP/s bf16 dense a GPU): ...". PaLM's model FLOPs count full (not causal) attention,
// so a real step may pass 100 % by a little at long sequences; far above it, the durations or the
// profile's times are not of this model on this GPU.
std::string mfu_above_peak_note(const PlanMeta& meta, const StepMetrics& step);

// Where the plan's stages share one GPU (meta.contention has curves: emulated stages), that GPU's
// HBM (gpus.json); 0 where they do not share one or its HBM is not known.
double shared_gpu_hbm_bytes(const PlanMeta& meta);
// Whether stages sharing one GPU hold more than its HBM together (their summed peaks): such a
// plan cannot run emulated. False where they share none or its HBM is not known.
bool over_shared_gpu_hbm(const PlanMeta& meta, const StepMetrics& step);

}  // namespace pipeplan
