// The options shared by `pipeplan plan` and `pipeplan compare`, and how they become a request.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "planner/plan/make_plan.h"
#include "planner/search/search.h"
#include "profiles/gpu.h"

namespace pipeplan {

struct PlanOptions {
  std::string model;
  std::string gpu;      // empty: the profile's GPU, else h100 (make_request)
  std::string profile;  // a profile file; else analytic (or uniform)
  // The profile file already read (what `compare`'s rows share: '-' is read once), else null.
  std::shared_ptr<const Profile> profile_read;
  int stages = 0;
  int microbatches = 0;
  bool microbatches_given = false;  // -m on the command line (0 given is refused as 0, not missing)
  int mbs = 1;
  int seq = 0;
  int chunks = 0;  // 0: the family's own count (default_chunks: 1, or 2 for the V families,
                   // interleaved and looped-bfs)
  std::string schedule = "1f1b";
  std::string backward;  // empty: the family's default (resolve_backward_mode)
  int p2_concat = 0;
  std::string memory;     // empty: the GPU's HBM size
  std::string reserve;    // kept back from --memory per GPU; empty: default_reserve_bytes
  std::string attention;  // empty: flash for the analytic model, a --profile's own
  std::string layers_per_stage;
  std::string layout;  // a Megatron-LM --pipeline-model-parallel-layout (profiles/layout.h)
  std::string uniform;
  std::string uniform_mem;
  // --uniform's blocks per device: 0, the plan's chunks (twice them for auto, which may cut a
  // device's stage in two); --search sets 2, the most chunks a family it tries prefers.
  int uniform_blocks_per_device = 0;
  std::string bpipe = "off";  // off, on, auto (planner/plan/bpipe.h)
  int tensor_parallel = 1;    // GPUs per pipeline stage (profiles/tensor_parallel.h)
  // Replicas of the pipeline (profiles/data_parallel.h), their optimizer layout (empty:
  // sharded) and the link between a stage's replicas (empty: the stages' link, after
  // --link-bandwidth and --link-latency).
  int data_parallel = 1;
  std::string dp_optimizer;
  std::string dp_link_bandwidth;
  std::string dp_link_latency;
  std::string recompute;           // none or full (profiles/recompute.h); empty: none
  std::string objective = "step";  // what auto minimises: step or steady (schedules/family.h)
  // Copies of the model auto may hold: 2 (DualPipe's layout among its own) or 1.
  int auto_copies = 2;
  // An overlapped pair's efficiency (profiles/overlap.h) in place of the profile's; empty: the
  // profile's.
  std::string overlap_efficiency;
  // The link between pipeline stages in place of the profile's (a measured profile's p2p, else
  // the GPU's NVLink or PCIe): GB/s per direction and microseconds; empty: the profile's.
  std::string link_bandwidth;
  std::string link_latency;
};

// What a plan may not use of a GPU's memory because no profile counts it (docs/design/bpipe.md,
// "Memory reserve"): the CUDA context with its loaded kernels (~0.5 GiB with lazy module
// loading), NCCL communicator buffers (NCCL_BUFFSIZE = 4 MiB per channel and peer, ~0.5 GiB for
// the TP ring and the PP peers), and 4 % of the memory for the caching allocator's
// fragmentation and the transient buffers inside one op (cuBLAS workspaces, the attention scores
// that recompute re-creates during p1). 1 GiB + 4 % of `memory_bytes`: 4.2 GiB of 80 GiB.
double default_reserve_bytes(double memory_bytes);
// The per-device limit a plan must fit: --memory (default HBM) less --reserve (default above;
// none for --uniform, which has no runtime). 0 = unlimited (`--memory 0`, and --uniform without
// --memory). Throws Error naming the option, or gpus.json when the memory is the GPU's.
double usable_memory_bytes(const PlanOptions& options, const GpuSpec& gpu);
// "--memory 80.00 GiB - reserve 4.20 GiB = 75.80 GiB per GPU"; unlimited (--memory 0): "none
// (--memory 0): plans are not held to the 80.00 GiB of one h100-sxm, and may not fit it".
std::string memory_budget_text(const PlanOptions& options, const GpuSpec& gpu);

// What a memory-limit error adds where the sequence is a config.json's own, its
// max_position_embeddings (a context capacity, not a training length: Qwen2.5-7B's 131072):
// "; at sequence 131072, the config's max_position_embeddings (--seq sets it)"; else "".
// `profile`: the request's.
std::string config_sequence_note(const PlanOptions& options, const Profile& profile);

// `with_schedule` adds --schedule and --backward (plan) or leaves them out (compare).
void add_plan_options(CLI::App& app, PlanOptions& options, bool with_schedule);
// --data-parallel, --dp-optimizer, --dp-link-bandwidth, --dp-link-latency (in add_plan_options;
// also `bpipe`'s).
void add_data_parallel_options(CLI::App& app, PlanOptions& options);
// Throws Error naming the option on bad input. The one place a front end decides the chunks and
// the backward mode a request leaves to its family (schedules/family.h); make_plan applies them
// as given.
PlanRequest make_request(const PlanOptions& options);
// The request for a schedule given as data (an imported CSV): its devices' chunks, its family
// label and its backward mode are the schedule's own, which no family decides.
PlanRequest make_request_for_schedule(const PlanOptions& options, const Schedule& schedule);
// `plan --search`: with `global_batch` > 0 every size in `mbs_list` ("1,2,4,8"; empty: powers of
// two up to 8) that divides it, with an analytic profile per size unless --profile/--uniform
// gives the costs: the default list is then cut to the sizes they hold, and a size a given list
// names that they lack is refused. Throws Error naming the option (`mbs_flag` for the list); the
// global batch and sizes are checked against their limits before any plan.
SearchRequest make_search_request(const PlanOptions& options, int global_batch,
                                  const std::string& mbs_list, std::string_view mbs_flag);

}  // namespace pipeplan
