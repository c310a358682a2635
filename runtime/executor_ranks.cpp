// The end of a step in a multi-process run (ExecutorOptions::group): this rank's share goes to
// rank 0 (runtime/step_exchange.h), which puts the step together as one process would have
// measured it: the node times of every rank, every device's memory, the losses in micro-batch
// order, and, with a node timer, every node's host times. Times are µs since each rank's own step
// start, which the barrier before the step lines up to within a message latency.
#include <string>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "runtime/executor.h"
#include "runtime/step_exchange.h"

namespace pipeplan {

StepResult Executor::finish_ranked_step(int step_number, double step_time_us,
                                        std::vector<NodeTime> host_times,
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
      if (plan_.node(id).device != local_device_) continue;
      local.times.emplace_back(id, times_[static_cast<std::size_t>(id)]);
      if (!host_times.empty())
        local.host_times.emplace_back(id, host_times.at(static_cast<std::size_t>(id)));
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
    result.measured.host_times = std::move(host_times);
    result.bpipe.assign(workers_.size(), BpipeBytes{});
    result.bpipe[static_cast<std::size_t>(local_device_)] = worker.bpipe_bytes();
    return result;
  }
  // Rank r ran plan device r.
  const auto nodes = static_cast<std::size_t>(plan_.node_count());
  std::vector<NodeTime> times(nodes);
  std::vector<MeasuredDevice> devices(workers_.size());
  result.bpipe.assign(workers_.size(), BpipeBytes{});
  // Every rank runs the same node timer, or none does: host times come from all of them (a
  // trace's host times are on every GPU slice) or from none.
  const bool with_host_times = !outcome.ranks.empty() && !outcome.ranks[0].host_times.empty();
  std::vector<NodeTime> all_host_times(with_host_times ? nodes : 0);
  const auto place = [&](std::size_t r, const std::vector<std::pair<int, NodeTime>>& reported,
                         std::vector<NodeTime>& into, const char* what) {
    for (const auto& [id, t] : reported) {
      if (id < 0 || id >= plan_.node_count() || plan_.node(id).device != static_cast<int>(r)) {
        throw Error("step " + std::to_string(step_number) + ": rank " + std::to_string(r) +
                    " reported " + what + " of node " + std::to_string(id) +
                    ", not one of its device's");
      }
      into[static_cast<std::size_t>(id)] = t;
    }
  };
  for (std::size_t r = 0; r < outcome.ranks.size(); ++r) {
    RankStep& rank = outcome.ranks[r];
    place(r, rank.times, times, "times");
    const std::size_t want_host = with_host_times ? rank.times.size() : 0;
    if (rank.host_times.size() != want_host) {
      throw Error("step " + std::to_string(step_number) + ": rank " + std::to_string(r) +
                  " reported host times of " + std::to_string(rank.host_times.size()) +
                  " nodes, not " + std::to_string(want_host) +
                  (with_host_times ? " (one per node it timed)" : " (rank 0 reported none)"));
    }
    place(r, rank.host_times, all_host_times, "host times");
    devices.at(r) = {rank.peak_bytes, std::move(rank.memory_timeline)};
    result.bpipe.at(r) = rank.bpipe;
  }
  result.measured = measure(std::move(times), std::move(devices));
  result.measured.host_times = std::move(all_host_times);
  return result;
}

}  // namespace pipeplan
