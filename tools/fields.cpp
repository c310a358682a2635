#include "tools/fields.h"

#include <array>
#include <utility>

namespace pipeplan {

std::string flag_for_field(std::string_view field) {
  // Request fields (PlanRequest, ScheduleRequest, SearchRequest, …) and the flags that set them.
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 30> kFlags{{
      {"devices", "--stages"},
      {"chunks", "--chunks"},
      {"microbatches", "--microbatches"},
      {"mbs", "--mbs"},
      {"p2_concat", "--p2-concat"},
      {"memory_limit_bytes", "--memory"},
      {"schedule", "--schedule"},
      {"backward", "--backward"},
      {"bpipe", "--bpipe"},
      {"layers_per_stage", "--layers-per-stage"},
      {"global_batch", "--global-batch"},
      {"tensor_parallel", "--tensor-parallel"},
      {"data_parallel", "--data-parallel"},
      {"recompute", "--recompute"},
      {"data_parallel_optimizer", "--dp-optimizer"},
      {"data_parallel_link", "--dp-link-bandwidth/--dp-link-latency"},
      {"seq", "--seq"},
      {"micro_batch_sizes", "--mbs"},
      {"max_p2_concat", "--max-concat"},
      {"uniform_times", "--uniform"},
      {"uniform_memory", "--uniform-mem"},
      {"gpu", "--gpu"},
      {"model", "--model"},
      {"emulate", "--emulate"},
      {"sm_partition", "--sm-partition"},
      {"backend", "--backend"},
      {"launcher", "--launcher"},
      {"objective", "--objective"},
      {"attention", "--attention"},
      {"layout", "--layout"},
  }};
  for (const auto& [name, flag] : kFlags) {
    if (name == field) return std::string(flag);
  }
  return std::string(field);
}

}  // namespace pipeplan
