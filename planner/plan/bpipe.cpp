#include "planner/plan/bpipe.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include "planner/base/error.h"
#include "profiles/link.h"

namespace pipeplan {

std::string_view to_string(BpipeMode mode) {
  switch (mode) {
    case BpipeMode::off:
      return "off";
    case BpipeMode::on:
      return "on";
    case BpipeMode::automatic:
      return "auto";
  }
  return "?";
}

BpipeMode bpipe_mode_from_string(std::string_view text) {
  if (text == "off") return BpipeMode::off;
  if (text == "on") return BpipeMode::on;
  if (text == "auto") return BpipeMode::automatic;
  throw FieldError("bpipe", "must be off, on or auto, got '" + std::string(text) + "'");
}

std::int64_t BpipePlan::bytes_per_step() const {
  std::int64_t total = 0;
  for (const BpipePair& pair : pairs) {
    for (const BpipeMove& move : pair.moves)
      total += 2 * move.bytes;
  }
  return total;
}

bool is_transfer(const TaskGraph& graph, int node) {
  return is_stash_move(graph.node(node).transfer);
}

namespace {

// What one device's action order does to its memory when it keeps at most `cap` stashes.
struct Replay {
  std::vector<BpipeMove> moves;
  int max_evicted = 0;
  std::int64_t peak_bytes = 0;  // order-based estimate: static + stashes + retained X/dY
};

bool is_backward(OpType op) {
  return op == OpType::B || op == OpType::P1;
}

// Evict the resident stash needed latest once more than `cap` are held; load the evicted stash
// needed soonest as soon as a backward frees a slot. Empty when the cap cannot work (a backward
// whose stash is still away).
std::optional<Replay> replay(const std::vector<Action>& order, const StageCost& cost,
                             std::int64_t static_bytes, int cap) {
  int last_mb = 0;
  for (const Action& a : order)
    last_mb = std::max(last_mb, a.microbatches.back());
  std::vector<int> needed_at(static_cast<std::size_t>(last_mb) + 1, 0);  // its backward's position
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (is_backward(order[i].op))
      needed_at[static_cast<std::size_t>(order[i].microbatches.front())] = static_cast<int>(i);
  }
  const auto needed = [&](int mb) { return needed_at[static_cast<std::size_t>(mb)]; };
  std::vector<char> moved(needed_at.size(), 0);  // evicted once (a stash moves at most once)
  Replay r;
  std::vector<int> resident;
  std::vector<int> away;  // indices into r.moves
  std::int64_t current = static_bytes;
  r.peak_bytes = current;
  // `work`: the op's working memory, held while it runs (StageCost::forward_work_bytes).
  auto note = [&](std::int64_t work = 0) { r.peak_bytes = std::max(r.peak_bytes, current + work); };
  // An evicted stash leaves when its send ends. A forward next (the warm-up) waits for it
  // (add_bpipe_transfers), so its stash takes the evicted one's memory: the evictor peaks at
  // cap + 1 stashes, as BPipe intends. A backward next does not wait (its own stash frees
  // memory): the evicted stash is counted until that backward's allocation has been noted, and
  // the op after it waits instead.
  std::int64_t in_flight = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const Action& a = order[i];
    const int pos = static_cast<int>(i);
    const int mb = a.microbatches.front();
    if (a.op == OpType::F) {
      current -= in_flight;
      in_flight = 0;
      current += cost.stash_bytes;
      note(cost.forward_work_bytes);
      resident.push_back(mb);
      if (static_cast<int>(resident.size()) <= cap) continue;
      // Only stashes that have not moved yet: a loaded one is needed sooner than any newer one.
      auto latest = resident.end();
      for (auto it = resident.begin(); it != resident.end(); ++it) {
        if (!moved[static_cast<std::size_t>(*it)] &&
            (latest == resident.end() || needed(*it) > needed(*latest)))
          latest = it;
      }
      if (latest == resident.end()) continue;
      moved[static_cast<std::size_t>(*latest)] = 1;
      r.moves.push_back(BpipeMove{a.stage, *latest, cost.stash_bytes, pos, -1, needed(*latest)});
      away.push_back(static_cast<int>(r.moves.size() - 1));
      r.max_evicted = std::max(r.max_evicted, static_cast<int>(away.size()));
      resident.erase(latest);
      in_flight = cost.stash_bytes;
    } else if (is_backward(a.op)) {
      const auto it = std::find(resident.begin(), resident.end(), mb);
      if (it == resident.end()) return std::nullopt;
      if (a.op == OpType::P1) {
        current += cost.retained_bytes;
        note(cost.p1_work_bytes);
      } else {
        note(cost.fused_work_bytes);
      }
      current -= in_flight;
      in_flight = 0;
      resident.erase(it);
      current -= cost.stash_bytes;
      std::sort(away.begin(), away.end(), [&](int x, int y) {
        return r.moves[static_cast<std::size_t>(x)].needed_by <
               r.moves[static_cast<std::size_t>(y)].needed_by;
      });
      while (static_cast<int>(resident.size()) < cap && !away.empty()) {
        BpipeMove& move = r.moves[static_cast<std::size_t>(away.front())];
        move.load_after = pos;
        resident.push_back(move.mb);
        away.erase(away.begin());
        current += cost.stash_bytes;
        note();
      }
    } else {  // P2 releases the retained X/dY of its micro-batches
      note(cost.p2_work(static_cast<int>(a.microbatches.size())));
      current -= static_cast<std::int64_t>(a.microbatches.size()) * cost.retained_bytes;
    }
  }
  return r;
}

