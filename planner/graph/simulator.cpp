#include "planner/graph/simulator.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <utility>

#include "planner/base/error.h"
#include "profiles/link.h"

namespace pipeplan {

namespace {

// Per directed device pair: when the link is next free. Transfers claim it in the order in
// which both halves become ready (FIFO), and occupy it for bytes / bandwidth; the latency is
// pipelined and does not hold the link.
class Links {
 public:
  explicit Links(int devices)
      : devices_(devices),
        free_at_(static_cast<std::size_t>(devices) * static_cast<std::size_t>(devices), 0.0) {}
  double& free_at(int src, int dst) {
    return free_at_[static_cast<std::size_t>(src) * static_cast<std::size_t>(devices_) +
                    static_cast<std::size_t>(dst)];
  }

 private:
  int devices_;
  std::vector<double> free_at_;
};

[[noreturn]] void report_stuck(const TaskGraph& graph, const std::vector<int>& pending) {
  for (int id = 0; id < graph.node_count(); ++id) {
    if (pending[static_cast<std::size_t>(id)] > 0) {
      throw Error("simulate: " + graph.node_name(id) +
                  " never becomes ready (a dependency cycle or a send/recv order that deadlocks)");
    }
  }
  for (int id = 0; id < graph.node_count(); ++id) {
    const Node& n = graph.node(id);
    if (n.kind != NodeKind::compute && n.match < 0) {
      throw Error("simulate: " + graph.node_name(id) + " has no matching " +
                  (n.kind == NodeKind::send ? "recv" : "send"));
    }
  }
  throw Error("simulate: a send/recv pair never completes");
}

}  // namespace

namespace {

// What the event loop reads of a node, packed (16 bytes) so that popping a node and counting
// its predecessors touch a quarter of a cache line instead of the full Node (~120 bytes, its
// label and micro-batch list never used here). Payload sizes live apart: only transfers read them.
struct HotNode {
  double duration_us;
  int match;  // send/recv: the other half; compute: the other member of an overlapped pair
  std::int16_t device;
  NodeKind kind;
  OpType op;  // the contention curve of a shared GPU
};

// The nodes whose inputs are ready. Where two streams send over one directed link (BPipe's
// transfer streams beside the activation sends), transfers claim the link first come, first
// served, so nodes leave in order of ready time (ties by id): a heap. Otherwise every link's
// transfers belong to one in-order stream and claim it in that stream's order whatever order
// nodes leave in, every start time is the latest end among its inputs, and a stack gives the
// very same times without the heap's cost (a fifth of the simulation on a 48k-node plan).
class ReadyNodes {
 public:
  using Event = std::pair<double, int>;  // (ready time, node)
  explicit ReadyNodes(bool by_time) : by_time_(by_time) {}
  bool empty() const { return items_.empty(); }
  // The earliest ready time (by-time order only).
  double next_time() const { return items_.front().first; }
  void push(double time, int id) {
    items_.emplace_back(time, id);
    if (by_time_) std::push_heap(items_.begin(), items_.end(), std::greater<>{});
  }
  Event pop() {
    if (by_time_) std::pop_heap(items_.begin(), items_.end(), std::greater<>{});
    const Event e = items_.back();
    items_.pop_back();
    return e;
  }

