#include "runtime/executor.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "planner/base/error.h"
#include "planner/graph/validator.h"
#include "runtime/measured.h"

namespace pipeplan {

namespace {

using Clock = DeviceWorker::Clock;

double micros_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

Channel channel_of(const Stream& stream) {
  return stream.role == StreamRole::transfer ? Channel::transfer : Channel::pipeline;
}

// The in-process transport unless one was given; a multi-process run must give its own.
std::unique_ptr<Transport> own_transport(std::unique_ptr<Transport> transport, bool ranked) {
  if (transport) return transport;
  if (ranked) {
    throw Error("executor: one process per plan device needs a transport between the processes");
  }
  return std::make_unique<InProcessTransport>();
}

}  // namespace

// Completion flags of the step's nodes and the first failure, shared by all stream threads.
struct Executor::Sync {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<char> done;
  std::atomic<bool> failed{false};
  std::optional<std::string> first_error;
  bool first_error_is_consequence = false;  // a Cancelled: another failure ended it
};

Executor::Executor(TaskGraph plan, const BackendFactory& make_backend, ExecutorOptions options,
                   std::unique_ptr<Transport> transport)
    : plan_(std::move(plan)),
      options_(std::move(options)),
      transport_(own_transport(std::move(transport), options_.group != nullptr)),
      sync_(std::make_unique<Sync>()) {
  if (options_.validate) validate(plan_);
  check_stage_layers(plan_, "plan");
  int devices = plan_.meta.devices;
  for (const Stream& stream : plan_.streams())
    devices = std::max(devices, stream.device + 1);
  if (options_.group) {
    if (options_.group->size() != devices) {
      throw Error("plan: " + std::to_string(devices) + " devices, but " +
                  std::to_string(options_.group->size()) +
                  (options_.group->size() == 1 ? " rank was" : " ranks were") +
                  " started (one rank per plan device)");
    }
    local_device_ = options_.group->rank();
  }
  workers_.resize(static_cast<std::size_t>(devices));  // null: another rank's device
  optimizer_node_.assign(static_cast<std::size_t>(devices), 0);
  for (const Node& n : plan_.nodes()) {
    if (n.kind == NodeKind::compute && n.op == OpType::O && n.device >= 0 && n.device < devices)
      optimizer_node_[static_cast<std::size_t>(n.device)] = 1;
  }
  for (const Node& n : plan_.nodes()) {
    if (n.kind == NodeKind::send && n.transfer == Transfer::grads && runs(n.device) &&
        optimizer_node_[static_cast<std::size_t>(n.device)] == 0)
      grads_flushes_.emplace_back(n.device, n.peer);
  }
  for (int d = 0; d < devices; ++d) {
    if (!runs(d)) continue;
    workers_[static_cast<std::size_t>(d)] =
        std::make_unique<DeviceWorker>(plan_, d, make_backend(d), options_.seed);
  }
  const auto& g = plan_.graph();
  local_inputs_.resize(static_cast<std::size_t>(plan_.node_count()));
  flush_after_.assign(static_cast<std::size_t>(plan_.node_count()), 0);
  for (auto [it, end] = boost::edges(g); it != end; ++it) {
    if (g[*it] != EdgeKind::data) continue;
    const int from = static_cast<int>(boost::source(*it, g));
    const int to = static_cast<int>(boost::target(*it, g));
    if (plan_.node(from).device == plan_.node(to).device) {
      local_inputs_[static_cast<std::size_t>(to)].push_back(from);
      if (plan_.node(from).kind == NodeKind::send) flush_after_[static_cast<std::size_t>(from)] = 1;
    }
  }
}

Executor::~Executor() = default;

std::vector<const LayerParams*> Executor::layer_copies(int layer_index) const {
  std::vector<const LayerParams*> copies;
  for (const auto& worker : workers_) {
    if (!worker) continue;
    const auto it = worker->layers().find(layer_index);
    if (it != worker->layers().end()) copies.push_back(&it->second);
  }
  return copies;
}

const LayerParams& Executor::layer(int layer_index) const {
  const std::vector<const LayerParams*> copies = layer_copies(layer_index);
  if (!copies.empty()) return *copies.front();
  throw Error("executor: no device holds layer " + std::to_string(layer_index) +
              (local_device_ >= 0
                   ? " in this process (device " + std::to_string(local_device_) + ")"
                   : std::string()));
}

void Executor::fail(const std::exception& error, bool consequence) {
  {
    const std::lock_guard lock(sync_->mutex);
    if (!sync_->first_error) {
      sync_->first_error = error.what();
      sync_->first_error_is_consequence = consequence;
    }
    sync_->failed = true;
  }
  sync_->changed.notify_all();
  transport_->cancel();
}

void Executor::mark_done(int node) {
  {
    const std::lock_guard lock(sync_->mutex);
    sync_->done[static_cast<std::size_t>(node)] = 1;
  }
  sync_->changed.notify_all();
}

void Executor::wait_for_inputs(int node) {
  std::unique_lock lock(sync_->mutex);
  for (const int input : local_inputs_[static_cast<std::size_t>(node)]) {
    const bool ready = sync_->changed.wait_for(lock, options_.timeout, [&] {
      return sync_->failed || sync_->done[static_cast<std::size_t>(input)] != 0;
    });
    if (sync_->failed) throw Cancelled("cancelled");
    if (!ready) {
      // run_stream names the waiting op in front of this.
      throw Error("stage " + std::to_string(plan_.node(node).stage) + " timed out after " +
                  std::to_string(options_.timeout.count()) + " ms waiting for " +
                  plan_.node_name(input));
    }
  }
}

void Executor::order_inputs(int id) {
  for (const int input : local_inputs_[static_cast<std::size_t>(id)]) {
    const auto& arrival = arrivals_[static_cast<std::size_t>(input)];
    if (arrival) arrival->order_reader();
  }
}

void Executor::run_node(DeviceWorker& worker, int id, bool order_inputs) {
  const Node& node = plan_.node(id);
  const Stream& stream = plan_.streams()[static_cast<std::size_t>(node.stream)];
  times_[static_cast<std::size_t>(id)].start_us = micros_since(start_);
  // A payload still in flight (a stream-ordered recv): its reader's work goes behind it, before
  // the node timer's start, so that the op's device time does not include the wait.
  if (node.kind == NodeKind::compute && order_inputs) this->order_inputs(id);
  if (options_.node_timer) options_.node_timer->begin_node(plan_, id);
  switch (node.kind) {
    case NodeKind::compute:
      worker.run_compute(node);
      break;
    case NodeKind::send:
      transport_->send(node.device, node.peer, channel_of(stream), worker.take_payload(node));
      if (flush_after_[static_cast<std::size_t>(id)] != 0) {
        transport_->flush(node.device, node.peer, channel_of(stream), options_.timeout);
      }
      break;
    case NodeKind::recv: {
      const std::string tag = node_label(node);
      Message message =
          transport_->recv(node.device, node.peer, channel_of(stream), tag, options_.timeout);
      check_message(message, tag, worker.expected_bytes(node));
      arrivals_[static_cast<std::size_t>(id)] = message.arrival;  // a held stash keeps its own
      worker.store_payload(node, std::move(message));
      break;
    }
  }
  if (options_.node_timer) options_.node_timer->end_node(plan_, id);
  times_[static_cast<std::size_t>(id)].end_us = micros_since(start_);
}

void Executor::run_pair(DeviceWorker& worker, int first, int second, int& running) {
  // Both ops' in-flight inputs go ahead of the pair's start, which the second op's stream (where
  // the backend has one) waits for.
  order_inputs(first);
  order_inputs(second);
  Backend& backend = worker.backend();
  backend.begin_pair();
  try {
    run_node(worker, first, false);
    mark_done(first);  // its sends need not wait for the second op
    running = second;
    if (options_.before_node) options_.before_node(second);
    backend.begin_second();
    run_node(worker, second, false);
  } catch (...) {
    try {
      backend.end_pair();
    } catch (const std::exception&) {  // the op's own failure is the one to report
    }
    throw;
  }
  backend.end_pair();
}

void Executor::run_stream(int stream) {
  const Stream& s = plan_.streams()[static_cast<std::size_t>(stream)];
  DeviceWorker& worker = *workers_[static_cast<std::size_t>(s.device)];
  const std::vector<int>& order = plan_.stream_order(stream);
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (sync_->failed) return;
    const int id = order[i];
    // An overlapped pair starts once both of its ops have their inputs, as the simulator has it.
    const int second = plan_.node(id).overlaps_next && i + 1 < order.size() ? order[i + 1] : -1;
    int running = id;
    try {
      wait_for_inputs(id);
      if (second >= 0) {
        running = second;  // a wait that times out names the op it was for
        wait_for_inputs(second);
        running = id;
      }
      if (options_.before_node) options_.before_node(id);
      if (second >= 0) {
        run_pair(worker, id, second, running);
      } else {
        run_node(worker, id);
      }
    } catch (const Cancelled& e) {
      fail(Error(plan_.node_name(running) + ": " + e.what()), true);
      return;
    } catch (const Error& e) {
      fail(Error(plan_.node_name(running) + ": " + e.what()));
      return;
    } catch (const std::exception& e) {
      fail(e);
      return;
    }
    if (second >= 0) {
      mark_done(second);
      ++i;
    } else {
      mark_done(id);
    }
  }
}

