#include "profiles/data_parallel.h"

#include <string>
#include <string_view>

#include "planner/base/error.h"
#include "planner/base/limits.h"

namespace pipeplan {

std::string_view to_string(DataParallelOptimizer optimizer) {
  return optimizer == DataParallelOptimizer::sharded ? "sharded" : "replicated";
}

DataParallelOptimizer data_parallel_optimizer_from_string(std::string_view text) {
  if (text == "sharded") return DataParallelOptimizer::sharded;
  if (text == "replicated") return DataParallelOptimizer::replicated;
  throw FieldError("data_parallel_optimizer",
                   "must be 'sharded' or 'replicated', got '" + std::string(text) + "'");
}

namespace {

void check_data_parallel(const DataParallel& dp) {
  if (dp.replicas < 1) {
    throw FieldError("data_parallel", "must be at least 1, got " + std::to_string(dp.replicas));
  }
  limits::check_limit("data_parallel", dp.replicas, limits::kMaxDataParallel);
  if (const std::string problem = limits::bandwidth_problem(dp.link.bandwidth_GBps, "latency only");
      !problem.empty()) {
    throw FieldError("data_parallel_link", "bandwidth " + problem);
  }
  if (!(dp.link.latency_us >= 0) || dp.link.latency_us > limits::kMaxLinkLatencyUs) {
    throw FieldError("data_parallel_link",
                     "latency must be in [0, " + limits::general_number(limits::kMaxLinkLatencyUs) +
                         "] us, got " + limits::general_number(dp.link.latency_us));
  }
}

// Rounded up: a GPU holding a shard holds at least its share.
std::int64_t shard_bytes(std::int64_t bytes, int d) {
  return (bytes + d - 1) / d;
}

}  // namespace

Profile data_parallel_profile(Profile profile, const DataParallel& dp) {
  check_data_parallel(dp);
  const int d = dp.replicas;
  if (d == 1) return profile;
  const double dd = static_cast<double>(d);
  for (auto& [kind, by_mbs] : profile.layers) {
    for (auto& [mbs, c] : by_mbs) {
      // The same layer at every micro-batch size holds the same weights: one reduction each. A
      // profile that does not time the optimizer step leaves the reduction out with it.
      const bool communicates = c.optimizer_us > 0 && (c.grad_bytes > 0 || c.param_bytes > 0);
      const double grads = static_cast<double>(c.grad_bytes);
      const double params = static_cast<double>(c.param_bytes);
      if (dp.optimizer == DataParallelOptimizer::sharded) {
        c.optimizer_us /= dd;
        if (communicates) {
          c.optimizer_us += ring_collective_us(dp.link, grads, d) +  // reduce-scatter
                            ring_collective_us(dp.link, params, d);  // all-gather
        }
        c.optimizer_bytes = shard_bytes(c.optimizer_bytes, d);
      } else if (communicates) {
        // An all-reduce: a reduce-scatter and an all-gather of the gradients.
        c.optimizer_us += 2 * ring_collective_us(dp.link, grads, d);
      }
    }
  }
  profile.provenance.notes += " Data parallel " + data_parallel_text(dp) +
                              " applied analytically (profiles/data_parallel.h): each layer's "
                              "gradients combined across the replicas before its optimizer step, "
                              "not overlapped with the backward pass.";
  return profile;
}

std::string data_parallel_text(const DataParallel& dp) {
  return std::to_string(dp.replicas) + (dp.replicas == 1 ? " replica, " : " replicas, ") +
         std::string(to_string(dp.optimizer)) + " optimizer, " +
         (dp.link.bandwidth_GBps > 0
              ? limits::general_number(dp.link.bandwidth_GBps) + " GB/s per direction"
              : std::string("no bandwidth limit")) +
         ", " + limits::general_number(dp.link.latency_us) + " us latency";
}

}  // namespace pipeplan
