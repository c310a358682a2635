#include "planner/graph/schedule_sim.h"

#include <algorithm>
#include <array>
#include <limits>
#include <optional>

#include "planner/base/error.h"
#include "planner/base/index.h"
#include "planner/graph/validator.h"
#include "profiles/contention.h"
#include "profiles/link.h"

namespace pipeplan {

namespace {

constexpr double kUnset = -1.0;

// An action's memory, in the validator's order semantics: allocated at its start, working memory
// held while it runs, released at its end.
// An action's memory (op_memory); an overlapped pair's two actions start and end together: one
// step holding both.
struct MemoryStep : OpMemory {
  MemoryStep() = default;
  explicit MemoryStep(const OpMemory& m) : OpMemory(m) {}
  MemoryStep& operator+=(const MemoryStep& other) {
    alloc += other.alloc;
    release += other.release;
    work += other.work;
    return *this;
  }
};

// Per virtual stage, what its ops cost and where their outputs go, read once per call.
struct StageInfo {
  int device = 0;
  double forward_us = 0, p1_us = 0, fused_us = 0;
  double send_us = 0;   // activation to stage s + 1 (and the gradient back over the same boundary)
  double grads_us = 0;  // its weight gradients to the other copy of the stage (two copies)
  double weights_done = -1;            // when its last weight gradient (P2 or B) ended; -1 before
  double p2_one_us = 0;                // a p2 of one micro-batch
  std::array<MemoryStep, 4> one_mb{};  // by OpType (F, B, P1, P2): each op of one micro-batch
  const StageCost* cost = nullptr;
};

MemoryStep memory_step(const StageInfo& info, const Action& a);

StageInfo stage_info(const StageCost& c, int device, const P2pLink& link) {
  StageInfo info;
  info.device = device;
  info.forward_us = c.forward_us;
  info.p1_us = c.p1_us;
  info.fused_us = c.p1_us + c.p2_us;
  info.send_us = transfer_time_us(link, c.send_bytes);
  info.grads_us = transfer_time_us(link, c.grad_bytes);
  info.cost = &c;
  info.p2_one_us = c.p2_time_us(1);
  for (const OpType op : {OpType::F, OpType::B, OpType::P1, OpType::P2})
    info.one_mb[idx(static_cast<int>(op))] = memory_step(info, Action{op, 0, {0}});
  return info;
}

// memory_step from the stage's table where the action covers one micro-batch.
MemoryStep memory_of(const StageInfo& info, const Action& a) {
  if (a.op == OpType::O || a.microbatches.size() != 1) return memory_step(info, a);
  return info.one_mb[idx(static_cast<int>(a.op))];
}

MemoryStep memory_step(const StageInfo& info, const Action& a) {
  return MemoryStep(op_memory(*info.cost, a.op, static_cast<int>(a.microbatches.size())));
}

class CompactRun {
 public:
  // `loads`: under a sustained-load model on separate GPUs, each device's H at the start (in)
  // and at the step's end (out, once run); else null.
  CompactRun(const Schedule& schedule, const std::vector<StageCost>& costs, const PlanMeta& meta,
             const ScheduleSimOptions& options, std::vector<double>* loads)
      : schedule_(schedule),
        meta_(meta),
        options_(options),
        devices_(schedule.devices),
        stages_(schedule.stage_count()),
        m_(schedule.microbatches),
        cells_(idx(stages_) * idx(std::max(m_, 0))),
        activation_at_(cells_, kUnset),
        gradient_at_(cells_, kUnset),
        forward_end_(cells_, kUnset),
        p1_end_(cells_, kUnset),
        link_end_(idx(devices_) * idx(devices_), 0.0),
        position_(idx(devices_), 0),
        free_at_(idx(devices_), 0.0),
        memory_(idx(devices_), 0),
        queued_(idx(devices_), 1),
        blocked_(idx(devices_), 0),
        loads_(loads) {
    if (loads_ != nullptr) {
      sustained_ = &*meta.contention.sustained;
      device_loads_ = device_loads_from(*loads_, devices_);
    }
    stage_.resize(idx(stages_));
    optimizer_us_ = device_optimizer_us(costs, schedule.stage_device, devices_);
    for (int s = 0; s < stages_; ++s)
      stage_[idx(s)] = stage_info(costs[idx(s)], schedule.stage_device[idx(s)], meta.link);
  }

