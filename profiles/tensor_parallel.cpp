#include "profiles/tensor_parallel.h"

#include <cstdio>
#include <string>
#include <string_view>

#include "planner/base/error.h"
#include "planner/base/limits.h"

namespace pipeplan {

namespace {

// Megatron-LM's collectives per layer with sequence parallelism (Korthikanti et al. 2022, §4.2.2:
// an all-gather before and a reduce-scatter after each of a block's two tensor-parallel regions,
// the reverse in backward), counted as all-gathers or reduce-scatters of the layer's whole
// (mbs, seq, hidden) bf16 activation:
//   block      F: 4 (attention and MLP: gather in, scatter out); p1: 4 (the same in reverse);
//              p2: 2 (the sequence-sharded inputs of the QKV and first MLP GEMMs gathered again
//              for their weight gradients, as Megatron-LM does rather than keep them gathered)
//   embedding  F: 1 (the vocabulary-parallel lookup's partial sums reduce-scattered);
//              p2: 1 (the output gradient gathered for the table's gradient)
//   head       F: 1 (the final norm's output gathered for the vocabulary-parallel LM head);
//              p1: 1 (its input gradient reduce-scattered); p2: 1 (its input gathered again for
//              the LM head's weight gradient). The cross-entropy's all-reduces of (mbs, seq)
//              floats are left out.
struct Collectives {
  int forward = 0, p1 = 0, p2 = 0;
};

Collectives collectives_of(std::string_view kind) {
  if (kind == "block") return {4, 4, 2};
  if (kind == "embedding") return {1, 0, 1};
  if (kind == "head") return {1, 1, 1};
  return {};
}

}  // namespace

void check_tensor_parallel(const ModelConfig& m, int t) {
  if (t < 1) throw FieldError("tensor_parallel", "must be at least 1, got " + std::to_string(t));
  limits::check_limit("tensor_parallel", t, limits::kMaxTensorParallel);
  if (t == 1) return;
  // Megatron splits attention heads (and key/value groups) across the T GPUs of a stage.
  if (m.family != "uniform" && m.heads % t != 0) {
    throw FieldError("tensor_parallel", std::to_string(t) + " does not divide the " +
                                            std::to_string(m.heads) + " attention heads of " +
                                            m.name);
  }
  if (m.family != "uniform" && m.kv_heads % t != 0) {
    throw FieldError("tensor_parallel", std::to_string(t) + " does not divide the " +
                                            std::to_string(m.kv_heads) + " key/value heads of " +
                                            m.name + " (its " + std::to_string(m.heads) +
                                            " attention heads share them)");
  }
  // Megatron's column-parallel MLP splits its width (a mixture of experts: its shared expert's).
  const int width = m.experts > 0 ? m.shared_ffn_hidden : m.ffn_hidden;
  if (m.family != "uniform" && width > 0 && width % t != 0) {
    throw FieldError("tensor_parallel",
                     std::to_string(t) + " does not divide the " + std::to_string(width) +
                         (m.experts > 0 ? "-wide shared-expert MLP of " : "-wide MLP of ") +
                         m.name + " (the GPUs of a stage split its columns)");
  }
  // A mixture of experts: the T GPUs split its experts (expert parallelism inside the group,
  // as Megatron-Core's expert-parallel size = T), so each routes and holds 1/T of the rows.
  if (m.experts > 0 && m.experts % t != 0) {
    throw FieldError("tensor_parallel", std::to_string(t) + " does not divide the " +
                                            std::to_string(m.experts) + " experts of " + m.name +
                                            " (the GPUs of a stage split them)");
  }
}

Profile tensor_parallel_profile(Profile profile, int t, const P2pLink& group_link) {
  check_tensor_parallel(profile.model, t);
  if (t == 1) return profile;
  const ModelConfig& m = profile.model;
  const double td = static_cast<double>(t);
  // Synthetic (uniform) layers have no width to communicate.
  const bool communicates = m.family != "uniform" && m.hidden > 0 && profile.seq > 0;
  for (auto& [kind, by_mbs] : profile.layers) {
    const Collectives n = communicates ? collectives_of(kind) : Collectives{};
    for (auto& [mbs, c] : by_mbs) {
      const double activation = 2.0 * mbs * profile.seq * m.hidden;  // bf16 (mbs, seq, hidden)
      const double one = ring_collective_us(group_link, activation, t);
      c.forward_us = c.forward_us / td + n.forward * one;
      c.p1_us = c.p1_us / td + n.p1 * one;
      c.p2_us = c.p2_us / td + n.p2 * one;
      // k micro-batches' p2 in one call gathers k micro-batches' inputs.
      for (auto& [k, us] : c.p2_concat_us)
        us = us / td + n.p2 * ring_collective_us(group_link, activation * k, t);
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
  char link[96];
  std::snprintf(link, sizeof link, "%g GB/s per direction, %g us latency",
                group_link.bandwidth_GBps, group_link.latency_us);
  profile.provenance.notes +=
      " Tensor parallel " + std::to_string(t) +
      " applied analytically (profiles/tensor_parallel.h): per-stage times (optimizer step "
      "included) and bytes divided by T, plus Megatron-LM's sequence-parallel all-gathers and "
      "reduce-scatters over the GPUs' link (" +
      std::string(link) + "), not overlapped; a mixture of experts' all-to-all not modelled.";
  return profile;
}

}  // namespace pipeplan
