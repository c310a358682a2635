#include "tools/plan_options.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"
#include "planner/search/auto_schedule.h"
#include "profiles/analytic.h"
#include "profiles/data_parallel.h"
#include "profiles/gpu.h"
#include "profiles/layout.h"
#include "profiles/recompute.h"
#include "profiles/tensor_parallel.h"
#include "schedules/family.h"
#include "tools/cli_checks.h"
#include "tools/units.h"

namespace pipeplan {

void add_data_parallel_options(CLI::App& app, PlanOptions& o) {
  app.add_option("--data-parallel", o.data_parallel,
                 "replicas D of the whole pipeline: tokens per step x D, and each optimizer step "
                 "combines its gradients across them (analytic)")
      ->capture_default_str();
  app.add_option("--dp-optimizer", o.dp_optimizer,
                 "sharded (Megatron's distributed optimizer: reduce-scatter, 1/D of the update, "
                 "all-gather) or replicated (all-reduce) (default: sharded)");
  app.add_option("--dp-link-bandwidth", o.dp_link_bandwidth,
                 "GB/s per direction per GPU between a stage's replicas (default: the stages' "
                 "link; e.g. 50 for 400 Gb/s InfiniBand per GPU)");
  app.add_option("--dp-link-latency", o.dp_link_latency,
                 "microseconds per collective between a stage's replicas (default: the stages' "
                 "link's)");
}

void add_plan_options(CLI::App& app, PlanOptions& o, bool with_schedule) {
  app.add_option("--model", o.model, "model preset or a Hugging Face config.json");
  app.add_option("--gpu", o.gpu,
                 "GPU from profiles/gpus.json (h100, h100-pcie, h200, a100, cpu; default: the "
                 "--profile's GPU, else h100)");
  app.add_option("--profile", o.profile,
                 "profile JSON (default: the analytic model; - reads standard input)");
  app.add_option("--stages", o.stages, "pipeline devices P")->required();
  app.add_option("--microbatches,-m", o.microbatches, "micro-batches per step m (required)")
      ->each([&o](const std::string&) { o.microbatches_given = true; });
  app.add_option("--mbs", o.mbs, "micro-batch size")->capture_default_str();
  app.add_option("--seq", o.seq, "sequence length (default: the model's)")
      ->check(int_range(1, limits::kMaxSeq));
  // Without --chunks the --schedule family runs its smallest count: more than one for the V
  // shapes. (compare tries each family that takes several at its preferred count.)
  std::string defaults;
  if (with_schedule) {
    std::map<int, std::string> by_count;
    for (const ScheduleFamily* family : schedule_families()) {
      std::string& names = by_count[default_chunks(*family)];
      names += (names.empty() ? "" : ", ") + family->name();
    }
    for (const auto& [count, names] : by_count) {
      defaults += (defaults.empty() ? "; default: " : ", ") + std::to_string(count) +
                  (defaults.empty() ? "" : " for " + names);
    }
  }
  app.add_option("--chunks", o.chunks, "virtual stages per device (interleaved" + defaults + ")")
      ->check(int_range(1, limits::kMaxChunks));
  if (with_schedule) {
    std::string families;
    for (const ScheduleFamily* family : schedule_families())
      families += (families.empty() ? "" : ", ") + family->name();
    app.add_option("--schedule", o.schedule, "schedule family: " + families)->capture_default_str();
    app.add_option("--backward", o.backward,
                   "fused, 2bp, 2bp-fill (default: fused; 2bp for families that place p2)");
  }
  app.add_option("--p2-concat", o.p2_concat,
                 "micro-batches per concatenated p2 call in 2bp modes (0 = all)")
      ->capture_default_str();
  app.add_option("--memory", o.memory,
                 "memory limit per device, e.g. 80GiB (default: HBM; 0: no limit)");
  app.add_option("--reserve", o.reserve,
                 "kept back from --memory for CUDA context, NCCL, fragmentation (default: 1GiB "
                 "+ 4 %)");
  app.add_option("--attention", o.attention,
                 "materialized, recompute, flash (analytic model; default: flash, a --profile's "
                 "own)");
  app.add_option("--layers-per-stage", o.layers_per_stage,
                 "blocks per virtual stage, e.g. 7,8,8,9 (default: balanced)");
  app.add_option("--layout", o.layout,
                 "the split as a Megatron-LM layout, e.g. 'Et*7|t*8|t*8|t*9L' (E embedding, t "
                 "transformer layer, L loss; stages in Megatron's virtual-stage order)");
  app.add_option("--uniform", o.uniform, "identical stages F:B:W:COMM in ms (no model)");
  app.add_option("--uniform-mem", o.uniform_mem, "GiB allocated by F:P1:P2, summing to 0");
  app.add_option("--bpipe", o.bpipe,
                 "BPipe activation transfers: off, on, auto (auto needs --global-batch)")
      ->capture_default_str();
  app.add_option("--tensor-parallel", o.tensor_parallel,
                 "GPUs per stage T: divides per-stage time and memory by T and adds the "
                 "tensor-parallel collectives over NVLink (analytic)")
      ->capture_default_str();
  add_data_parallel_options(app, o);
  app.add_option("--recompute", o.recompute,
                 "activation recomputation (Megatron-LM's --recompute-granularity full): none, "
                 "full (every block keeps its input and re-runs its forward before its p1), N "
                 "(the first N blocks of each stage) or auto (the fewest that fit --memory) "
                 "(default: none)");
  app.add_option("--link-bandwidth", o.link_bandwidth,
                 "GB/s per direction between pipeline stages (default: the profile's p2p, the "
                 "GPU's NVLink or PCIe; e.g. 50 for 400 Gb/s InfiniBand between nodes)");
  app.add_option("--link-latency", o.link_latency,
                 "microseconds per transfer between pipeline stages (default: the profile's)");
  app.add_option("--overlap-efficiency", o.overlap_efficiency,
                 "how much of the shorter op an overlapped pair (dualpipe-v's F&B) hides, 0..1: "
                 "F&B = max(F,B) + (1-E)*min(F,B) (default: the profile's, else 0)");
  app.add_option("--objective", o.objective,
                 "what auto minimises: step (step time, synchronising optimizer) or steady "
                 "(largest stage span: overlapping iterations); the other breaks ties")
      ->capture_default_str();
  app.add_option("--auto-copies", o.auto_copies,
                 "copies of the model auto may hold: 2 (DualPipe's two copies, twice the "
                 "parameters, among its layouts) or 1 (one copy: a plan PyTorch's schedule CSV and "
                 "Megatron-LM can take)")
      ->check(int_range(1, 2))
      ->capture_default_str();
}

double default_reserve_bytes(double memory_bytes) {
  constexpr double kRuntimeBytes = 1024.0 * 1024 * 1024;  // CUDA context + NCCL buffers
  constexpr double kFragmentationFraction = 0.04;         // allocator fragmentation, op workspaces
  return memory_bytes > 0 ? kRuntimeBytes + kFragmentationFraction * memory_bytes : 0;
}

namespace {

struct MemoryBudget {
  double memory = 0, reserve = 0;
};

MemoryBudget memory_budget(const PlanOptions& o, const GpuSpec& gpu) {
  MemoryBudget b;
  b.memory = o.memory.empty() ? (o.uniform.empty() ? gpu.hbm_bytes : 0.0)
                              : parse_bytes(o.memory, "--memory");
  if (!o.reserve.empty()) {
    b.reserve = parse_bytes(o.reserve, "--reserve");
    if (b.reserve < 0) throw Error("--reserve: must not be negative");
    if (b.memory <= 0) {
      throw Error("--reserve: " +
                  std::string(o.memory.empty() ? "--uniform without --memory" : "--memory 0") +
                  " sets no memory limit to keep it back from");
    }
  } else if (o.uniform.empty()) {
    b.reserve = default_reserve_bytes(b.memory);
  }
  if (b.memory > 0 && b.reserve >= b.memory) {
    // Without --memory the memory is the GPU's, from gpus.json: say where it came from.
    const std::string of = o.memory.empty()
                               ? "the " + format_gib(b.memory) + " of " + gpu.name +
                                     " (hbm_gib in " + (data_dir() / "gpus.json").string() + ")"
                               : "--memory " + format_gib(b.memory);
    throw Error("--reserve: " + format_gib(b.reserve) + " leaves nothing of " + of);
  }
  if (b.memory <= 0) b.reserve = 0;  // unlimited stays unlimited
  return b;
}

}  // namespace

double usable_memory_bytes(const PlanOptions& options, const GpuSpec& gpu) {
  const MemoryBudget b = memory_budget(options, gpu);
  if (b.memory <= 0) return 0;
  // A whole number of bytes (75.8 GiB is 81389630259.2), and never 0, which is no limit.
  return std::max(1.0, std::floor(b.memory - b.reserve));
}

std::string memory_budget_text(const PlanOptions& options, const GpuSpec& gpu) {
  const MemoryBudget b = memory_budget(options, gpu);
  if (b.memory <= 0) {
    return "none (--memory 0): plans are not held to the " + format_gib(gpu.hbm_bytes) +
           " of one " + gpu.name + ", and may not fit it";
  }
  return "--memory " + format_gib(b.memory) + " - reserve " + format_gib(b.reserve) + " = " +
         format_gib(b.memory - b.reserve) + " per GPU";
}

namespace {

// Micro-batch sizes as text: "1, 2, 4".
std::string sizes_text(const std::vector<int>& sizes) {
  std::string text;
  for (const int mbs : sizes)
    text += (text.empty() ? "" : ", ") + std::to_string(mbs);
  return text;
}

// `base` with a bandwidth (GB/s per direction) and a latency (us) given as option text in place
// of its own; empty text keeps base's.
P2pLink link_options(P2pLink base, const std::string& bandwidth, std::string_view bandwidth_flag,
                     const std::string& latency, std::string_view latency_flag) {
  if (!bandwidth.empty()) {
    const double gbps = parse_number_in(bandwidth, bandwidth_flag, 0, limits::kMaxBandwidthGBps);
    if (const std::string problem = limits::bandwidth_problem(gbps, "no bandwidth limit");
        !problem.empty()) {
      throw Error(std::string(bandwidth_flag) + " " + problem);
    }
    base.bandwidth_GBps = gbps;
  }
  if (!latency.empty()) {
    base.latency_us = parse_number_in(latency, latency_flag, 0, limits::kMaxLinkLatencyUs);
  }
  return base;
}

// --link-bandwidth and --link-latency: the stages' link in place of the profile's.
void apply_link_options(const PlanOptions& o, Profile& profile) {
  profile.p2p = link_options(profile.p2p, o.link_bandwidth, "--link-bandwidth", o.link_latency,
                             "--link-latency");
}

// --data-parallel and its --dp-* options; the link between replicas defaults to `stage_link`
// (the stages' link, after --link-bandwidth and --link-latency).
DataParallel data_parallel_options(const PlanOptions& o, const P2pLink& stage_link) {
  if (o.data_parallel < 1) throw Error("--data-parallel: must be at least 1");
  limits::check_limit("data_parallel", o.data_parallel, limits::kMaxDataParallel);
  if (o.data_parallel == 1) {
    for (const auto& [given, flag] : {std::pair{&o.dp_optimizer, "--dp-optimizer"},
                                      std::pair{&o.dp_link_bandwidth, "--dp-link-bandwidth"},
                                      std::pair{&o.dp_link_latency, "--dp-link-latency"}}) {
      if (!given->empty()) throw Error(std::string(flag) + ": needs --data-parallel above 1");
    }
  }
  DataParallel dp;
  dp.replicas = o.data_parallel;
  if (!o.dp_optimizer.empty()) dp.optimizer = data_parallel_optimizer_from_string(o.dp_optimizer);
  dp.link = link_options(stage_link, o.dp_link_bandwidth, "--dp-link-bandwidth", o.dp_link_latency,
                         "--dp-link-latency");
  return dp;
}

// The profile as one pipeline replica of the request runs it: tensor parallelism, the stages'
// link options, then data parallelism (whose link defaults to the stages'). Returns the
// data-parallel layout applied.
DataParallel apply_parallelism(const PlanOptions& o, const GpuSpec& gpu, Profile& profile) {
  profile = tensor_parallel_profile(std::move(profile), o.tensor_parallel, node_link(gpu));
  apply_link_options(o, profile);
  const DataParallel dp = data_parallel_options(o, profile.p2p);
  profile = data_parallel_profile(std::move(profile), dp);
  return dp;
}

// The attention the analytic model estimates: --attention, else flash.
Attention analytic_attention(const PlanOptions& o) {
  return o.attention.empty() ? Attention::flash : attention_from_string(o.attention);
}

// `plan_mbs`: the profile must hold --mbs for every layer (a search with a global batch tries
// the sizes it holds instead).
Profile load_request_profile(const PlanOptions& o, const GpuSpec& gpu, bool plan_mbs) {
  if (!o.uniform.empty()) {
    if (!o.model.empty() || !o.profile.empty()) {
      throw Error("--uniform: cannot be combined with --model or --profile");
    }
    // Identical stages of given times: no model whose sequence or attention these could set.
    if (o.seq != 0) throw Error("--seq: --uniform gives the times (no model to apply it to)");
    if (!o.attention.empty()) {
      throw Error("--attention: --uniform gives the times (no model to apply it to)");
    }
    // Its COMM field is each transfer's time: a link's latency or bandwidth has nothing to add.
    for (const auto& [given, flag] : {std::pair{&o.link_latency, "--link-latency"},
                                      std::pair{&o.link_bandwidth, "--link-bandwidth"}}) {
      if (!given->empty()) {
        throw Error(std::string(flag) +
                    ": --uniform gives each transfer's time (its COMM field, F:B:W:COMM)");
      }
    }
    // The costs are one micro-batch's: another size is refused naming the option, before the
    // profile's lookup fails naming none.
    if (plan_mbs && o.mbs != 1) {
      throw Error("--mbs: --uniform has no cost at micro-batch size " + std::to_string(o.mbs) +
                  " (its costs are at micro-batch size 1 only)");
    }
    const UniformCosts costs =
        parse_uniform(o.uniform, o.uniform_mem.empty() ? "0:0:0" : o.uniform_mem);
    // auto may cut each device's stage in two (a V, interleaved): two blocks per device then.
    const int per_device = o.uniform_blocks_per_device > 0   ? o.uniform_blocks_per_device
                           : o.schedule == kAutoScheduleName ? 2 * o.chunks
                                                             : o.chunks;
    return uniform_profile(costs, o.stages * per_device, per_device);
  }
  if (!o.uniform_mem.empty()) throw Error("--uniform-mem: needs --uniform");
  if (!o.profile.empty()) {
    Profile profile = o.profile_read ? *o.profile_read : load_profile(o.profile);
    if (!o.model.empty() && o.model != profile.model.name) {
      throw Error("--model: '" + o.model + "' does not match the model '" + profile.model.name +
                  "' of profile " + o.profile);
    }
    if (o.seq != 0 && o.seq != profile.seq) {
      throw Error("--seq: " + std::to_string(o.seq) + " differs from the profile's sequence " +
                  std::to_string(profile.seq) + " (" + o.profile + ")");
    }
    if (!o.attention.empty() && attention_from_string(o.attention) != profile.attention) {
      throw Error("--attention: " + o.attention + " differs from the profile's attention " +
                  std::string(to_string(profile.attention)) + " (" + o.profile + ")");
    }
    if (plan_mbs) {
      if (const std::string missing = profile.missing_cost(profile.model, o.mbs); !missing.empty())
        throw Error("--mbs: " + input_name(o.profile) + " has " + missing);
    }
    return profile;
  }
  if (o.model.empty()) throw Error("--model: required (or give --profile or --uniform)");
  const ModelConfig model = resolve_model(o.model);
  AnalyticOptions analytic;
  analytic.seq = o.seq;
  analytic.micro_batch_sizes = {o.mbs};
  analytic.attention = analytic_attention(o);
  analytic.max_p2_concat = std::max(1, o.p2_concat == 0 ? o.microbatches : o.p2_concat);
  return analytic_profile(model, gpu, analytic);
}

}  // namespace

std::string config_sequence_note(const PlanOptions& options, const Profile& profile) {
  if (options.seq != 0 || !options.profile.empty() || profile.model.hf_model_type.empty())
    return "";
  return "; at sequence " + std::to_string(profile.seq) +
         ", the config's max_position_embeddings (--seq sets it)";
}

namespace {
PlanRequest request_for(const PlanOptions& options, const Schedule* given, bool plan_mbs = true);
}  // namespace

SearchRequest make_search_request(const PlanOptions& options, int global_batch,
                                  const std::string& mbs_list, std::string_view mbs_flag) {
  if (global_batch < 0) throw Error("--global-batch: must be positive");
  if (global_batch > 0) limits::check_limit("global_batch", global_batch, limits::kMaxGlobalBatch);
  std::vector<int> candidates =
      mbs_list.empty() ? std::vector<int>{1, 2, 4, 8} : parse_candidate_list(mbs_list, mbs_flag);
  if (candidates.size() > static_cast<std::size_t>(limits::kMaxSizeCandidates)) {
    throw Error(std::string(mbs_flag) + ": " +
                limits::above_limit(std::to_string(candidates.size()) + " sizes",
                                    limits::kMaxSizeCandidates));
  }
  PlanOptions o = options;
  // A placeholder that builds no profile for the global batch: the search sets m per size.
  if (global_batch > 0) o.microbatches = 1;
  // Uniform costs in half stages: the two-chunk families (V, interleaved) the search tries get
  // P x 2 stages, the others whole ones, as each family gets from compare.
  o.uniform_blocks_per_device = 2;
  // The profile with every p2 group size (as profile_for's below): --p2-concat bounds the
  // families that leave p2 to --backward, and the search plans the others without it.
  o.p2_concat = 0;
  SearchRequest s;
  s.base = request_for(o, nullptr, global_batch == 0);
  s.base.p2_concat = options.p2_concat;
  check_plan_request(s.base);
  if (global_batch == 0) return s;
  // Each replica of the pipeline takes 1/D of the global batch.
  const int replicas = s.base.data_parallel.replicas;
  if (global_batch % replicas != 0) {
    throw Error("--global-batch: " + std::to_string(global_batch) +
                " samples do not divide among --data-parallel " + std::to_string(replicas) +
                " replicas");
  }
  const int per_replica = global_batch / replicas;
  s.global_batch = per_replica;
  if (!o.uniform.empty()) {
    // As --mbs: a size the list names and the costs do not hold is refused, not planned at 1
    // instead (without a list, the sizes tried are those the costs hold: 1).
    std::vector<int> others;
    std::copy_if(candidates.begin(), candidates.end(), std::back_inserter(others),
                 [](int mbs) { return mbs != 1; });
    if (!mbs_list.empty() && !others.empty()) {
      throw Error(std::string(mbs_flag) + ": --uniform has no cost at micro-batch size" +
                  (others.size() > 1 ? "s " : " ") + sizes_text(others) +
                  " (its costs are at micro-batch size 1 only)");
    }
    candidates = {1};
  } else if (!o.profile.empty()) {
    const std::vector<int> held = s.base.profile.micro_batch_sizes();
    const auto lacks = [&](int mbs) {
      return std::find(held.begin(), held.end(), mbs) == held.end();
    };
    if (!mbs_list.empty()) {
      // As --mbs: a size the list names and the profile has no cost at is refused, not left out
      // (the default list is filtered to the sizes the profile holds).
      std::vector<int> missing;
      std::copy_if(candidates.begin(), candidates.end(), std::back_inserter(missing), lacks);
      if (!missing.empty()) {
        throw Error(std::string(mbs_flag) + ": " + input_name(o.profile) +
                    " has no cost at micro-batch size" + (missing.size() > 1 ? "s " : " ") +
                    sizes_text(missing) + " (it holds micro-batch size" +
                    (held.size() > 1 ? "s " : " ") + sizes_text(held) + ")");
      }
    }
    std::erase_if(candidates, lacks);
    if (candidates.empty()) {
      throw Error(std::string(mbs_flag) + ": " + input_name(o.profile) +
                  " holds micro-batch sizes " + sizes_text(held) + ", none of 1, 2, 4, 8");
    }
  } else {
    const GpuSpec gpu = find_gpu(s.base.gpu);
    const ModelConfig model = resolve_model(o.model);
    s.profile_for = [o, gpu, model, per_replica](int mbs) {
      AnalyticOptions analytic;
      analytic.seq = o.seq;
      analytic.micro_batch_sizes = {mbs};
      analytic.attention = analytic_attention(o);
      // Every group size: --p2-concat bounds the families that leave p2 to --backward, and the
      // search plans the others without it.
      analytic.max_p2_concat = std::max(1, per_replica / mbs);
      Profile profile = analytic_profile(model, gpu, analytic);
      apply_parallelism(o, gpu, profile);
      return profile;
    };
  }
  // Every size the search will try, checked now: a global batch no size splits within the
  // limits fails here, before any plan is built.
  try {
    static_cast<void>(global_batch_splits(per_replica, candidates));
  } catch (const FieldError& e) {
    if (replicas == 1) throw;
    throw Error("--global-batch: " + std::to_string(global_batch) + " over " +
                std::to_string(replicas) + " replicas is " + std::to_string(per_replica) +
                " samples per replica: " + e.detail() + " (" + std::string(mbs_flag) + ")");
  }
  s.mbs_candidates = candidates;
  return s;
}

namespace {

// --layout without --chunks sets the chunks (o.chunks, from its stage count): a count the
// --schedule family does not run is refused naming the layout, not --chunks.
void check_layout_chunks(const PlanOptions& o) {
  const ScheduleFamily& family = find_schedule_family(o.schedule);
  const ChunkRule& rule = family.traits().chunks;
  if (rule.accepts(o.chunks)) return;
  const int replicas = family.traits().replicas;
  const auto layout_stages = [&](int chunks) {
    return std::to_string(chunks * o.stages / replicas);
  };
  throw Error(
      "--layout: " + layout_stages(o.chunks) + " stages on " + std::to_string(o.stages) +
      " devices are " + std::to_string(o.chunks) + (o.chunks == 1 ? " chunk" : " chunks") +
      " per device" +
      (replicas > 1
           ? " (" + o.schedule + " holds each stage " + std::to_string(replicas) + " times)"
           : "") +
      "; schedule '" + o.schedule + "' runs " +
      (rule.min == rule.max
           ? std::to_string(rule.min) + " (a layout of " + layout_stages(rule.min) + " stages)"
           : std::to_string(rule.min) + " to " + std::to_string(rule.max) + " (a layout of " +
                 layout_stages(rule.min) + " to " + layout_stages(rule.max) + " stages)"));
}

// make_request; with `given`, make_request_for_schedule.
PlanRequest request_for(const PlanOptions& options, const Schedule* given, bool plan_mbs) {
  PlanOptions o = options;
  if (!o.layout.empty()) {
    if (!o.layers_per_stage.empty()) {
      throw Error("--layout: give it or --layers-per-stage, not both");
    }
    if (given == nullptr && o.schedule == kAutoScheduleName) {
      throw Error(
          "--layout: --schedule auto chooses its own split; give the family to run the "
          "layout with");
    }
    // The layout's stages are the plan's virtual stages: P x V of them (a family holding the
    // model twice, dualpipe, has each of them twice).
    const int replicas =
        given != nullptr ? given->replicas : find_schedule_family(o.schedule).traits().replicas;
    const int stages = megatron_layout_stages(o.layout) * replicas;
    if (given != nullptr && stages != given->stage_count()) {
      throw Error("--layout: " + std::to_string(stages) + " stages, the schedule read has " +
                  std::to_string(given->stage_count()));
    }
    if (o.stages < 1) throw Error("--stages: must be at least 1");  // as check_plan_request says
    if (stages % o.stages != 0) {
      throw Error("--layout: " + std::to_string(stages) + " stages do not divide among --stages " +
                  std::to_string(o.stages));
    }
    if (given == nullptr && o.chunks != 0 && o.chunks != stages / o.stages) {
      throw Error("--layout: " + std::to_string(stages) + " stages on " + std::to_string(o.stages) +
                  " devices are " + std::to_string(stages / o.stages) + " chunks, not --chunks " +
                  std::to_string(o.chunks));
    }
    if (given == nullptr) o.chunks = stages / o.stages;
  }
  if (given != nullptr) {
    o.schedule = given->family;
    o.chunks = given->devices > 0 ? given->stage_count() / given->devices : 0;
  } else if (o.schedule == kAutoScheduleName && o.chunks != 0) {
    // Its one chunk is a placeholder the family accepts: --chunks 1 would be silently ignored.
    throw Error(
        "--chunks: schedule 'auto' chooses its chunks per device itself (one or two), "
        "got " +
        std::to_string(o.chunks) + "; leave --chunks out");
  } else if (o.chunks == 0) {
    o.chunks = default_chunks(find_schedule_family(o.schedule));
  }
  if (o.microbatches == 0 && !o.microbatches_given) {
    throw Error("--microbatches: required (micro-batches per step)");
  }
  PlanRequest r;
  r.devices = o.stages;
  r.chunks = o.chunks;
  r.microbatches = o.microbatches;
  r.mbs = o.mbs;
  r.p2_concat = o.p2_concat;
  // Every size within its limit before anything is built for it (planner/base/limits.h).
  check_plan_request(r);
  if (o.seq < 0) throw Error("--seq: must be positive");
  limits::check_limit("seq", o.seq, limits::kMaxSeq);
  if (o.tensor_parallel < 1) throw FieldError("tensor_parallel", "must be at least 1");
  limits::check_limit("tensor_parallel", o.tensor_parallel, limits::kMaxTensorParallel);
  // The GPU: --gpu, else the one a measured --profile records, else h100 (an analytic profile is
  // made for the first, so the profile is loaded once and names it either way).
  const GpuSpec requested = find_gpu(o.gpu.empty() ? "h100" : o.gpu);
  Profile profile = load_request_profile(o, requested, plan_mbs);
  const GpuSpec gpu = o.gpu.empty() && !profile.gpu.empty() ? find_gpu(profile.gpu) : requested;
  // A measured profile's costs are its GPU's: labelling them another GPU would mix two machines.
  if (!o.gpu.empty() && !o.profile.empty() && !profile.gpu.empty() &&
      find_gpu(profile.gpu).name != requested.name) {
    throw FieldError("gpu", "'" + o.gpu + "' is not the GPU of profile " + o.profile + " (" +
                                profile.gpu + "); profile that GPU, or leave --gpu out");
  }
  r.memory_limit_bytes = usable_memory_bytes(o, gpu);
  if (!o.layers_per_stage.empty()) {
    r.layers_per_stage = parse_int_list(o.layers_per_stage, "--layers-per-stage");
  }
  if (!o.layout.empty()) {
    r.layers_per_stage = blocks_from_megatron_layout(o.layout, profile.model);
    // The chunks come from the layout here: a count the family does not run is the layout's.
    if (given == nullptr) check_layout_chunks(o);
  }
  check_plan_request(r);
  r.profile = std::move(profile);
  r.data_parallel = apply_parallelism(o, gpu, r.profile);
  if (!o.recompute.empty()) r.recompute = recompute_from_string(o.recompute);
  if (!o.overlap_efficiency.empty()) {
    r.profile.overlap = {parse_fraction(o.overlap_efficiency, "--overlap-efficiency"),
                         "--overlap-efficiency " + o.overlap_efficiency};
  }
  r.gpu = gpu.name;
  // With tensor parallelism a pipeline device is a group of T GPUs.
  r.peak_flops_per_device = gpu.peak_bf16_tflops * 1e12 * o.tensor_parallel;
  r.tensor_parallel = o.tensor_parallel;
  r.bpipe = bpipe_mode_from_string(o.bpipe);
  r.schedule = o.schedule;
  if (given != nullptr) {
    r.backward = given->backward;
  } else {
    std::optional<BackwardMode> backward;
    if (!o.backward.empty()) backward = backward_mode_from_string(o.backward);
    r.backward = resolve_backward_mode(find_schedule_family(o.schedule), backward);
  }
  r.objective = objective_from_string(o.objective);
  r.auto_copies = o.auto_copies;
  return r;
}

}  // namespace

PlanRequest make_request(const PlanOptions& options) {
  return request_for(options, nullptr);
}

PlanRequest make_request_for_schedule(const PlanOptions& options, const Schedule& schedule) {
  return request_for(options, &schedule);
}

}  // namespace pipeplan