StepResult Executor::step(StepMode mode) {
  const int step_number = steps_ + 1;
  // AdamW's bias correction counts the updates its moments have seen: a gradients-only step
  // feeds them nothing, so it does not count.
  const int adamw_step = optimizer_steps_ + 1;
  // Under MPI a rank whose transport cannot start the step still takes part in it, failed, so
  // that every rank hears why (runtime/step_exchange.h).
  std::optional<std::string> reset_error;
  try {
    transport_->reset();
  } catch (const Error& e) {
    if (!options_.group) throw;
    reset_error = std::string("transport: ") + e.what();
  }
  sync_->done.assign(static_cast<std::size_t>(plan_.node_count()), 0);
  sync_->failed = false;
  sync_->first_error.reset();
  sync_->first_error_is_consequence = false;
  times_.assign(static_cast<std::size_t>(plan_.node_count()), NodeTime{});
  arrivals_.assign(static_cast<std::size_t>(plan_.node_count()), nullptr);
  for (auto& worker : workers_) {
    if (!worker) continue;
    try {
      worker->prepare_step();
    } catch (const Error& e) {
      if (!options_.group) throw;
      if (!reset_error) reset_error = e.what();
    }
    worker->set_optimizer_node(mode == StepMode::train, options_.adamw, adamw_step);
  }
  for (auto& worker : workers_) {
    if (worker) worker->backend().synchronize();  // the clock starts on idle devices
  }
  if (options_.group) {
    options_.group->barrier("the start of step " + std::to_string(step_number), options_.timeout);
  }
  start_ = Clock::now();
  // The device clocks start before the workers queue anything (zeroing gradients, where they
  // need it): work queued ahead of the timer's start would put the device's zero after it and
  // every device time before the host time of the same instant.
  if (options_.node_timer) options_.node_timer->begin_step(plan_);
  for (auto& worker : workers_) {
    if (worker) worker->begin_step(start_);
  }
  if (reset_error) fail(Error(*reset_error));
  {
    std::vector<std::jthread> threads;
    threads.reserve(plan_.streams().size());
    for (int s = 0; s < static_cast<int>(plan_.streams().size()); ++s) {
      if (runs(plan_.streams()[static_cast<std::size_t>(s)].device)) {
        threads.emplace_back([this, s] { run_stream(s); });
      }
    }
  }
  bool failed = sync_->first_error.has_value();
  if (failed && !options_.group)
    throw Error("step " + std::to_string(step_number) + ": " + *sync_->first_error);
  // What fails after the graph (a gradients flush, the optimizer, reading the losses back) is
  // this rank's failure of the step: under a process group every rank hears it through the step
  // exchange rather than waiting out its timeout for a rank that left.
  std::optional<std::string> late_error;
  const auto after_graph = [&](const std::function<void()>& work) {
    if (failed) return;
    try {
      work();
    } catch (const Error& e) {
      if (!options_.group) throw;
      late_error = e.what();
      failed = true;
    }
  };
  after_graph([&] {
    // Devices whose plan has no optimizer node (a profile without its time) add the other copy's
    // weight gradients (two copies of the model) once their own grads sends are complete, and
    // step, here after the graph; the others did in their node.
    for (const auto& [device, peer] : grads_flushes_)
      transport_->flush(device, peer, Channel::pipeline, options_.timeout);
    const auto steps_here = [this](const std::unique_ptr<DeviceWorker>& worker) {
      return worker && optimizer_node_[static_cast<std::size_t>(worker->device())] == 0;
    };
    for (auto& worker : workers_) {
      if (steps_here(worker)) worker->add_received_grads();
    }
    std::mutex mutex;
    std::optional<std::string> error;
    {
      std::vector<std::jthread> threads;
      for (auto& worker : workers_) {
        if (!steps_here(worker) || mode != StepMode::train) continue;
        threads.emplace_back([this, &worker, &mutex, &error, adamw_step] {
          try {
            worker->optimizer_step(options_.adamw, adamw_step);
          } catch (const Error& e) {
            const std::lock_guard lock(mutex);
            if (!error) error = e.what();
          }
        });
      }
    }
    if (error) throw Error(*error);
  });
  // An asynchronous backend has only queued the step: it ends when the devices are idle.
  const auto synchronize = [this] {
    for (auto& worker : workers_) {
      if (worker) worker->backend().synchronize();
    }
  };
  if (failed) {
    synchronize();
  } else {
    after_graph(synchronize);
  }
  const double step_time_us = micros_since(start_);
  after_graph([this] {  // after the clock: reading the losses back is not the step's work
    for (auto& worker : workers_) {
      if (worker) worker->collect_losses();
    }
  });
  // The host's times, before the node timer puts the device's in their place.
  std::vector<NodeTime> host_times;
  if (!failed && options_.node_timer) {
    host_times = times_;
    options_.node_timer->align_host_times(plan_, start_, host_times);
    options_.node_timer->end_step(plan_, times_);
  }
  if (options_.group) {
    StepResult result =
        late_error ? finish_ranked_step(step_number, step_time_us, std::move(host_times),
                                        late_error, false)
                   : finish_ranked_step(step_number, step_time_us, std::move(host_times),
                                        sync_->first_error, sync_->first_error_is_consequence);
    if (mode == StepMode::train) optimizer_steps_ = adamw_step;
    return result;
  }
  steps_ = step_number;
  if (mode == StepMode::train) optimizer_steps_ = adamw_step;

  StepResult result;
  result.step = step_number;
  result.microbatch_losses.assign(static_cast<std::size_t>(plan_.meta.microbatches), 0.0);
  for (const auto& worker : workers_) {
    for (const auto& [mb, loss] : worker->losses())
      result.microbatch_losses.at(static_cast<std::size_t>(mb)) = loss;
  }
  for (const double loss : result.microbatch_losses)
    result.loss += loss;  // in micro-batch order: the same sum whatever the schedule
  result.loss /= plan_.meta.microbatches;
  result.step_time_us = step_time_us;
  const double tokens =
      static_cast<double>(plan_.meta.microbatches) * plan_.meta.mbs * plan_.meta.seq;
  result.tokens_per_s = step_time_us > 0 ? tokens / (step_time_us * 1e-6) : 0.0;
  result.measured = measure(times_, local_memory());
  result.measured.host_times = std::move(host_times);
  for (const auto& worker : workers_)
    result.bpipe.push_back(worker->bpipe_bytes());
  return result;
}

}  // namespace pipeplan

