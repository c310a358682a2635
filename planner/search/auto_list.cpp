#include "planner/search/auto_list.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "planner/base/error.h"
#include "planner/base/index.h"
#include "planner/base/limits.h"
#include "planner/graph/validator.h"

namespace pipeplan {

std::string ListVariant::name() const {
  std::string depth = "memory";
  if (depth_factor > 0) {
    depth = std::to_string(depth_factor);
    depth = depth.substr(0, depth.find('.') + 2) + "x";
  }
  if (!split) return "depth=" + depth + " fused";
  std::string lag;
  if (p2_lag > 0) {
    lag = std::to_string(p2_lag);
    lag = " lag=" + lag.substr(0, lag.find('.') + 2) + "x";
  }
  const char* fills[] = {"fit", "always", "half"};
  return "depth=" + depth + " fill=" + fills[static_cast<int>(fill)] + lag +
         (alternate ? " alternate" : "");
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Kind : std::uint8_t { wait, forward, p1, p2 };

// 16 bytes, so that decide() returns it in two registers: a 24-byte one went through memory, and
// the caller's wide load of the narrower stores that wrote it stalled on store forwarding (an
// eighth of a P = 32 V run's samples sat on that load).
struct Decision {
  Decision() = default;
  Decision(double at, Kind what, int s, int k)
      : start(at), group(k), stage(static_cast<std::int16_t>(s)), kind(what) {}
  double start = kInf;
  std::int32_t group = 1;  // P2 group size (at most limits::kMaxMicrobatches)
  std::int16_t stage = 0;  // at most limits::kMaxStages
  Kind kind = Kind::wait;
  std::uint8_t unused = 0;  // no padding: GCC copied the 15 bytes of data with overlapping
                            // 8-byte moves, which defeated store forwarding once more
};
static_assert(sizeof(Decision) == 16);
static_assert(limits::kMaxStages <= std::numeric_limits<std::int16_t>::max());

// The device with the smallest key (ties: the lower device) over a fixed set of devices. Each
// match holds its winner's (key, device), so replaying a changed device's path reads only the
// siblings, which do not depend on one another: a short chain of compares, not a load of the
// winner's key per level. Keys are compared as integers that order as the doubles do, a match
// decided with both tests evaluated (no short circuit): 5 % off a P = 32 V run (BM_ListSchedule/
// 32/96/1, fastest of 15, 1.41 -> 1.33 ms). Fully branch-free matches (masks) were slower: the
// selects then chain through every level where predicted branches let the replay run ahead.
class Tournament {
 public:
  explicit Tournament(int n) : key_(idx(n), kInf) {
    size_ = 1;
    while (size_ < n)
      size_ *= 2;
    tree_.assign(idx(2 * size_), Entry{order_key(kInf), std::numeric_limits<int>::max()});
    for (int d = 0; d < n; ++d)
      tree_[idx(size_ + d)] = Entry{order_key(kInf), d};
    for (int i = size_ - 1; i >= 1; --i)
      tree_[idx(i)] = pick(tree_[idx(2 * i)], tree_[idx(2 * i + 1)]);
  }
  void set(int d, double key) {
    if (key_[idx(d)] == key) return;  // its place in every match is unchanged
    key_[idx(d)] = key;
    int i = size_ + d;
    Entry winner{order_key(key), d};
    tree_[idx(i)] = winner;
    for (; i > 1; i /= 2) {
      winner = pick(winner, tree_[idx(i ^ 1)]);
      tree_[idx(i / 2)] = winner;
    }
  }
  int winner() const { return tree_[1].device; }
  double key(int d) const { return key_[idx(d)]; }

 private:
  struct Entry {
    std::uint64_t key;  // order_key of the device's key
    int device;         // padding entries: beyond every device, so they never win a tie
  };
  // An unsigned integer that orders as the double does (NaN aside): the sign bit flipped for
  // positive values, every bit for negative ones; -0 is made +0 first, as the two compare equal.
  static std::uint64_t order_key(double key) {
    const auto bits = std::bit_cast<std::uint64_t>(key + 0.0);
    constexpr std::uint64_t kSign = std::uint64_t{1} << 63;
    return (bits & kSign) != 0 ? ~bits : bits | kSign;
  }
  static Entry pick(const Entry& a, const Entry& b) {
    const bool take_b = (b.key < a.key) | ((b.key == a.key) & (b.device < a.device));
    return {take_b ? b.key : a.key, take_b ? b.device : a.device};
  }
  int size_ = 1;
  std::vector<double> key_;
  std::vector<Entry> tree_;
};

// A first-in, first-out queue that never shrinks: a vector and the index of its head (a deque's
// block bookkeeping cost a fifth of a list-scheduler run).
template <typename T>
class Fifo {
 public:
  void reserve(std::size_t n) { items_.reserve(n); }
  void push(const T& item) { items_.push_back(item); }
  bool empty() const { return head_ == items_.size(); }
  std::size_t size() const { return items_.size() - head_; }
  const T& front() const { return items_[head_]; }
  void pop() { ++head_; }

 private:
  std::vector<T> items_;
  std::size_t head_ = 0;
};

struct Device {
  std::vector<int> stages;  // ascending; the first is where a micro-batch enters the device
  int first = 0;
  double free_at = 0;
  double limit = 0;              // memory limit in bytes; 0: none
  std::int64_t memory = 0;       // static + activations, in the validator's order semantics
  std::int64_t later_stash = 0;  // the largest stash of a stage after `first`
  std::int64_t max_growth = 0;   // the largest P1 growth of its stages
  std::int64_t max_work = 0;     // the most working memory an op of its stages holds
  int inflight = 0;              // micro-batches entered and not yet through the first P1
  int backward_done = 0, backward_total = 0;
  int depth_cap = 0;
  int p2_lag = 0;        // P2s kept back for the end
  bool last_p1 = false;  // its last action was a P1
  std::int64_t pending_retained = 0;
  int pending_p2 = 0;           // P1s run whose P2 has not
  std::vector<int> neighbours;  // devices whose decisions its actions change
  std::vector<Action> actions;
};

class ListScheduler {
 public:
  ListScheduler(const ListInputs& in, const ListVariant& variant, int max_group)
      : in_(in),
        costs_(*in.costs),
        split_(variant.split),
        fill_(variant.fill),
        alternate_(variant.alternate),
        max_group_(max_group),
        p_(in.devices),
        m_(in.microbatches),
        s_(static_cast<int>(in.stage_device.size())),
        device_(idx(p_)),
        next_f_(idx(s_), 0),
        f_done_(idx(s_), 0),
        p1_done_(idx(s_), 0),
        gradients_(idx(s_)),
        pending_(idx(s_)),
        forward_at_(idx(s_) * idx(m_), kInf),
        comm_(idx(s_), 0.0),
        link_free_(idx(p_) * idx(p_), 0.0) {
    for (int s = 0; s < s_; ++s) {
      device(in.stage_device[idx(s)]).stages.push_back(s);
      if (s + 1 < s_ && in.stage_device[idx(s)] != in.stage_device[idx(s + 1)])
        comm_[idx(s)] = transfer_time_us(in.link, costs_[idx(s)].send_bytes);
    }
    for (int mb = 0; mb < m_; ++mb)
      forward_at_[idx(mb)] = 0.0;  // stage 0's input is there at the start
    for (int s = 0; s < s_; ++s) {
      gradients_[idx(s)].reserve(idx(m_));
      pending_[idx(s)].reserve(idx(m_));
    }
    for (int d = 0; d < p_; ++d) {
      Device& dev = device(d);
      dev.memory = d < static_cast<int>(in.static_bytes.size()) ? in.static_bytes[idx(d)] : 0;
      dev.limit =
          d < static_cast<int>(in.memory_limit_bytes.size()) ? in.memory_limit_bytes[idx(d)] : 0;
      if (dev.limit > 0 && static_cast<double>(dev.memory) > dev.limit) {
        // Named as the validator names it, not as a micro-batch that does not fit.
        const auto [needed, allowed] = gib_texts_apart(static_cast<double>(dev.memory), dev.limit);
        throw FieldError("memory_limit_bytes",
                         "device " + std::to_string(d) + " needs " + needed +
                             " for parameters, gradients and optimizer state, above its limit " +
                             allowed);
      }
      dev.first = dev.stages.empty() ? 0 : dev.stages.front();
      for (const int s : dev.stages) {
        if (s != dev.first) dev.later_stash = std::max(dev.later_stash, cost(s).stash_bytes);
        dev.max_growth = std::max(dev.max_growth, p1_growth(s));
        dev.max_work = std::max(dev.max_work, cost(s).max_work_bytes());
        for (const int t : {s - 1, s + 1}) {
          if (t < 0 || t >= s_) continue;
          const int e = in.stage_device[idx(t)];
          if (e != d &&
              std::find(dev.neighbours.begin(), dev.neighbours.end(), e) == dev.neighbours.end())
            dev.neighbours.push_back(e);
        }
      }
      dev.backward_total = static_cast<int>(dev.stages.size()) * m_;
      dev.actions.reserve(dev.stages.size() * idx(m_) * 3);
      const int k = std::max(1, static_cast<int>(dev.stages.size()));
      const double cap = variant.depth_factor > 0
                             ? std::ceil(variant.depth_factor * (s_ - dev.first) / k - 1e-9)
                             : static_cast<double>(m_);
      dev.depth_cap = std::max(1, static_cast<int>(cap));
    }
    if (variant.p2_lag > 0 && split_) set_p2_lags(variant.p2_lag);
    max_group_ = std::max(1, std::min(max_group_, m_));
    if (split_) build_group_tables();
  }

  Schedule run() {
    // Each device's decision, recomputed only when an action can have changed it; the next to
    // act is the earliest (ties: the lower device), kept at the root of a tournament tree.
    std::vector<Decision> decision(idx(p_));
    std::vector<char> done(idx(p_), 0);
    Tournament earliest(p_);
    int unfinished = 0;
    const auto refresh = [&](int d) {
      if (done[idx(d)]) return;
      decision[idx(d)] = decide(d);
      earliest.set(d, decision[idx(d)].start);
    };
    for (int d = 0; d < p_; ++d) {
      done[idx(d)] = finished(d) ? 1 : 0;
      if (!done[idx(d)]) ++unfinished;
      refresh(d);
    }
    while (unfinished > 0) {
      int d = earliest.winner();
      if (earliest.key(d) == kInf) {
        // Every device waits on an input nobody has produced yet: run a pending P2 anywhere.
        d = -1;
        for (int e = 0; e < p_ && d < 0; ++e) {
          if (device(e).pending_p2 > 0) d = e;
        }
        if (d < 0) throw Error("auto schedule: internal deadlock");
        decision[idx(d)] = Decision{device(d).free_at, Kind::p2, oldest_pending(d), 1};
      }
      apply(d, decision[idx(d)]);
      if (finished(d)) {
        done[idx(d)] = 1;
        earliest.set(d, kInf);
        --unfinished;
      }
      refresh(d);
      // A neighbour's decision stands unless something reached it in time to count, or it reads
      // this device's next free time: only a wait or a P2 of a device with more P2s pending than
      // it keeps back estimates its next input from it (next_input). An F or P1 is chosen among
      // the inputs there at its start, so one arriving later leaves it as it is. Re-deciding in
      // any other case gives the same decision.
      for (const int e : device(d).neighbours) {
        const Decision& current = decision[idx(e)];
        const Kind k = current.kind;
        const bool reached = delivered_to_ == e && ((k != Kind::forward && k != Kind::p1) ||
                                                    delivered_at_ <= current.start);
        if (reached || ((k == Kind::wait || k == Kind::p2) && reads_neighbours(e))) refresh(e);
      }
    }
    Schedule out;
    out.devices = p_;
    out.microbatches = m_;
    out.stage_device = in_.stage_device;
    for (int d = 0; d < p_; ++d)
      out.per_device.push_back(std::move(device(d).actions));
    return out;
  }

 private:
  Device& device(int d) { return device_[idx(d)]; }
  const StageCost& cost(int s) const { return costs_[idx(s)]; }
  double& forward_at(int s, int mb) { return forward_at_[idx(s) * idx(m_) + idx(mb)]; }
  // Whether decide(d) may read other devices' free times: its P2 branch with the gap estimate.
  bool reads_neighbours(int d) { return split_ && device(d).pending_p2 > device(d).p2_lag; }
  bool finished(int d) {
    const Device& dev = device(d);
    if (dev.backward_done < dev.backward_total || dev.pending_p2 > 0) return false;
    return std::all_of(dev.stages.begin(), dev.stages.end(),
                       [&](int s) { return next_f_[idx(s)] == m_; });
  }
  bool fits(int d, std::int64_t bytes) const {
    // With room for the working memory of whichever op runs next (the task graph holds it).
    const Device& dev = device_[idx(d)];
    return dev.limit <= 0 || static_cast<double>(bytes + dev.max_work) <= dev.limit;
  }
  // What a P1 adds at its start (op_memory: the stash turns into the retained X/dY, the net
  // growth charged up front, a net shrink released at the end).
  std::int64_t p1_growth(int s) const { return op_memory(cost(s), OpType::P1, 1).alloc; }
  // Admit a micro-batch into the device (its first stage's F) only when its stashes on every
  // stage of the device fit, and a P1 will fit too once the pending P2s have run, so a device
  // full of stashes can always run a backward.
  bool entry_fits(int d) {
    Device& dev = device(d);
    const std::int64_t held = dev.memory + cost(dev.first).stash_bytes + dev.later_stash;
    if (!fits(d, held)) return false;
    if (!split_) return true;
    return fits(d, held + dev.max_growth - dev.pending_retained);
  }
  // A forward of a later stage of the device (a micro-batch already in it) when its stash fits,
  // and its P1's growth once the pending P2s have run; the entry's reserve keeps room for one.
  bool later_fits(int d, int s) {
    const Device& dev = device(d);
    const std::int64_t held = dev.memory + cost(s).stash_bytes;
    if (!fits(d, held)) return false;
    return !split_ || fits(d, held + p1_growth(s) - dev.pending_retained);
  }
  double p2_time(int s, int k) const { return cost(s).p2_time_us(k); }
  // The stage of device d's oldest pending P2 (one is pending).
  int oldest_pending(int d) {
    int oldest = -1;
    std::int64_t when = std::numeric_limits<std::int64_t>::max();
    for (const int s : device(d).stages) {
      const Fifo<std::pair<std::int64_t, int>>& queue = pending_[idx(s)];
      if (!queue.empty() && queue.front().first < when) {
        when = queue.front().first;
        oldest = s;
      }
    }
    return oldest;
  }

  void set_p2_lags(double factor) {
    std::vector<double> head(idx(s_), 0.0), tail(idx(s_), 0.0);
    for (int s = 1; s < s_; ++s) {
      head[idx(s)] = head[idx(s - 1)] + cost(s - 1).forward_us + comm_[idx(s - 1)];
      tail[idx(s)] = tail[idx(s - 1)] + cost(s - 1).p1_us + comm_[idx(s - 1)];
    }
    for (int d = 0; d < p_; ++d) {
      Device& dev = device(d);
      if (dev.stages.empty()) continue;
      double w = kInf;
      for (const int s : dev.stages)
        w = std::min(w, cost(s).p2_us);
      if (w <= 0) continue;
      const double lag = factor * (head[idx(dev.first)] + tail[idx(dev.first)]) / w;
      dev.p2_lag = static_cast<int>(std::min(std::ceil(lag - 1e-9), static_cast<double>(m_)));
    }
  }

  // The P2 group of stage s (its device's oldest pending P2's) for a gap of `gap` us (kInf: no
  // deadline): the most efficient size that fits, larger on ties; 0 when none fits.
  int group_for_gap(int s, double gap) {
    const int limit = std::min(static_cast<int>(pending_[idx(s)].size()), max_group_);
    const auto row = idx(s) * idx(max_group_);
    const double* prefix_max = group_prefix_max_us_.data() + row;
    // The loop "k = 1, 2, ... while p2(k) fits the gap" stops at the first k that does not fit:
    // scanned for the first few (groups are mostly small, and a binary search's branches were
    // unpredictable), then searched.
    const double fits = gap + 1e-9;
    constexpr int kScan = 4;
    int k = 0;
    while (k < limit && k < kScan && prefix_max[k] <= fits)
      ++k;
    if (k == kScan && k < limit) {
      k = static_cast<int>(std::upper_bound(prefix_max + k, prefix_max + limit, fits) - prefix_max);
    }
    return k == 0 ? 0 : group_best_upto_[row + idx(k - 1)];
  }

  // Per stage, for the P2 group choice, in rows of max_group_ (k = 1 .. max_group_): the running
  // maximum of p2(k) over k, and the most efficient size (the smallest p2(k)/k, larger on ties)
  // among 1..k.
  void build_group_tables() {
    group_prefix_max_us_.resize(idx(s_) * idx(max_group_));
    group_best_upto_.resize(idx(s_) * idx(max_group_));
    for (int s = 0; s < s_; ++s) {
      double best_rate = kInf, prefix = 0;
      int best = 0;
      for (int k = 1; k <= max_group_; ++k) {
        const double t = p2_time(s, k);
        prefix = std::max(prefix, t);
        const double rate = t / k;
        if (rate <= best_rate * (1 + 1e-12)) {
          best_rate = std::min(best_rate, rate);
          best = k;
        }
        group_prefix_max_us_[idx(s) * idx(max_group_) + idx(k - 1)] = prefix;
        group_best_upto_[idx(s) * idx(max_group_) + idx(k - 1)] = best;
      }
    }
  }

  // Earliest time an input could still reach device d: known arrivals, else an estimate from the
  // producing device's next free time (it cannot produce the input sooner).
  double next_input(int d, double now, bool entry_allowed) {
    Device& dev = device(d);
    double next = kInf;
    for (const int s : dev.stages) {
      if (!gradients_[idx(s)].empty()) next = std::min(next, gradients_[idx(s)].front().first);
      const int mb = next_f_[idx(s)];
      if (mb < m_ && (s != dev.first || entry_allowed)) {
        const double f = forward_at(s, mb);
        if (f < kInf) {
          next = std::min(next, f);
        } else if (s > 0 && in_.stage_device[idx(s - 1)] != d) {
          const Device& from = device(in_.stage_device[idx(s - 1)]);
          next = std::min(next,
                          std::max(from.free_at, now) + cost(s - 1).forward_us + comm_[idx(s - 1)]);
        }
      }
      const int expected = f_done_[idx(s)] - p1_done_[idx(s)];
      if (s + 1 < s_ && expected > static_cast<int>(gradients_[idx(s)].size()) &&
          in_.stage_device[idx(s + 1)] != d) {
        const Device& from = device(in_.stage_device[idx(s + 1)]);
        next = std::min(next, std::max(from.free_at, now) + cost(s + 1).p1_us + comm_[idx(s)]);
      }
    }
    return next;
  }

  // The forward device d would run now (Kind::forward), if any is ready and admitted.
  Decision ready_forward(int d, double now) {
    Device& dev = device(d);
    const bool entry =
        next_f_[idx(dev.first)] < m_ && entry_fits(d) && dev.inflight < dev.depth_cap;
    for (std::size_t i = dev.stages.size(); i-- > 0;) {
      const int s = dev.stages[i];
      const int mb = next_f_[idx(s)];
      if (mb >= m_ || (s == dev.first && !entry) || (s != dev.first && !later_fits(d, s))) continue;
      if (forward_at(s, mb) <= now) return {now, Kind::forward, s, 1};
    }
    return {};
  }

  Decision decide(int d) {
    Device& dev = device(d);
    const double now = dev.free_at;
    // P1: the stage furthest down the model among the arrived gradients.
    double gradient_at = kInf;
    int p1_stage = -1;
    for (std::size_t i = dev.stages.size(); i-- > 0;) {
      const int s = dev.stages[i];
      if (gradients_[idx(s)].empty()) continue;
      const double arrival = gradients_[idx(s)].front().first;
      gradient_at = std::min(gradient_at, arrival);
      if (arrival <= now && p1_stage < 0) p1_stage = s;
    }
    if (p1_stage >= 0 && alternate_ && dev.last_p1) {
      // Alternating: after a P1, a forward whose input is there goes first (1B1F rounds).
      const Decision f = ready_forward(d, now);
      if (f.kind == Kind::forward) return f;
    }
    if (p1_stage >= 0) {
      if (!split_ || fits(d, dev.memory + p1_growth(p1_stage))) return {now, Kind::p1, p1_stage, 1};
      if (dev.pending_p2 > 0) return {now, Kind::p2, oldest_pending(d), 1};  // memory forces it
      throw FieldError("memory_limit_bytes", "device " + std::to_string(d) +
                                                 " cannot hold the retained bytes of one more p1");
    }
    // F: the stage furthest down the model among the arrived inputs, a new micro-batch entering
    // the device only within its depth cap and memory.
    const bool more_entries = next_f_[idx(dev.first)] < m_;
    const bool entry_memory = more_entries && entry_fits(d);
    const bool entry_allowed = entry_memory && dev.inflight < dev.depth_cap;
    double forward_at_min = kInf;
    bool later_blocked = false;  // a later stage's input is there but its stash does not fit
    for (std::size_t i = dev.stages.size(); i-- > 0;) {
      const int s = dev.stages[i];
      const int mb = next_f_[idx(s)];
      if (mb >= m_ || (s == dev.first && !entry_allowed)) continue;
      const double arrival = forward_at(s, mb);
      if (s != dev.first && !later_fits(d, s)) {
        later_blocked = later_blocked || arrival <= now;
        continue;
      }
      if (arrival <= now) return {now, Kind::forward, s, 1};
      forward_at_min = std::min(forward_at_min, arrival);
    }
    if (split_ && dev.pending_p2 > 0) {
      const int s = oldest_pending(d);
      if (dev.backward_done == dev.backward_total)
        return {now, Kind::p2, s, group_for_gap(s, kInf)};
      if (later_blocked || (more_entries && !entry_memory && dev.inflight < dev.depth_cap))
        return {now, Kind::p2, s, 1};  // memory blocks the next forward: free some
      if (dev.pending_p2 > dev.p2_lag) {
        const double next = next_input(d, now, entry_allowed);
        const int k = group_for_gap(s, next - now);
        if (k > 0) return {now, Kind::p2, s, k};
        if (fill_ == P2Fill::always) return {now, Kind::p2, s, 1};
        if (fill_ == P2Fill::overshoot && p2_time(s, 1) <= 2 * (next - now))
          return {now, Kind::p2, s, 1};
      }
    }
    if (more_entries && !entry_memory && dev.inflight == 0 && dev.pending_p2 == 0) {
      throw FieldError("memory_limit_bytes",
                       "device " + std::to_string(d) +
                           " cannot hold the activations of one micro-batch within its limit");
    }
    return {std::max(std::min(gradient_at, forward_at_min), now), Kind::wait, 0, 1};
  }

  // An output of device d, ready at `ready`, to stage `to`: a message waits for the pair's
  // previous one (the simulator's model).
  void send(int d, int to, int mb, double ready, bool forward) {
    const int dst = in_.stage_device[idx(to)];
    delivered_to_ = dst;
    double arrival = ready;
    if (dst != d) {
      double& free = link_free_[idx(d) * idx(p_) + idx(dst)];
      arrival = std::max(ready, free) + comm_[idx(forward ? to - 1 : to)];
      free = arrival;
    }
    delivered_at_ = arrival;
    if (forward) {
      forward_at(to, mb) = arrival;
    } else {
      gradients_[idx(to)].push({arrival, mb});
    }
  }

  // A new action at the end of the device's order, made in place: a temporary moved in was
  // written field by field and read back wider, which stalled on store forwarding.
  static Action& add_action(Device& dev, OpType op, int stage) {
    Action& a = dev.actions.emplace_back();
    a.op = op;
    a.stage = stage;
    return a;
  }

  void apply(int d, const Decision& dec) {
    Device& dev = device(d);
    delivered_to_ = -1;
    const int s = dec.stage;
    const StageCost& c = cost(s);
    const double start = dec.start;
    if (dec.kind != Kind::wait) dev.last_p1 = dec.kind == Kind::p1;
    switch (dec.kind) {
      case Kind::wait:
        dev.free_at = start;
        return;
      case Kind::forward: {
        const int mb = next_f_[idx(s)]++;
        ++f_done_[idx(s)];
        dev.free_at = start + c.forward_us;
        dev.memory += c.stash_bytes;
        if (s == dev.first) {
          ++dev.inflight;
        }
        add_action(dev, OpType::F, s).microbatches.push_back(mb);
        if (s + 1 < s_) {
          send(d, s + 1, mb, dev.free_at, true);
        } else {
          gradients_[idx(s)].push({dev.free_at, mb});
        }
        return;
      }
      case Kind::p1: {
        const int mb = gradients_[idx(s)].front().second;
        gradients_[idx(s)].pop();
        ++p1_done_[idx(s)];
        if (s == dev.first) --dev.inflight;
        ++dev.backward_done;
        if (split_) {
          dev.free_at = start + c.p1_us;
          dev.memory += c.retained_bytes - c.stash_bytes;
          pending_[idx(s)].push({next_pending_++, mb});
          ++dev.pending_p2;
          dev.pending_retained += c.retained_bytes;
          add_action(dev, OpType::P1, s).microbatches.push_back(mb);
        } else {
          dev.free_at = start + c.p1_us + c.p2_us;
          dev.memory -= c.stash_bytes;
          add_action(dev, OpType::B, s).microbatches.push_back(mb);
        }
        if (s > 0) send(d, s - 1, mb, dev.free_at, false);
        return;
      }
      case Kind::p2: {
        const int k = std::max(1, dec.group);
        Action& a = add_action(dev, OpType::P2, s);
        Fifo<std::pair<std::int64_t, int>>& queue = pending_[idx(s)];
        for (int i = 0; i < k && !queue.empty(); ++i) {
          a.microbatches.push_back(queue.front().second);
          queue.pop();
        }
        const auto taken = static_cast<std::int64_t>(a.microbatches.size());
        dev.pending_p2 -= static_cast<int>(taken);
        dev.free_at = start + p2_time(s, static_cast<int>(taken));
        dev.memory -= taken * c.retained_bytes;
        dev.pending_retained -= taken * c.retained_bytes;
        return;
      }
    }
  }

  const ListInputs& in_;
  const std::vector<StageCost>& costs_;
  bool split_;
  P2Fill fill_;
  bool alternate_ = false;
  int max_group_;
  int p_, m_, s_;
  std::vector<Device> device_;
  std::vector<int> next_f_, f_done_, p1_done_;           // per stage
  std::vector<Fifo<std::pair<double, int>>> gradients_;  // per stage: (arrival, mb)
  // Per stage, the micro-batches whose P1 ran and P2 did not, oldest first, each with its
  // P1's place in the order of all P1s (so a device's oldest pending P2 is the smallest head).
  std::vector<Fifo<std::pair<std::int64_t, int>>> pending_;
  std::int64_t next_pending_ = 0;
  std::vector<double> forward_at_;           // [stage][mb]: input arrival
  std::vector<double> comm_;                 // per boundary s -> s + 1
  std::vector<double> link_free_;            // per directed device pair
  std::vector<double> group_prefix_max_us_;  // [stage][k - 1]
  std::vector<int> group_best_upto_;         // [stage][k - 1]
  double delivered_at_ = 0;                  // and when it arrives there
  int delivered_to_ = -1;  // the device the last applied action sent its output to
};

}  // namespace

Schedule list_schedule(const ListInputs& inputs, const ListVariant& variant, int max_group) {
  return ListScheduler(inputs, variant, max_group).run();
}

}  // namespace pipeplan
