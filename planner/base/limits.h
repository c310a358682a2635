// Upper bounds on every size pipeplan accepts, in one place (docs/reference/limits.md). Each is
// checked where the value comes in (request fields, file loaders, options), before anything is
// allocated or looped over for it, so no input makes pipeplan run or allocate without bound. They
// are far above any real pipeline (the largest published ones have ~200 blocks, 128 stages, a few
// thousand micro-batches); what they rule out are typos and hostile files.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pipeplan::limits {

// Pipeline shape (PlanRequest, ScheduleRequest, plan files, schedule text and CSV).
inline constexpr int kMaxDevices = 1024;                        // pipeline devices P
inline constexpr int kMaxChunks = 64;                           // virtual stages per device V
inline constexpr int kMaxStages = kMaxDevices;                  // virtual stages P·V in one plan
inline constexpr int kMaxMicrobatches = 65536;                  // micro-batches per step m
inline constexpr std::int64_t kMaxStageMicrobatches = 1 << 18;  // P·V·m: ~7 task-graph nodes each
inline constexpr int kMaxMicroBatchSize = 65536;                // samples per micro-batch
inline constexpr int kMaxGlobalBatch = 1 << 24;  // samples per step (--search, bpipe)
inline constexpr int kMaxSizeCandidates = 64;    // entries of a micro-batch size list

// Model shape (presets, Hugging Face config.json, model JSON in profiles and plans).
inline constexpr int kMaxLayers = 1024;         // transformer blocks
inline constexpr int kMaxHidden = 1 << 20;      // hidden and MLP width
inline constexpr int kMaxHeads = 4096;          // attention and key/value heads
inline constexpr int kMaxExperts = 4096;        // routed experts of a mixture-of-experts block
inline constexpr double kMaxParameters = 1e15;  // parameters of a whole model
inline constexpr int kMaxVocab = 1 << 24;
inline constexpr int kMaxSeq = 1 << 20;                           // tokens per sample
inline constexpr std::int64_t kMaxTokensPerMicrobatch = 1 << 24;  // micro-batch size × sequence
inline constexpr int kMaxTensorParallel = 1024;                   // GPUs per pipeline stage
inline constexpr int kMaxDataParallel = 1 << 20;                  // replicas of the pipeline

// Costs (profiles, plans, --uniform): one layer's pass and one layer's memory.
inline constexpr double kMaxLayerTimeUs = 1e9;                 // 1000 s
inline constexpr std::int64_t kMaxLayerBytes = 1LL << 40;      // 1 TiB
inline constexpr double kMaxMemoryBytes = 1125899906842624.0;  // 1 PiB: --memory, limits
inline constexpr double kMaxLinkLatencyUs = 1e9;               // p2p latency
// A plan's MFU inputs: PaLM FLOPs per token (6N + 12·L·H·Q·T stays below 2·10^16 within the
// model limits above) and a device's peak (10^6 TFLOP/s per GPU, kMaxGpuTflops, times T GPUs).
inline constexpr double kMaxFlopsPerToken = 1e17;
inline constexpr double kMaxDevicePeakFlops = 1e18 * kMaxTensorParallel;

// GPUs (profiles/gpus.json).
inline constexpr int kMaxGpuEntries = 4096;   // entries of gpus.json
inline constexpr double kMaxGpuTflops = 1e6;  // peak_bf16_tflops
// The least peak (1 GFLOP/s): a smaller one is a slip of units, not a GPU.
inline constexpr double kMinGpuTflops = 1e-3;
inline constexpr double kMaxBandwidthGBps = 1e9;  // HBM, NVLink, PCIe bandwidth
// The least non-zero bandwidth (GB/s) of a link or memory: 1 MB/s keeps the largest transfer a
// plan can hold far below the longest node time a plan file takes (kMaxNodeTimeUs).
inline constexpr double kMinBandwidthGBps = 1e-3;
inline constexpr double kMinGpuMemoryGiB = 1.0;  // hbm_gib: a GPU one can train on

// Files and task graphs.
inline constexpr std::int64_t kMaxFileBytes = 1LL << 30;  // any file pipeplan reads
inline constexpr int kMaxJsonDepth = 64;       // nesting of arrays and objects in any JSON read
inline constexpr int kMaxPlanNodes = 1 << 22;  // task-graph nodes in a plan file
inline constexpr int kMaxCsvCells = 1 << 22;   // cells of a PyTorch schedule CSV
// Everything a plan allocates, summed over its nodes and devices: keeps running memory totals
// (simulator, validator) far from int64 overflow.
inline constexpr std::int64_t kMaxPlanBytes = 1LL << 60;
// One task-graph node's duration in a plan file (31,700 years): sums over every node stay finite.
inline constexpr double kMaxNodeTimeUs = 1e18;

// The CLI.
inline constexpr int kMaxWidth = 10000;     // show --width (terminal columns)
inline constexpr int kMaxRunSteps = 10000;  // run --steps
// run/profile --gemm-candidates: cuBLASLt answers timed per GEMM shape (each runs 4 times).
inline constexpr int kMaxGemmCandidates = 64;
// profile --max-concat when measuring (cuda, cpu): p2 over k micro-batches holds k retained sets.
inline constexpr int kMaxMeasuredP2Concat = 64;

// "<what> is above the limit of <limit>[ <unit>] (docs/reference/limits.md)", the text every limit
// error carries.
std::string above_limit(std::string_view what, double limit, std::string_view unit = {});
// A value as printf's %g writes it ("1.5", "1e+20"), for the value a message quotes.
std::string general_number(double value);
// general_number with the digits it takes to differ from `other` (1000001 beside a limit of
// 1000000, where %g writes "1e+06"): for a value quoted beside the limit it breaks.
std::string general_number_beside(double value, double other);
// "" for a bandwidth (GB/s) of 0 or at least kMinBandwidthGBps, else what is wrong, for
// "<field> ...": "= 1e-300 is neither 0 (<zero_means>) nor at least 0.001
// (docs/reference/limits.md)". Every reader of a link or memory bandwidth asks it.
std::string bandwidth_problem(double gbps, std::string_view zero_means);

// Throws FieldError(field, "<value> is above the limit of <limit> (docs/reference/limits.md)") when
// value > limit.
void check_limit(std::string_view field, std::int64_t value, std::int64_t limit);

}  // namespace pipeplan::limits