 private:
  bool by_time_;
  std::vector<Event> items_;
};

// An overlapped pair whose members are both ready: both start at `start` and end
// `duration_us` later (overlapped_time_us of their two durations).
struct OverlapStart {
  int first;
  int second;
  double start;
  double duration_us;
};

// A send/recv pair whose halves are both ready: a transfer from `src` to `dst`.
struct Rendezvous {
  int send;
  int recv;
  int src;
  int dst;
  double ready;  // the later half's ready time
};

// Processor sharing for stages on one GPU: every compute op that has started and not ended
// advances through its profiled duration at rate 1 / factor(its op type's curve, k), k being how
// many run at once, so an op's end moves whenever another starts or ends. Events go in time order:
// the next ready node or the next end among the running ops, ends first on a tie (a successor does
// not share the GPU with its predecessor).
//
// With a sustained-load model (Contention::sustained) every op's rate is further divided by
// 1 + factor * H(t), H following the share of devices computing with a lag (an exponential
// average): between two events the share is constant and H moves exponentially towards it, so
// the work done and the next end have closed forms (the end by Newton's method). `load` is H at
// the start (in) and at the end (out).
//
// Transfers keep their own timing (`fixed_transfer`) unless the model has a copy slowdown: then
// a transfer is a copy kernel on its sender's SMs, advancing through its link time at rate
// 1 / sender_computing while the sender runs a compute op and 1 / sender_idle otherwise, and
// the transfers over one directed link go one at a time, first come, first served (the link
// stream is in order).
template <typename Finish, typename Rendezvoused, typename FixedTransfer, typename PairStart>
void simulate_shared_gpu(ReadyNodes& queue, const std::vector<HotNode>& hot, int devices,
                         const Contention& contention, Finish& finish, Rendezvoused& rendezvous,
                         FixedTransfer& fixed_transfer, PairStart& overlap_start, double& load) {
  std::array<const std::vector<double>*, 5> curves{};  // by OpType
  for (const OpType op : {OpType::F, OpType::B, OpType::P1, OpType::P2, OpType::O})
    curves[static_cast<std::size_t>(op)] = &contention.curve(to_string(op));
  struct Running {
    int id;
    double start;
    double work_us;  // profiled time still to do
    const std::vector<double>* curve;
    int partner;  // an overlapped pair runs as one op (its overlapped time) and ends both: -1
  };
  struct Copy {
    Rendezvous pair;
    double start;
    double work_us;  // link time still to do
  };
  struct Link {
    bool busy = false;
    std::deque<Rendezvous> waiting;
  };
  std::vector<Running> running;
  std::vector<Copy> copies;
  std::map<std::pair<int, int>, Link> links;
  std::vector<int> computing(static_cast<std::size_t>(devices), 0);  // running ops per device
  const auto copy_factor = [&](const Copy& c) {
    return computing[static_cast<std::size_t>(c.pair.src)] > 0 ? contention.copy->sender_computing
                                                               : contention.copy->sender_idle;
  };
  double now = 0;
  const std::optional<SustainedLoad>& sustained = contention.sustained;
  const auto share = [&] {
    return std::min(1.0, static_cast<double>(running.size()) / static_cast<double>(devices));
  };
  // Until the next event an op of factor 1 runs at rate 1 / (1 + factor * H(t)), t from now,
  // with H(t) = L + (H - L) exp(-t / tau), L the share computing now.
  // The profiled work an op of factor 1 gets done in the next `dt` (the rate's integral,
  // profiles/contention.h: the formula `calibrate` fits with).
  const auto work_in = [&](double dt) {
    if (!sustained || dt <= 0) return std::max(dt, 0.0);
    return sustained_work(*sustained, dt, share(), load);
  };
  // Its inverse: how long an op of factor 1 takes to do `work` from now.
  const auto time_for = [&](double work) {
    if (!sustained || work <= 0) return work;
    return sustained_time(*sustained, work, share(), load);
  };
  const auto advance = [&](double t) {
    const double dt = t - now;
    const double work = work_in(dt);
    for (Running& r : running)
      r.work_us = std::max(0.0, r.work_us - work / Contention::factor(*r.curve, running.size()));
    for (Copy& c : copies)
      c.work_us = std::max(0.0, c.work_us - dt / copy_factor(c));
    if (sustained && dt > 0) load = sustained_load_after(*sustained, dt, share(), load);
    now = std::max(now, t);
  };
  const auto start_copy = [&](const Rendezvous& pair, double start) {
    const double work = hot[static_cast<std::size_t>(pair.send)].duration_us;
    if (work <= 0) {
      finish(pair.send, start, start);
      finish(pair.recv, start, start);
      return false;
    }
    copies.push_back({pair, start, work});
    return true;
  };
  while (!queue.empty() || !running.empty() || !copies.empty()) {
    double end = std::numeric_limits<double>::infinity();
    std::size_t first = 0;
    bool first_is_copy = false;
    // The op with the least work left at its factor ends first (all share the load's course).
    double least = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < running.size(); ++i) {
      const double w = running[i].work_us * Contention::factor(*running[i].curve, running.size());
      if (w < least) {
        least = w;
        first = i;
      }
    }
    if (!running.empty()) end = now + time_for(least);
    for (std::size_t i = 0; i < copies.size(); ++i) {
      const double t = now + copies[i].work_us * copy_factor(copies[i]);
      if (t < end) {
        end = t;
        first = i;
        first_is_copy = true;
      }
    }
    if (std::isfinite(end) && (queue.empty() || end <= queue.next_time())) {
      advance(end);
      if (first_is_copy) {
        const Copy done = copies[first];
        copies.erase(copies.begin() + static_cast<std::ptrdiff_t>(first));
        finish(done.pair.send, done.start, end);
        finish(done.pair.recv, done.start, end);
        Link& link = links[{done.pair.src, done.pair.dst}];
        link.busy = false;
        while (!link.busy && !link.waiting.empty()) {
          link.busy = start_copy(link.waiting.front(), end);
          link.waiting.pop_front();
        }
      } else {
        const Running done = running[first];
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(first));
        --computing[static_cast<std::size_t>(hot[static_cast<std::size_t>(done.id)].device)];
        finish(done.id, done.start, end);
        if (done.partner >= 0) finish(done.partner, done.start, end);
      }
      continue;
    }
    const auto [time, id] = queue.pop();
    advance(time);
    const HotNode& n = hot[static_cast<std::size_t>(id)];
    if (n.kind != NodeKind::compute) {
      const std::optional<Rendezvous> pair = rendezvous(time, id);
      if (!pair) continue;
      if (!contention.copy) {
        fixed_transfer(*pair);
        continue;
      }
      Link& link = links[{pair->src, pair->dst}];
      if (link.busy) {
        link.waiting.push_back(*pair);
      } else {
        link.busy = start_copy(*pair, pair->ready);
      }
    } else if (n.match >= 0) {
      const std::optional<OverlapStart> pair = overlap_start(time, id);
      if (!pair) continue;
      if (pair->duration_us <= 0) {
        finish(pair->first, pair->start, pair->start);
        finish(pair->second, pair->start, pair->start);
        continue;
      }
      // The pair takes the curve of its backward, the heavier op of the two.
      const OpType op = hot[static_cast<std::size_t>(pair->second)].op;
      running.push_back({pair->first, pair->start, pair->duration_us,
                         curves[static_cast<std::size_t>(op)], pair->second});
      ++computing[static_cast<std::size_t>(n.device)];
    } else if (n.duration_us <= 0) {
      finish(id, time, time);
    } else {
      running.push_back({id, time, n.duration_us, curves[static_cast<std::size_t>(n.op)], -1});
      ++computing[static_cast<std::size_t>(n.device)];
    }
  }
}

}  // namespace