  ScheduleSim run() {
    ScheduleSim out;
    out.busy_us.assign(idx(devices_), 0.0);
    out.first_start_us.assign(idx(devices_), 0.0);
    out.last_end_us.assign(idx(devices_), 0.0);
    out.peak_memory_bytes.assign(idx(devices_), 0);
    if (options_.keep_times) out.times.resize(idx(devices_));
    for (int d = 0; d < devices_; ++d) {
      memory_[idx(d)] =
          d < static_cast<int>(meta_.static_bytes.size()) ? meta_.static_bytes[idx(d)] : 0;
      out.peak_memory_bytes[idx(d)] = memory_[idx(d)];
      if (options_.keep_times) out.times[idx(d)].reserve(schedule_.per_device[idx(d)].size());
      if (!fits(d, memory_[idx(d)])) {
        fail_memory(out, d, memory_[idx(d)], true);
        return out;
      }
    }
    if (!pairs_ok(out)) return out;
    std::vector<int> work;
    work.reserve(idx(devices_));
    for (int d = devices_ - 1; d >= 0; --d)
      work.push_back(d);
    while (!work.empty()) {
      const int d = work.back();
      work.pop_back();
      queued_[idx(d)] = 0;
      if (!advance(d, out, work)) return out;
    }
    for (int d = 0; d < devices_; ++d) {
      if (position_[idx(d)] < schedule_.per_device[idx(d)].size()) {
        out.error = "device " + std::to_string(d) + " waits forever at action " +
                    format_action(schedule_.per_device[idx(d)][position_[idx(d)]]) +
                    " (an input that comes later in some order, or a deadlock)";
        return out;
      }
    }
    finish(out);
    return out;
  }

 private:
  std::size_t cell(int s, int mb) const { return idx(s) * idx(m_) + idx(mb); }

  // Whether every overlapped pair has check_schedule's form (an F then a B or P1 of another
  // stage or micro-batch, not overlapping further); else `error` names the first that does not,
  // in check_schedule's words, and the order is not run.
  bool pairs_ok(ScheduleSim& out) const {
    for (int d = 0; d < devices_; ++d) {
      const std::vector<Action>& actions = schedule_.per_device[idx(d)];
      for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
        if (!actions[idx(i)].overlaps_next) continue;  // not a pair's first action
        const std::optional<PairFault> fault = overlapped_pair_fault(actions, i);
        if (!fault) continue;
        out.error = "device " + std::to_string(d) + " position " + std::to_string(fault->position) +
                    " (" + format_action(actions[idx(fault->position)]) + "): " + fault->rule;
        return false;
      }
    }
    return true;
  }

  bool fits(int d, std::int64_t bytes) const {
    const double limit = d < static_cast<int>(meta_.memory_limit_bytes.size())
                             ? meta_.memory_limit_bytes[idx(d)]
                             : 0;
    return !options_.check_memory || limit <= 0 || static_cast<double>(bytes) <= limit;
  }

  void fail_memory(ScheduleSim& out, int d, std::int64_t bytes, bool static_only) const {
    out.memory_ok = false;
    const double limit = meta_.memory_limit_bytes[idx(d)];
    const auto [reached, allowed] = gib_texts_apart(static_cast<double>(bytes), limit);
    out.error = static_only ? "device " + std::to_string(d) + " needs " + reached +
                                  " for parameters, gradients and optimizer state, above its "
                                  "limit " +
                                  allowed
                            : "device " + std::to_string(d) + " reaches " + reached +
                                  ", above its limit " + allowed;
  }

  // When a message from device `from` to `dst`, ready at `end`, arrives: after the pair's previous
  // one.
  double arrival(int from, int dst, double end, double send_us) {
    double& link = link_end_[idx(from) * idx(devices_) + idx(dst)];
    link = std::max(end, link) + send_us;
    return link;
  }

  // Delivers an output of device `from` to stage `to`'s input table; a cross-device message waits
  // for the pair's previous one.
  void deliver(std::vector<double>& table, int from, int to, int mb, double end, double send_us,
               std::vector<int>& work) {
    const int dst = stage_[idx(to)].device;
    table[cell(to, mb)] = dst != from ? arrival(from, dst, end, send_us) : end;
    if (blocked_[idx(dst)] && !queued_[idx(dst)]) {
      queued_[idx(dst)] = 1;
      blocked_[idx(dst)] = 0;
      work.push_back(dst);
    }
  }