int compute_stream(const TaskGraph& graph, int device) {
  for (std::size_t s = 0; s < graph.streams().size(); ++s) {
    const Stream& stream = graph.streams()[s];
    if (stream.device == device && stream.role == StreamRole::compute) return static_cast<int>(s);
  }
  throw Error("bpipe: device " + std::to_string(device) + " has no compute stream");
}

// The cap (1 .. the natural peak count) that minimises the larger of the evictor's estimate and
// a conservative bound for the acceptor (its own peak plus everything it may hold for the pair).
// Among caps within kBpipeSamePeak of that minimum and within half a stash of it (a cap that saves
// a whole stash wins: where static memory dwarfs the stashes, as with full recomputation, 0.5 % can
// exceed one), the largest (fewest transfers) that leaves the two ends within kBalanced of each
// other, else the best balanced: each end holding about half of the pair's stashes, BPipe's aim.
// (make_plan then keeps the pair's transfers only where its simulated peak falls.)
// `range` bounds the caps tried; nullopt when none in it works (with the full range, a pair whose
// every cap fails keeps everything: the natural count, no moves).
std::optional<BpipePair> plan_pair(const TaskGraph& graph, const std::vector<StageCost>& costs,
                                   int evictor, int acceptor, CapRange range) {
  constexpr double kBalanced = 0.10;
  const auto& order = graph.schedule.per_device[static_cast<std::size_t>(evictor)];
  const auto& acceptor_order = graph.schedule.per_device[static_cast<std::size_t>(acceptor)];
  const StageCost& cost = costs[static_cast<std::size_t>(order.front().stage)];
  const StageCost& acceptor_cost = costs[static_cast<std::size_t>(acceptor_order.front().stage)];
  auto static_of = [&](int d) {
    const auto& s = graph.meta.static_bytes;
    return static_cast<std::size_t>(d) < s.size() ? s[static_cast<std::size_t>(d)] : 0;
  };
  // The most stashes the evictor holds keeping all: every cap from there up replays alike.
  int natural = 0;
  for (int held = 0; const Action& a : order) {
    held += a.op == OpType::F ? 1 : is_backward(a.op) ? -1 : 0;
    natural = std::max(natural, held);
  }
  natural = std::max(natural, 1);
  const auto own =
      replay(acceptor_order, acceptor_cost, static_of(acceptor), std::numeric_limits<int>::max());
  const std::int64_t acceptor_own = own ? own->peak_bytes : static_of(acceptor);
  struct Option {
    BpipePair pair;
    std::int64_t peak = 0, imbalance = 0;
  };
  std::vector<Option> options;  // by falling cap
  for (int cap = std::min(natural, range.max); cap >= std::max(1, range.min); --cap) {
    auto r = replay(order, cost, static_of(evictor), cap);
    if (!r) continue;
    const std::int64_t acceptor_bound = acceptor_own + r->max_evicted * cost.stash_bytes;
    options.push_back({BpipePair{evictor, acceptor, cap, r->max_evicted, std::move(r->moves)},
                       std::max(r->peak_bytes, acceptor_bound),
                       std::abs(r->peak_bytes - acceptor_bound)});
  }
  if (options.empty()) {
    if (range.min <= 1 && range.max >= natural) return BpipePair{evictor, acceptor, natural, 0, {}};
    return std::nullopt;
  }
  std::int64_t lowest = std::numeric_limits<std::int64_t>::max();
  for (const Option& o : options)
    lowest = std::min(lowest, o.peak);
  const double same_peak = std::min(static_cast<double>(lowest) * kBpipeSamePeak,
                                    static_cast<double>(cost.stash_bytes) / 2);
  const Option* best = nullptr;
  for (const Option& o : options) {  // by falling cap: the first balanced one has fewest moves
    if (static_cast<double>(o.peak - lowest) > same_peak) continue;
    if (static_cast<double>(o.imbalance) <= kBalanced * static_cast<double>(o.peak)) return o.pair;
    if (best == nullptr || o.imbalance < best->imbalance) best = &o;
  }
  return best != nullptr ? best->pair : options.front().pair;
}

Node transfer_node(NodeKind kind, Transfer what, const BpipeMove& move, int device, int stream,
                   int peer, const std::string& tag, const P2pLink& link) {
  Node n;
  n.kind = kind;
  n.op = OpType::F;
  n.transfer = what;
  n.device = device;
  n.stream = stream;
  n.stage = move.stage;
  n.microbatches = {move.mb};
  n.duration_us = transfer_time_us(link, move.bytes);
  n.bytes = move.bytes;
  n.peer = peer;
  set_label(n, std::string(to_string(what)) + " " + tag);  // stored only if the fields differ
  return n;
}

}  // namespace