namespace pipeplan {

std::vector<MeasuredDevice> Executor::local_memory() const {
  std::vector<MeasuredDevice> devices(workers_.size());
  for (std::size_t d = 0; d < workers_.size(); ++d) {
    if (workers_[d]) devices[d] = {workers_[d]->peak_bytes(), workers_[d]->memory_timeline()};
  }
  return devices;
}

SimResult Executor::measure(std::vector<NodeTime> times,
                            std::vector<MeasuredDevice> devices) const {
  // A recv thread posts its receive early and blocks; like the simulator's rendezvous, its
  // measured transfer starts once both halves were ready (the send is a non-blocking enqueue).
  const std::vector<NodeTime> raw = times;
  for (int id = 0; id < plan_.node_count(); ++id) {
    const Node& node = plan_.node(id);
    if (node.kind != NodeKind::recv || node.match < 0) continue;
    NodeTime& t = times[static_cast<std::size_t>(id)];
    t.start_us = std::min(t.end_us,
                          std::max(t.start_us, raw[static_cast<std::size_t>(node.match)].start_us));
  }
  return measured_result(plan_, std::move(times), std::move(devices));
}

std::int64_t estimate_cpu_host_bytes(const TaskGraph& plan, int device) {
  constexpr std::int64_t kBytesPerParameter = 16;  // fp32 weight, gradient, AdamW m and v
  constexpr std::int64_t kGradBytesPerParameter = 4;
  // Every stage's layers where a device worker holds them (runtime/device_worker.cpp): with two
  // copies of the model, both, and a gradient buffer for a copy whose twin is on another device.
  const ModelConfig& model = plan.meta.model;
  const std::vector<LayerKind> kinds = model.layer_list();
  const auto layer_parameters = [&](LayerKind kind) {
    return kind == LayerKind::embedding ? model.embedding_parameters()
           : kind == LayerKind::head    ? model.head_parameters()
                                        : model.block_parameters();
  };
  const Schedule& schedule = plan.schedule;
  std::int64_t total = 0;
  for (int stage = 0; stage < schedule.stage_count(); ++stage) {
    const auto at = static_cast<std::size_t>(stage);
    if (at >= plan.meta.stage_layers.size() || at >= schedule.stage_device.size()) break;
    if (device >= 0 && schedule.stage_device[at] != device) continue;
    const StageLayers& range = plan.meta.stage_layers[at];
    const int other = schedule.other_copy(stage);
    const bool receives =
        schedule.stage_device[static_cast<std::size_t>(other)] != schedule.stage_device[at];
    for (int l = range.first_layer; l < range.first_layer + range.layer_count; ++l) {
      if (l < 0 || static_cast<std::size_t>(l) >= kinds.size()) continue;
      const std::int64_t n = layer_parameters(kinds[static_cast<std::size_t>(l)]);
      total += kBytesPerParameter * n + (receives ? kGradBytesPerParameter * n : 0);
    }
  }
  const SimResult sim = simulate(plan);
  for (std::size_t d = 0; d < sim.devices.size(); ++d) {
    if (device >= 0 && d != static_cast<std::size_t>(device)) continue;
    const std::int64_t fixed = d < plan.meta.static_bytes.size() ? plan.meta.static_bytes[d] : 0;
    total += 2 * std::max<std::int64_t>(0, sim.devices[d].peak_memory_bytes - fixed);
  }
  return total;
}

}  // namespace pipeplan