  // What an action needs before it starts and does: its inputs' ready time (nullopt while one is
  // missing), its duration and its memory.
  struct Step {
    double ready = 0;
    double duration = 0;
    MemoryStep memory;
  };
  std::optional<Step> prepare(const Action& a) const {
    const int s = a.stage;
    const StageInfo& info = stage_[idx(s)];
    const int mb = a.microbatches.front();
    Step step;
    switch (a.op) {
      case OpType::F: {
        const double input = s == schedule_.first_stage_of(mb) ? 0.0 : activation_at_[cell(s, mb)];
        if (input < 0) return std::nullopt;
        step.ready = input;
        step.duration = info.forward_us;
        break;
      }
      case OpType::P1:
      case OpType::B: {
        const double input = s == schedule_.last_stage_of(mb) ? 0.0 : gradient_at_[cell(s, mb)];
        if (input < 0 || forward_end_[cell(s, mb)] < 0) return std::nullopt;
        step.ready = input;
        step.duration = a.op == OpType::P1 ? info.p1_us : info.fused_us;
        break;
      }
      case OpType::P2: {
        for (const int x : a.microbatches) {
          if (p1_end_[cell(s, x)] < 0) return std::nullopt;
        }
        const int k = static_cast<int>(a.microbatches.size());
        step.duration = k == 1 ? info.p2_one_us : info.cost->p2_time_us(k);
        break;
      }
      case OpType::O:  // never an action (check_schedule refuses it)
        return std::nullopt;
    }
    step.memory = memory_of(info, a);
    return step;
  }

  // The action's outputs, ready at `end`.
  void complete(int d, const Action& a, double end, std::vector<int>& work) {
    const int s = a.stage;
    const int mb = a.microbatches.front();
    switch (a.op) {
      case OpType::F:
        forward_end_[cell(s, mb)] = end;
        if (s < schedule_.last_stage_of(mb))
          deliver(activation_at_, d, s + 1, mb, end, stage_[idx(s)].send_us, work);
        break;
      case OpType::P1:
      case OpType::B:
        p1_end_[cell(s, mb)] = end;
        if (s > schedule_.first_stage_of(mb))
          deliver(gradient_at_, d, s - 1, mb, end, stage_[idx(s - 1)].send_us, work);
        if (a.op == OpType::B) stage_[idx(s)].weights_done = end;
        break;
      case OpType::P2:
        stage_[idx(s)].weights_done = end;
        break;
      case OpType::O:
        break;
    }
  }

  // Runs device d's actions until one waits for an input; false when the run must stop (memory).
  // An overlapped pair starts when both its actions can, and lasts their overlapped time.
  bool advance(int d, ScheduleSim& out, std::vector<int>& work) {
    const std::vector<Action>& actions = schedule_.per_device[idx(d)];
    std::size_t& pos = position_[idx(d)];
    double& free_at = free_at_[idx(d)];
    std::int64_t& memory = memory_[idx(d)];
    while (pos < actions.size()) {
      const Action& a = actions[pos];
      const bool pair = a.overlaps_next;  // with its next action (pairs_ok)
      std::optional<Step> step = prepare(a);
      if (!step) return block(d);
      if (pair) {
        const std::optional<Step> second = prepare(actions[pos + 1]);
        if (!second) return block(d);
        step->ready = std::max(step->ready, second->ready);
        step->duration = overlapped_time_us(step->duration, second->duration, meta_.overlap);
        step->memory += second->memory;
      }
      const double ready = std::max(free_at, step->ready);
      memory += step->memory.alloc;
      const std::int64_t during = memory + step->memory.work;
      if (during > out.peak_memory_bytes[idx(d)]) {
        out.peak_memory_bytes[idx(d)] = during;
        if (!fits(d, during)) {
          fail_memory(out, d, during, false);
          return false;
        }
      }
      memory -= step->memory.release;
      const double end = ready + compute_time(d, ready, step->duration);
      if (pos == 0 || ready < out.first_start_us[idx(d)]) out.first_start_us[idx(d)] = ready;
      out.last_end_us[idx(d)] = std::max(out.last_end_us[idx(d)], end);
      out.busy_us[idx(d)] += end - ready;  // as step_metrics sums it (a pair once)
      const int count = pair ? 2 : 1;
      for (int i = 0; i < count; ++i) {
        if (options_.keep_times) out.times[idx(d)].push_back({ready, end});
        complete(d, actions[pos + static_cast<std::size_t>(i)], end, work);
      }
      free_at = end;
      pos += static_cast<std::size_t>(count);
    }
    return true;
  }