SimResult simulate(const TaskGraph& graph) {
  return simulate(graph, SimOrder::automatic);
}

namespace {

// Whether some device has two compute streams. Separate GPUs under a sustained-load model (no
// curve) give each device its own load H_d (DeviceLoad, profiles/contention.h), 1 while one of
// its compute ops runs and 0 while none does, averaged exponentially; an op (an overlapped pair
// as one) lasts the time its profiled work takes from H_d at its start. A device's compute ops
// must then come in order of start: they do with one compute stream per device (what lowering
// makes), whatever order ready nodes leave in; two compute streams on a device need the by-time
// order.
bool compute_streams_overlap(const TaskGraph& graph) {
  std::vector<char> seen(static_cast<std::size_t>(graph.meta.devices), 0);
  for (const Stream& stream : graph.streams()) {
    if (stream.role != StreamRole::compute || stream.device < 0 ||
        stream.device >= graph.meta.devices) {
      continue;
    }
    if (seen[static_cast<std::size_t>(stream.device)]++ != 0) return true;
  }
  return false;
}

// One step from `loads` (the sustained-load model's H at its start, periodic_start_loads' sizes;
// at its end when it returns); the step's metrics only where `with_metrics` (a pass run only for
// the loads it leaves skips them).
SimResult simulate_step(const TaskGraph& graph, SimOrder order, std::vector<double>& loads,
                        bool with_metrics) {
  const int n_nodes = graph.node_count();
  const int n_devices = graph.meta.devices;
  SimResult result;
  result.times.assign(static_cast<std::size_t>(n_nodes), NodeTime{});

  // One sequential pass over the nodes; the rest reads the packed copies. It comes before the
  // Boost.Graph view is asked for, so that validate_and_simulate builds the view meanwhile.
  if (n_devices > std::numeric_limits<std::int16_t>::max()) {
    throw Error("simulate: " + std::to_string(n_devices) + " devices is more than supported");
  }
  std::vector<HotNode> hot(static_cast<std::size_t>(n_nodes));
  std::vector<std::int64_t> payload_bytes(static_cast<std::size_t>(n_nodes), 0);
  // Per directed link, the stream whose sends use it (-1: none yet); a second one sets shared_link.
  const auto link_count = static_cast<std::size_t>(n_devices) * static_cast<std::size_t>(n_devices);
  std::vector<int> link_stream(link_count, -1);
  bool shared_link = order == SimOrder::by_ready_time;
  const std::span<const Node> nodes = graph.nodes();
  bool any_pair = false;  // a node flagged overlaps_next (this pass reads them all anyway)
  for (int id = 0; id < n_nodes; ++id) {
    const Node& n = nodes[static_cast<std::size_t>(id)];
    any_pair = any_pair || n.overlaps_next;
    if (n.device < 0 || n.device >= n_devices) {
      throw Error("simulate: " + graph.node_name(id) + " runs on unknown device " +
                  std::to_string(n.device));
    }
    hot[static_cast<std::size_t>(id)] = {n.duration_us, n.kind == NodeKind::compute ? -1 : n.match,
                                         static_cast<std::int16_t>(n.device), n.kind, n.op};
    payload_bytes[static_cast<std::size_t>(id)] = n.bytes;
    if (n.kind == NodeKind::send && !shared_link) {
      if (n.peer < 0 || n.peer >= n_devices) {
        shared_link = true;  // a broken pair: keep the general order for the error path
        continue;
      }
      int& owner =
          link_stream[static_cast<std::size_t>(n.device) * static_cast<std::size_t>(n_devices) +
                      static_cast<std::size_t>(n.peer)];
      if (owner == -1) owner = n.stream;
      if (owner != n.stream) shared_link = true;
    }
  }
  // Overlapped pairs: each member's match is the other, and the stream-order edge between them
  // is not a wait (the pair starts once both members' inputs are ready).
  const std::vector<OverlapPair> pairs =
      any_pair ? overlap_pairs(graph) : std::vector<OverlapPair>();
  std::vector<char> pair_first(pairs.empty() ? 0 : static_cast<std::size_t>(n_nodes), 0);
  for (const OverlapPair& p : pairs) {
    hot[static_cast<std::size_t>(p.first)].match = p.second;
    hot[static_cast<std::size_t>(p.second)].match = p.first;
    pair_first[static_cast<std::size_t>(p.first)] = 1;
  }
  // Per node: when its inputs are ready, how many it still waits for, and (send/recv) whether
  // this half has reached the rendezvous. One record, so a wake-up touches one cache line.
  struct State {
    double ready_at = 0;
    int pending = 0;
    bool half_ready = false;
  };
  std::vector<State> state(static_cast<std::size_t>(n_nodes));
  // The edge from a send to its matched recv is the rendezvous itself, not a wait; so is the
  // stream-order edge from an overlapped pair's first member to its second.
  // An edge from the second member back to the first is a wait like any other (a cycle).
  auto is_pair_edge = [&](std::size_t from, std::size_t to) {
    const HotNode& f = hot[from];
    if (f.match != static_cast<int>(to)) return false;
    return f.kind == NodeKind::send || (f.kind == NodeKind::compute && pair_first[from] != 0);
  };
  // Waits per node, from the edge records: a flat pass that needs no adjacency (the Boost.Graph
  // view, which validate_and_simulate's helper builds meanwhile).
  for (const TaskGraph::EdgeRecord& e : graph.edge_records()) {
    const auto from = static_cast<std::size_t>(e.from);
    const auto to = static_cast<std::size_t>(e.to);
    if (!is_pair_edge(from, to)) ++state[to].pending;
  }
  const auto& g = graph.graph();
  // Stages sharing one GPU (emulation) run their ops at a rate that depends on how many run at
  // once, so the loop must go in time order.
  const Contention& contention = graph.meta.contention;
  const bool shared_gpu = !contention.empty();
  const bool per_device_load = !shared_gpu && contention.sustained;
  ReadyNodes queue(shared_link || shared_gpu ||
                   (per_device_load && compute_streams_overlap(graph)));
  for (int id = 0; id < n_nodes; ++id) {
    if (state[static_cast<std::size_t>(id)].pending == 0) queue.push(0.0, id);
  }

  Links links(n_devices);
  int finished = 0;
  auto finish = [&](int id, double start, double end) {
    result.times[static_cast<std::size_t>(id)] = {start, end};
    ++finished;
    for (auto [it, last] = boost::out_edges(static_cast<std::size_t>(id), g); it != last; ++it) {
      const auto next = boost::target(*it, g);
      if (is_pair_edge(static_cast<std::size_t>(id), next)) continue;
      State& st = state[next];
      st.ready_at = std::max(st.ready_at, end);
      if (--st.pending == 0) queue.push(st.ready_at, static_cast<int>(next));
    }
  };

  const P2pLink link = graph.meta.link;
  // Rendezvous: a transfer starts once both halves are at the head of their streams with their
  // inputs ready (and, below, its link is free). The half that arrives second gets the pair.
  auto rendezvous = [&](double time, int id) -> std::optional<Rendezvous> {
    const HotNode& n = hot[static_cast<std::size_t>(id)];
    state[static_cast<std::size_t>(id)].half_ready = true;
    if (n.match < 0 || n.match >= n_nodes || !state[static_cast<std::size_t>(n.match)].half_ready) {
      return std::nullopt;
    }
    const HotNode& other = hot[static_cast<std::size_t>(n.match)];
    const bool is_send = n.kind == NodeKind::send;
    // The later half's ready time: under a stack the half taken second may be the earlier one.
    return Rendezvous{is_send ? id : n.match, is_send ? n.match : id,
                      is_send ? n.device : other.device, is_send ? other.device : n.device,
                      std::max(time, state[static_cast<std::size_t>(n.match)].ready_at)};
  };
  // An overlapped pair: the member that is ready second starts both.
  const OverlapModel overlap = graph.meta.overlap;
  auto overlap_start = [&](double time, int id) -> std::optional<OverlapStart> {
    State& st = state[static_cast<std::size_t>(id)];
    st.half_ready = true;
    const int other = hot[static_cast<std::size_t>(id)].match;
    const State& ot = state[static_cast<std::size_t>(other)];
    if (!ot.half_ready) return std::nullopt;
    const bool first = pair_first[static_cast<std::size_t>(id)] != 0;
    const int a = first ? id : other;
    const int b = first ? other : id;
    return OverlapStart{a, b, std::max(time, ot.ready_at),
                        overlapped_time_us(hot[static_cast<std::size_t>(a)].duration_us,
                                           hot[static_cast<std::size_t>(b)].duration_us, overlap)};
  };
  // A transfer of fixed duration that claims its link for bytes / bandwidth.
  auto fixed_transfer = [&](const Rendezvous& pair) {
    double& link_free = links.free_at(pair.src, pair.dst);
    const double start = std::max(pair.ready, link_free);
    link_free = start + link_occupancy_us(link, payload_bytes[static_cast<std::size_t>(pair.send)]);
    const double end = start + hot[static_cast<std::size_t>(pair.send)].duration_us;
    finish(pair.send, start, end);
    finish(pair.recv, start, end);
  };

  // Separate GPUs: a compute op lasts compute_time(device, start, profiled time).
  const auto run_separate = [&](auto&& compute_time) {
    while (!queue.empty()) {
      const auto [time, id] = queue.pop();
      const HotNode& n = hot[static_cast<std::size_t>(id)];
      if (n.kind == NodeKind::compute && n.match >= 0) {
        if (const std::optional<OverlapStart> pair = overlap_start(time, id)) {
          const double end = pair->start + compute_time(n.device, pair->start, pair->duration_us);
          finish(pair->first, pair->start, end);
          finish(pair->second, pair->start, end);
        }
      } else if (n.kind == NodeKind::compute) {
        finish(id, time, time + compute_time(n.device, time, n.duration_us));
      } else if (const std::optional<Rendezvous> pair = rendezvous(time, id)) {
        fixed_transfer(*pair);
      }
    }
  };
  if (shared_gpu) {
    double load = loads.empty() ? 0.0 : loads.front();
    simulate_shared_gpu(queue, hot, n_devices, contention, finish, rendezvous, fixed_transfer,
                        overlap_start, load);
    if (!loads.empty()) loads.front() = load;
  } else if (per_device_load) {
    const SustainedLoad& sustained = *contention.sustained;
    std::vector<DeviceLoad> device_loads = device_loads_from(loads, n_devices);
    run_separate([&](std::int16_t device, double start, double work) {
      return device_loads[static_cast<std::size_t>(device)].run(sustained, start, work);
    });
    // The loads the step leaves at its end (the last node's end).
    double step_end = 0;
    for (const NodeTime& t : result.times)
      step_end = std::max(step_end, t.end_us);
    write_loads_at(device_loads, sustained, step_end, loads);
  } else {
    run_separate([](std::int16_t /*device*/, double /*start*/, double work) { return work; });
  }
  if (finished != n_nodes) {
    std::vector<int> pending;
    pending.reserve(state.size());
    for (const State& st : state)
      pending.push_back(st.pending);
    report_stuck(graph, pending);
  }

  if (with_metrics) static_cast<StepMetrics&>(result) = step_metrics(graph, result.times);
  return result;
}

// How many loads the sustained-load model follows: one per device on separate GPUs (no curve),
// one on a shared GPU, none without the term.
std::size_t load_count(const TaskGraph& graph) {
  const Contention& contention = graph.meta.contention;
  if (!contention.sustained) return 0;
  return contention.empty() ? static_cast<std::size_t>(std::max(graph.meta.devices, 0)) : 1;
}

}  // namespace

std::vector<double> periodic_start_loads(const TaskGraph& graph, SimOrder order) {
  const Contention& contention = graph.meta.contention;
  if (!contention.sustained) return {};
  return periodic_loads(*contention.sustained, load_count(graph), [&](std::vector<double>& loads) {
    const SimResult step = simulate_step(graph, order, loads, false);
    double span = 0;
    for (const NodeTime& t : step.times)
      span = std::max(span, t.end_us);
    return span;
  });
}

SimResult simulate_from(const TaskGraph& graph, std::vector<double>& loads, SimOrder order) {
  const std::size_t count = load_count(graph);
  if (loads.size() != count) {
    throw Error("simulate: " + std::to_string(loads.size()) + " start loads for a model that has " +
                std::to_string(count));
  }
  return simulate_step(graph, order, loads, true);
}

SimResult simulate(const TaskGraph& graph, SimOrder order) {
  std::vector<double> loads = periodic_start_loads(graph, order);
  return simulate_step(graph, order, loads, true);
}

}  // namespace pipeplan