BpipePlan plan_bpipe(const TaskGraph& graph, const std::vector<StageCost>& costs) {
  return *plan_bpipe(graph, costs, {});  // the full ranges always give a plan
}

std::optional<BpipePlan> plan_bpipe(const TaskGraph& graph, const std::vector<StageCost>& costs,
                                    std::span<const CapRange> ranges) {
  const Schedule& s = graph.schedule;
  const std::string& family = graph.meta.schedule.empty() ? s.family : graph.meta.schedule;
  if (family != "1f1b") {
    throw FieldError("bpipe",
                     "schedule '" + family +
                         "' is not supported; BPipe pairs the stages of 1f1b, one stage per device "
                         "(docs/design/bpipe.md)");
  }
  if (s.devices < 2) {
    throw FieldError("bpipe", "needs at least 2 stages (it pairs stage x with stage P - 1 - x)");
  }
  if (s.stage_count() != s.devices) {
    throw FieldError("bpipe", "needs one stage per device (got " + std::to_string(s.stage_count()) +
                                  " stages on " + std::to_string(s.devices) + " devices)");
  }
  BpipePlan plan;
  for (int x = 0; x < s.devices / 2; ++x) {
    const auto index = static_cast<std::size_t>(x);
    std::optional<BpipePair> pair = plan_pair(graph, costs, x, s.devices - 1 - x,
                                              index < ranges.size() ? ranges[index] : CapRange{});
    if (!pair) return std::nullopt;
    plan.pairs.push_back(std::move(*pair));
  }
  return plan;
}

void add_bpipe_transfers(TaskGraph& graph, const BpipePlan& plan) {
  for (const BpipePair& pair : plan.pairs) {
    if (pair.moves.empty()) continue;
    const int ev = pair.evictor, ac = pair.acceptor;
    const std::vector<int> compute = graph.stream_order(compute_stream(graph, ev));
    const int ev_stream = graph.stream(ev, StreamRole::transfer, ac);
    const int ac_stream = graph.stream(ac, StreamRole::transfer, ev);
    // (trigger position, 0 = evict / 1 = load, move): one order for both ends of the pair.
    std::vector<std::tuple<int, int, std::size_t>> events;
    for (std::size_t i = 0; i < pair.moves.size(); ++i) {
      events.emplace_back(pair.moves[i].evict_after, 0, i);
      events.emplace_back(pair.moves[i].load_after, 1, i);
    }
    std::sort(events.begin(), events.end());
    std::vector<int> evict_recv(pair.moves.size(), -1);
    const P2pLink& link = graph.meta.link;
    for (const auto& [position, kind, i] : events) {
      const BpipeMove& move = pair.moves[i];
      const int forward = compute[static_cast<std::size_t>(move.evict_after)];
      const std::string tag = node_label(graph.node(forward));
      if (kind == 0) {
        Node send =
            transfer_node(NodeKind::send, Transfer::evict, move, ev, ev_stream, ac, tag, link);
        send.free_bytes = move.bytes;
        Node recv =
            transfer_node(NodeKind::recv, Transfer::evict, move, ac, ac_stream, ev, tag, link);
        recv.alloc_bytes = move.bytes;
        const auto [s, r] = graph.add_message(std::move(send), std::move(recv));
        graph.add_data_edge(forward, s);
        // The memory the stash leaves is what the evictor's next forward allocates, if the next
        // op is one (the warm-up), else what the op after next allocates (replay(): the stash is
        // counted until a next backward has allocated): that op waits for the send to end, so a
        // runtime whose host runs ahead of the GPU cannot allocate it while the stash is still
        // there (docs/design/bpipe.md, "Transfer plan": the next forward, or the op after next,
        // waits for the eviction).
        const std::size_t next = static_cast<std::size_t>(move.evict_after) + 1;
        const bool forward_next =
            next < compute.size() && graph.node(compute[next]).op == OpType::F;
        const std::size_t reuser = forward_next ? next : next + 1;
        if (reuser < compute.size()) graph.add_data_edge(s, compute[reuser]);
        evict_recv[i] = r;
      } else {
        Node send =
            transfer_node(NodeKind::send, Transfer::load, move, ac, ac_stream, ev, tag, link);
        send.free_bytes = move.bytes;
        Node recv =
            transfer_node(NodeKind::recv, Transfer::load, move, ev, ev_stream, ac, tag, link);
        recv.alloc_bytes = move.bytes;
        const auto [s, r] = graph.add_message(std::move(send), std::move(recv));
        graph.add_data_edge(evict_recv[i], s);
        graph.add_data_edge(compute[static_cast<std::size_t>(position)], r);
        graph.add_data_edge(r, compute[static_cast<std::size_t>(move.needed_by)]);
      }
    }
  }
}

}  // namespace pipeplan