  // How long a compute op of profiled time `work` on device d that starts at `start` lasts: its
  // profiled time, or under the sustained-load model the simulator's DeviceLoad time.
  double compute_time(int d, double start, double work) {
    if (sustained_ == nullptr) return work;
    return device_loads_[idx(d)].run(*sustained_, start, work);
  }

  bool block(int d) {
    blocked_[idx(d)] = 1;
    return true;
  }

  void finish(ScheduleSim& out) {
    double first = std::numeric_limits<double>::max(), last = 0, busy = 0;
    bool any = false;
    // With two copies of the model, each stage's weight gradients go to the device of its other
    // copy, both ways, stage by stage of the first copy (lowering's grads messages): a device's
    // optimizer step waits for what it receives and for what it sends.
    std::vector<double> exchanged(idx(devices_), 0.0);
    double messages_end = 0;
    const int copy = schedule_.replicas > 1 ? schedule_.model_stage_count() : stages_;
    for (int s = 0; s + copy < stages_; ++s) {
      const StageInfo& a = stage_[idx(s)];
      const StageInfo& b = stage_[idx(s + copy)];
      if (a.device == b.device || a.weights_done < 0 || b.weights_done < 0) continue;
      for (const double end : {arrival(a.device, b.device, a.weights_done, a.grads_us),
                               arrival(b.device, a.device, b.weights_done, b.grads_us)}) {
        for (const int d : {a.device, b.device})
          exchanged[idx(d)] = std::max(exchanged[idx(d)], end);
        messages_end = std::max(messages_end, end);
      }
    }
    // Each device's optimizer step (lowering's last node on its compute stream), after its
    // last action; not pipeline work, so out of the bubble ratios' busy time.
    std::vector<double> optimizer(idx(devices_), 0.0);
    for (int d = 0; d < devices_; ++d) {
      const double step = optimizer_us_[idx(d)];
      if (step <= 0) continue;
      if (schedule_.per_device[idx(d)].empty()) out.first_start_us[idx(d)] = 0;
      const double start = std::max(out.last_end_us[idx(d)], exchanged[idx(d)]);
      const double end = start + compute_time(d, start, step);
      if (options_.keep_times) out.times[idx(d)].push_back({start, end});
      out.last_end_us[idx(d)] = end;
      out.busy_us[idx(d)] += end - start;  // as step_metrics sums it
      optimizer[idx(d)] = end - start;
    }
    for (int d = 0; d < devices_; ++d) {
      busy += out.busy_us[idx(d)] - optimizer[idx(d)];  // as step_metrics sums it
      out.sum_last_end_us += out.last_end_us[idx(d)];
      if (schedule_.per_device[idx(d)].empty()) continue;
      any = true;
      first = std::min(first, out.first_start_us[idx(d)]);
      last = std::max(last, out.last_end_us[idx(d)]);
      out.max_stage_span_us =
          std::max(out.max_stage_span_us, out.last_end_us[idx(d)] - out.first_start_us[idx(d)]);
    }
    // Without an optimizer step the exchange's messages may end the step (the simulator's
    // makespan runs to its last node of any kind).
    if (any) last = std::max(last, messages_end);
    out.makespan_us = any ? last - first : 0.0;
    if (loads_ != nullptr) {  // the loads the step leaves at its last end (the simulator's)
      double step_end = messages_end;
      for (int d = 0; d < devices_; ++d)
        step_end = std::max(step_end, out.last_end_us[idx(d)]);
      write_loads_at(device_loads_, *sustained_, step_end, *loads_);
    }
    const double devices = static_cast<double>(devices_);
    if (out.makespan_us > 0) out.bubble_ratio = 1.0 - busy / (devices * out.makespan_us);
    if (out.max_stage_span_us > 0)
      out.span_bubble_ratio = 1.0 - busy / (devices * out.max_stage_span_us);
    out.ok = true;
  }

