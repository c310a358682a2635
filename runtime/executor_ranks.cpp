// The end of a step in a multi-process run (ExecutorOptions::group): this rank's share goes to
// rank 0 (runtime/step_exchange.h), which puts the step together as one process would have
// measured it: the node times of every rank, every device's memory, the losses in micro-batch
// order. Times are µs since each rank's own step start, which the barrier before the step lines
// up to within a message latency.
#include <string>
#include <utility>

#include "planner/base/error.h"
#include "runtime/executor.h"
#include "runtime/step_exchange.h"

namespace pipeplan {

StepResult Executor::finish_ranked_step(int step_number, double step_time_us,
                                        const std::optional<std::string>& error, bool consequence) {
  ProcessGroup& group = *options_.group;
  const DeviceWorker& worker = *workers_.at(static_cast<std::size_t>(local_device_));
  RankStep local;
  if (error) {
    local.ok = false;
    local.error = *error;
    local.consequence = consequence;
  } else {
    local.losses = worker.losses();
    for (int id = 0; id < plan_.node_count(); ++id) {
      if (plan_.node(id).device == local_device_)
        local.times.emplace_back(id, times_[static_cast<std::size_t>(id)]);
    }
    local.peak_bytes = worker.peak_bytes();
    local.memory_timeline = worker.memory_timeline();
    local.bpipe = worker.bpipe_bytes();
    local.step_time_us = step_time_us;
  }
  StepOutcome outcome =
      exchange_step(group, local, step_number, plan_.meta.microbatches, options_.timeout);
  steps_ = step_number;

  StepResult result;
  result.step = step_number;
  result.microbatch_losses = std::move(outcome.microbatch_losses);
  for (const double loss : result.microbatch_losses)
    result.loss += loss;  // in micro-batch order, as in one process
  result.loss /= plan_.meta.microbatches;
  result.step_time_us = outcome.step_time_us;
  const double tokens =
      static_cast<double>(plan_.meta.microbatches) * plan_.meta.mbs * plan_.meta.seq;
  result.tokens_per_s = result.step_time_us > 0 ? tokens / (result.step_time_us * 1e-6) : 0.0;
  if (group.rank() != 0) {
    result.measured = measure(times_, local_memory());
    result.bpipe.assign(workers_.size(), BpipeBytes{});
    result.bpipe[static_cast<std::size_t>(local_device_)] = worker.bpipe_bytes();
    return result;
  }
  // Rank r ran plan device r.
  std::vector<NodeTime> times(static_cast<std::size_t>(plan_.node_count()));
  std::vector<MeasuredDevice> devices(workers_.size());
  result.bpipe.assign(workers_.size(), BpipeBytes{});
  for (std::size_t r = 0; r < outcome.ranks.size(); ++r) {
    RankStep& rank = outcome.ranks[r];
    for (const auto& [id, t] : rank.times) {
      if (id < 0 || id >= plan_.node_count() || plan_.node(id).device != static_cast<int>(r)) {
        throw Error("step " + std::to_string(step_number) + ": rank " + std::to_string(r) +
                    " reported times of node " + std::to_string(id) + ", not one of its device's");
      }
      times[static_cast<std::size_t>(id)] = t;
    }
    devices.at(r) = {rank.peak_bytes, std::move(rank.memory_timeline)};
    result.bpipe.at(r) = rank.bpipe;
  }
  result.measured = measure(std::move(times), std::move(devices));
  return result;
}

}  // namespace pipeplan
