#include "profiles/tensor_parallel.h"

#include <string>

#include "planner/base/error.h"
#include "planner/base/limits.h"

namespace pipeplan {

Profile tensor_parallel_profile(Profile profile, int t) {
  if (t < 1) throw FieldError("tensor_parallel", "must be at least 1, got " + std::to_string(t));
  limits::check_limit("tensor_parallel", t, limits::kMaxTensorParallel);
  if (t == 1) return profile;
  // Megatron splits attention heads (and key/value groups) across the T GPUs of a stage.
  const ModelConfig& m = profile.model;
  if (m.family != "uniform" && (m.heads % t != 0 || m.kv_heads % t != 0)) {
    throw FieldError(
        "tensor_parallel",
        std::to_string(t) + " does not divide the " + std::to_string(m.heads) + " attention heads" +
            (m.kv_heads != m.heads ? " and " + std::to_string(m.kv_heads) + " key/value heads"
                                   : std::string()) +
            " of " + m.name);
  }
  // A mixture of experts: the T GPUs split its experts (expert parallelism inside the group,
  // as Megatron-Core's expert-parallel size = T), so each routes and holds 1/T of the rows.
  if (m.experts > 0 && m.experts % t != 0) {
    throw FieldError("tensor_parallel", std::to_string(t) + " does not divide the " +
                                            std::to_string(m.experts) + " experts of " + m.name +
                                            " (the GPUs of a stage split them)");
  }
  const double td = static_cast<double>(t);
  for (auto& [kind, by_mbs] : profile.layers) {
    for (auto& [mbs, c] : by_mbs) {
      c.forward_us /= td;
      c.p1_us /= td;
      c.p2_us /= td;
      for (auto& [k, us] : c.p2_concat_us)
        us /= td;
      // Each GPU updates its own 1/T of the parameters.
      c.optimizer_us /= td;
      c.stash_bytes /= t;
      c.retained_bytes /= t;
      c.param_bytes /= t;
      c.grad_bytes /= t;
      c.optimizer_bytes /= t;
      c.send_bytes /= t;
      c.forward_work_bytes /= t;
      c.p1_work_bytes /= t;
      for (auto& [k, bytes] : c.p2_work_bytes)
        bytes /= t;
    }
  }
  profile.provenance.notes +=
      " Tensor parallel " + std::to_string(t) +
      " applied analytically (profiles/tensor_parallel.h): per-stage "
      "times (optimizer step included) and bytes divided by T, TP communication not modelled.";
  return profile;
}

}  // namespace pipeplan