  const Schedule& schedule_;
  const PlanMeta& meta_;
  ScheduleSimOptions options_;
  int devices_, stages_, m_;
  std::size_t cells_;
  std::vector<StageInfo> stage_;
  std::vector<double> activation_at_, gradient_at_, forward_end_, p1_end_;
  std::vector<double> link_end_;  // per directed device pair: when its last message arrived
  std::vector<std::size_t> position_;
  std::vector<double> free_at_;
  std::vector<double> optimizer_us_;  // per device: its optimizer step (0: none)
  std::vector<std::int64_t> memory_;
  std::vector<char> queued_, blocked_;
  std::vector<double>* loads_;
  const SustainedLoad* sustained_ = nullptr;
  std::vector<DeviceLoad> device_loads_;  // per device, under the sustained-load model
};

}  // namespace

std::vector<std::int64_t> schedule_peak_memory(const Schedule& schedule,
                                               const std::vector<StageCost>& costs,
                                               const PlanMeta& meta) {
  if (static_cast<int>(costs.size()) != schedule.stage_count() ||
      static_cast<int>(schedule.per_device.size()) != schedule.devices) {
    throw InternalError("schedule_peak_memory: " + std::to_string(costs.size()) +
                        " stage costs for " + std::to_string(schedule.stage_count()) +
                        " stages, orders of " + std::to_string(schedule.per_device.size()) +
                        " devices for " + std::to_string(schedule.devices));
  }
  std::vector<StageInfo> stages;
  stages.reserve(costs.size());
  for (std::size_t s = 0; s < costs.size(); ++s)
    stages.push_back(stage_info(costs[s], schedule.stage_device[s], meta.link));
  const auto step_of = [&](const Action& a) {
    if (a.stage < 0 || a.stage >= schedule.stage_count())
      throw InternalError("schedule_peak_memory: " + format_action(a) + " of no stage");
    return memory_of(stages[idx(a.stage)], a);
  };
  std::vector<std::int64_t> peaks(idx(schedule.devices), 0);
  for (int d = 0; d < schedule.devices; ++d) {
    std::int64_t memory =
        d < static_cast<int>(meta.static_bytes.size()) ? meta.static_bytes[idx(d)] : 0;
    std::int64_t peak = memory;
    const std::vector<Action>& actions = schedule.per_device[idx(d)];
    for (std::size_t i = 0; i < actions.size(); ++i) {
      MemoryStep step = step_of(actions[i]);
      if (actions[i].overlaps_next && i + 1 < actions.size()) {  // the pair runs as one step
        step += step_of(actions[i + 1]);
        ++i;
      }
      memory += step.alloc;
      peak = std::max(peak, memory + step.work);
      memory -= step.release;
    }
    peaks[idx(d)] = peak;
  }
  return peaks;
}

ScheduleSim simulate_schedule(const Schedule& schedule, const std::vector<StageCost>& costs,
                              const PlanMeta& meta, const ScheduleSimOptions& options) {
  ScheduleSim out;
  if (static_cast<int>(costs.size()) != schedule.stage_count() ||
      static_cast<int>(schedule.per_device.size()) != schedule.devices) {
    out.error = "schedule: " + std::to_string(costs.size()) + " stage costs for " +
                std::to_string(schedule.stage_count()) + " stages";
    return out;
  }
  const Contention& contention = meta.contention;
  if (!contention.empty() || !contention.sustained)
    return CompactRun(schedule, costs, meta, options, nullptr).run();
  // Separate GPUs under a sustained-load model: the step starts at the per-device loads its own
  // end leaves, found by the simulator's passes (periodic_loads), so that the two agree.
  ScheduleSimOptions pass_options = options;
  pass_options.keep_times = false;
  bool failed = false;
  std::vector<double> loads = periodic_loads(
      *contention.sustained, static_cast<std::size_t>(std::max(schedule.devices, 0)),
      [&](std::vector<double>& pass_loads) {
        const std::vector<double> start = pass_loads;
        const ScheduleSim pass = CompactRun(schedule, costs, meta, pass_options, &pass_loads).run();
        if (!pass.ok) {  // the order cannot run at any load: stop, the last run says why
          failed = true;
          pass_loads = start;
          return 0.0;
        }
        double span = 0;  // the simulator's: its last end
        for (const double end : pass.last_end_us)
          span = std::max(span, end);
        return span;
      });
  if (failed) return CompactRun(schedule, costs, meta, options, nullptr).run();
  return CompactRun(schedule, costs, meta, options, &loads).run();
}

}  // namespace pipeplan
