#include "runtime/cuda/step_events.h"

#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/green_context.h"

namespace pipeplan::cuda {

namespace {

void destroy_events(std::vector<cudaEvent_t>& events) {
  for (cudaEvent_t event : events) {
    if (event != nullptr) cudaEventDestroy(event);  // no throwing from cleanup
  }
  events.clear();
}

double elapsed_us(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
  return static_cast<double>(ms) * 1e3;
}

}  // namespace

StepEvents::StepEvents(std::vector<int> cuda_devices, std::vector<cudaStream_t> compute_streams,
                       std::vector<std::shared_ptr<FenceClock>> fence_clocks,
                       std::vector<cudaStream_t> side_streams)
    : cuda_devices_(std::move(cuda_devices)),
      compute_streams_(std::move(compute_streams)),
      side_streams_(std::move(side_streams)),
      fence_clocks_(std::move(fence_clocks)) {
  if (cuda_devices_.size() != compute_streams_.size()) {
    throw Error("step events: " + std::to_string(cuda_devices_.size()) + " devices but " +
                std::to_string(compute_streams_.size()) + " streams");
  }
  if (!fence_clocks_.empty() && fence_clocks_.size() != cuda_devices_.size()) {
    throw Error("step events: " + std::to_string(cuda_devices_.size()) + " devices but " +
                std::to_string(fence_clocks_.size()) + " fence clocks");
  }
  if (!side_streams_.empty() && side_streams_.size() != cuda_devices_.size()) {
    throw Error("step events: " + std::to_string(cuda_devices_.size()) + " devices but " +
                std::to_string(side_streams_.size()) + " side streams");
  }
  fence_base_.assign(cuda_devices_.size(), 0);
  fence_nodes_.assign(cuda_devices_.size(), {});
  step_start_.assign(cuda_devices_.size(), nullptr);
  for (std::size_t d = 0; d < cuda_devices_.size(); ++d) {
    CUDA_CHECK(cudaSetDevice(cuda_devices_[d]));
    contexts_.push_back(context_of(compute_streams_[d]));
    step_start_[d] = create_event_for(compute_streams_[d], cudaEventDefault);
  }
}

StepEvents::~StepEvents() {
  destroy_events(step_start_);
  destroy_events(begin_);
  destroy_events(end_);
}

void StepEvents::prepare(const TaskGraph& plan) {
  const auto nodes = static_cast<std::size_t>(plan.node_count());
  if (begin_.size() == nodes) return;
  destroy_events(begin_);
  destroy_events(end_);
  begin_.assign(nodes, nullptr);
  end_.assign(nodes, nullptr);
  producer_.assign(nodes, -1);
  for (int id = 0; id < plan.node_count(); ++id) {
    const Node& node = plan.node(id);
    if (node.device < 0 || node.device >= static_cast<int>(cuda_devices_.size())) {
      throw Error("step events: " + plan.node_name(id) + " is on device " +
                  std::to_string(node.device) + ", beyond the " +
                  std::to_string(cuda_devices_.size()) + " devices given");
    }
    // Every event of a node is recorded on a stream of its device's (green) context: the compute
    // stream, or a transport stream made in the same green context.
    const auto device = static_cast<std::size_t>(node.device);
    CUDA_CHECK(cudaSetDevice(cuda_devices_[device]));
    begin_[static_cast<std::size_t>(id)] =
        create_event_for(compute_streams_[device], cudaEventDefault);
    end_[static_cast<std::size_t>(id)] =
        create_event_for(compute_streams_[device], cudaEventDefault);
  }
  // The payload of a send is made by the compute node it has a data edge from (the last one in
  // the compute stream's order when there are several).
  std::vector<int> position(nodes, 0);  // in its stream's order
  for (int s = 0; s < static_cast<int>(plan.streams().size()); ++s) {
    const std::vector<int>& order = plan.stream_order(s);
    for (std::size_t i = 0; i < order.size(); ++i)
      position[static_cast<std::size_t>(order[i])] = static_cast<int>(i);
  }
  second_.assign(nodes, 0);
  for (const OverlapPair& pair : overlap_pairs(plan))
    second_[static_cast<std::size_t>(pair.second)] = 1;
  const auto& g = plan.graph();
  for (auto [it, end] = boost::edges(g); it != end; ++it) {
    if (g[*it] != EdgeKind::data) continue;
    const int from = static_cast<int>(boost::source(*it, g));
    const int to = static_cast<int>(boost::target(*it, g));
    const Node& sender = plan.node(to);
    const Node& producer = plan.node(from);
    if (sender.kind != NodeKind::send || producer.kind != NodeKind::compute ||
        producer.device != sender.device) {
      continue;
    }
    int& current = producer_[static_cast<std::size_t>(to)];
    if (current < 0 ||
        position[static_cast<std::size_t>(current)] < position[static_cast<std::size_t>(from)]) {
      current = from;
    }
  }
}

StepEvents::LinkSide StepEvents::link_side(const TaskGraph& plan, int id) const {
  const Node& node = plan.node(id);
  const Stream& stream = plan.streams()[static_cast<std::size_t>(node.stream)];
  const Channel channel =
      stream.role == StreamRole::transfer ? Channel::transfer : Channel::pipeline;
  if (node.kind == NodeKind::send) return {node.device, node.device, node.peer, channel};
  return {node.device, node.peer, node.device, channel};
}

void StepEvents::begin_step(const TaskGraph& plan) {
  prepare(plan);
  recorded_.assign(begin_.size(), 0);
  {
    const std::lock_guard lock(mutex_);
    running_.clear();
    // Read before step_start_ is recorded: a block freed at an earlier count was last read by
    // kernels queued before that record.
    for (std::size_t d = 0; d < fence_clocks_.size(); ++d) {
      fence_base_[d] = fence_clocks_[d]->now();
      fence_nodes_[d].clear();
    }
  }
  host_origin_.assign(cuda_devices_.size(), {});
  for (std::size_t d = 0; d < cuda_devices_.size(); ++d) {
    const ScopedContext current(contexts_[d]);
    CUDA_CHECK(cudaEventRecord(step_start_[d], compute_streams_[d]));
    host_origin_[d] = std::chrono::steady_clock::now();
  }
}

void StepEvents::align_host_times(const TaskGraph& plan,
                                  std::chrono::steady_clock::time_point start,
                                  std::vector<NodeTime>& host_times) const {
  if (host_times.size() != static_cast<std::size_t>(plan.node_count())) return;
  for (int id = 0; id < plan.node_count(); ++id) {
    const auto device = static_cast<std::size_t>(plan.node(id).device);
    if (device >= host_origin_.size()) continue;
    const double zero_us =
        std::chrono::duration<double, std::micro>(host_origin_[device] - start).count();
    NodeTime& t = host_times[static_cast<std::size_t>(id)];
    t.start_us -= zero_us;
    t.end_us -= zero_us;
  }
}

cudaStream_t StepEvents::stream_of(int id, std::size_t device) const {
  const bool side = second_[static_cast<std::size_t>(id)] != 0 && !side_streams_.empty() &&
                    side_streams_[device] != nullptr;
  return side ? side_streams_[device] : compute_streams_[device];
}

void StepEvents::begin_node(const TaskGraph& plan, int id) {
  const Node& node = plan.node(id);
  const auto index = static_cast<std::size_t>(id);
  if (node.kind == NodeKind::compute) {
    const auto device = static_cast<std::size_t>(node.device);
    const ScopedContext current(contexts_[device]);
    CUDA_CHECK(cudaEventRecord(begin_[index], stream_of(id, device)));
    return;
  }
  const std::lock_guard lock(mutex_);
  running_[link_side(plan, id)] = id;
}

void StepEvents::end_node(const TaskGraph& plan, int id) {
  const Node& node = plan.node(id);
  const auto index = static_cast<std::size_t>(id);
  if (node.kind == NodeKind::compute) {
    const auto device = static_cast<std::size_t>(node.device);
    const cudaStream_t stream = stream_of(id, device);
    {
      const ScopedContext current(contexts_[device]);
      CUDA_CHECK(cudaEventRecord(end_[index], stream));
    }
    recorded_[index] = 1;
    if (!fence_clocks_.empty() && stream == compute_streams_[device]) {
      {
        const std::lock_guard lock(mutex_);
        fence_nodes_[device].push_back(id);
      }
      fence_clocks_[device]->advance();  // after the record: a count read later is covered
    }
    return;
  }
  const std::lock_guard lock(mutex_);
  running_.erase(link_side(plan, id));
}

cudaEvent_t StepEvents::payload_ready(int device, int from, int to, Channel channel) const {
  int id = -1;
  {
    const std::lock_guard lock(mutex_);
    const auto it = running_.find({device, from, to, channel});
    if (it != running_.end()) id = it->second;
  }
  if (id < 0) return nullptr;
  const int producer = producer_[static_cast<std::size_t>(id)];
  return producer < 0 ? nullptr : end_[static_cast<std::size_t>(producer)];
}

std::pair<cudaEvent_t, cudaEvent_t> StepEvents::transfer_marks(int device, int from, int to,
                                                               Channel channel) {
  int id = -1;
  {
    const std::lock_guard lock(mutex_);
    const auto it = running_.find({device, from, to, channel});
    if (it != running_.end()) id = it->second;
  }
  if (id < 0) return {nullptr, nullptr};
  const auto index = static_cast<std::size_t>(id);
  recorded_[index] = 1;  // the transport records both events before the node ends
  return {begin_[index], end_[index]};
}

cudaEvent_t StepEvents::fence_after(int device, std::int64_t freed_at) const {
  if (device < 0 || static_cast<std::size_t>(device) >= fence_clocks_.size()) return nullptr;
  const auto d = static_cast<std::size_t>(device);
  const std::lock_guard lock(mutex_);
  if (freed_at < fence_base_[d]) return step_start_[d];
  const std::int64_t index = freed_at - fence_base_[d];
  if (index >= static_cast<std::int64_t>(fence_nodes_[d].size())) return nullptr;
  return end_[static_cast<std::size_t>(fence_nodes_[d][static_cast<std::size_t>(index)])];
}

void StepEvents::end_step(const TaskGraph& plan, std::vector<NodeTime>& times) {
  if (times.size() != recorded_.size()) return;  // begin_step was not called for this plan
  auto device_time = [&](int id) {
    const auto index = static_cast<std::size_t>(id);
    const cudaEvent_t start = step_start_[static_cast<std::size_t>(plan.node(id).device)];
    CUDA_CHECK(cudaEventSynchronize(end_[index]));
    return NodeTime{elapsed_us(start, begin_[index]), elapsed_us(start, end_[index])};
  };
  for (int id = 0; id < plan.node_count(); ++id) {
    const auto index = static_cast<std::size_t>(id);
    if (recorded_[index] != 0) times[index] = device_time(id);
  }
  // A recv whose transport left no events shares its send's transfer (one copy on one device).
  for (int id = 0; id < plan.node_count(); ++id) {
    const Node& node = plan.node(id);
    const auto index = static_cast<std::size_t>(id);
    if (node.kind != NodeKind::recv || recorded_[index] != 0 || node.match < 0) continue;
    if (recorded_[static_cast<std::size_t>(node.match)] != 0) {
      times[index] = times[static_cast<std::size_t>(node.match)];
    }
  }
}

}  // namespace pipeplan::cuda
