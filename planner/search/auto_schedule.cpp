#include "planner/search/auto_schedule.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "planner/base/concurrent.h"
#include "planner/base/error.h"
#include "planner/base/index.h"
#include "planner/graph/schedule_sim.h"
#include "planner/graph/simulator.h"
#include "planner/plan/lower_bound.h"
#include "planner/plan/make_plan.h"
#include "planner/search/auto_list.h"
#include "planner/search/auto_moves.h"

namespace pipeplan {

double boundary_transfer_us(const P2pLink& link, const StageCost& sender) {
  return transfer_time_us(link, sender.send_bytes);
}

namespace {

// A layout of virtual stages on devices, on one cut of the model, with what its candidates are
// evaluated under and the lower bounds no order of it can beat.
struct Layout {
  std::string name;
  int chunks = 1;
  int replicas = 1;  // copies of the model (Schedule::replicas): 2 for DualPipe's
  std::vector<int> stage_device;
  std::vector<int> blocks;  // empty: the request's cut
  std::vector<StageCost> costs;
  PlanMeta meta;  // devices, micro-batches, link, static bytes and limits per device
  double bound_step_us = 0, bound_span_us = 0;
};

Layout make_layout(const AutoRequest& r, std::string name, std::vector<int> stage_device,
                   StageCut cut, const std::vector<std::int64_t>* static_bytes, int replicas = 1) {
  Layout l;
  l.name = std::move(name);
  l.chunks = static_cast<int>(stage_device.size()) / r.devices;
  l.replicas = replicas;
  l.stage_device = std::move(stage_device);
  l.blocks = std::move(cut.blocks);
  l.costs = std::move(cut.costs);
  l.meta.devices = r.devices;
  l.meta.chunks = l.chunks;
  l.meta.microbatches = r.microbatches;
  l.meta.schedule = kAutoScheduleName;
  l.meta.backward = r.mode;
  l.meta.p2_concat = r.p2_concat;
  l.meta.link = r.link;
  l.meta.overlap = r.overlap;
  l.meta.contention = r.contention;
  l.meta.memory_limit_bytes = r.memory_limit_bytes;
  l.meta.memory_limit_bytes.resize(idx(r.devices), 0.0);
  if (static_bytes != nullptr) {
    l.meta.static_bytes = *static_bytes;
    l.meta.static_bytes.resize(idx(r.devices), 0);
  } else {
    l.meta.static_bytes = static_bytes_per_device(r.devices, l.stage_device, replicas, l.costs);
  }
  // Any schedule of the layout, overlapped pairs (a dualpipe-v seed) included.
  const LowerBound bound = step_time_lower_bound(l.costs, l.stage_device, r.link, r.microbatches,
                                                 l.meta.overlap.efficiency, replicas);
  l.bound_step_us = bound.makespan_us;
  l.bound_span_us = bound.stage_span_us;
  return l;
}

// DualPipe's layout: the model cut into P stages (each device's two, d and P - 1 - d, balanced
// as a whole) and held twice, copy 1's stage s on device P - 1 - s (Schedule::replicas). Only the
// dualpipe family's order runs on it (the list scheduler keeps one copy); nullopt where P is odd
// or the model cannot be cut so.
std::optional<Layout> two_copies_layout(const AutoRequest& r) {
  if (r.devices % 2 != 0) return std::nullopt;
  StageCut cut;
  try {
    cut = r.cut(2 * r.devices, {}, CutBalance::folded, 2);
  } catch (const Error&) {
    return std::nullopt;
  }
  return make_layout(r, "two copies", v_stage_device(r.devices), std::move(cut), nullptr, 2);
}

// One chunk per device on the request's cut; with other cuts available, DualPipe's two copies
// of the cut into P stages, and a V and interleaved on the balanced cuts into 2P stages (when the
// model has blocks enough).
std::vector<Layout> layouts(const AutoRequest& r) {
  std::vector<Layout> out;
  std::vector<int> one(idx(r.devices));
  for (int d = 0; d < r.devices; ++d)
    one[idx(d)] = d;
  out.push_back(make_layout(r, "one chunk", one, {{}, r.costs}, &r.static_bytes));
  if (!r.cut || r.devices < 2) return out;
  if (r.max_copies >= 2) {
    if (std::optional<Layout> two = two_copies_layout(r)) out.push_back(std::move(*two));
  }
  StageCut v_cut, interleaved_cut, alone;
  try {
    v_cut = r.cut(2 * r.devices, {}, CutBalance::folded, 1);
    interleaved_cut = r.cut(2 * r.devices, {}, CutBalance::mod_devices, 1);
    alone = r.cut(2 * r.devices, {}, CutBalance::stages, 1);
  } catch (const Error&) {
    return out;  // fewer blocks than 2P stages
  }
  std::vector<int> interleaved_map;
  interleaved_map.reserve(idx(2 * r.devices));
  for (int s = 0; s < 2 * r.devices; ++s)
    interleaved_map.push_back(s % r.devices);
  // Each also on the cut that balances the stages alone, where that cut differs: a fixed
  // family's plan takes the faster of the two cuts (make_plan), and so does auto.
  const bool alone_v = alone.blocks != v_cut.blocks;
  const bool alone_interleaved = alone.blocks != interleaved_cut.blocks;
  out.push_back(make_layout(r, "V", v_stage_device(r.devices), std::move(v_cut), nullptr));
  out.push_back(
      make_layout(r, "interleaved", interleaved_map, std::move(interleaved_cut), nullptr));
  if (alone_v)
    out.push_back(make_layout(r, "V stage-cut", v_stage_device(r.devices), alone, nullptr));
  if (alone_interleaved) {
    out.push_back(
        make_layout(r, "interleaved stage-cut", interleaved_map, std::move(alone), nullptr));
  }
  return out;
}

// The list scheduler's variants, most often best first (measured over uniform, 2:2:1 and LLaMA
// / GPT inputs at P = 4 to 32 and memory from P to 2P micro-batches: the first tier covers nearly
// all winners); the second tier, run while the search budget lasts, holds the rest of the grid
// (warm-up depth × P2 fill × alternation, P2 lag, fused B).
std::vector<ListVariant> core_variants(bool split) {
  if (!split) return {{0, P2Fill::fit, false}, {1, P2Fill::fit, false}};
  return {{0, P2Fill::always, true}, {0, P2Fill::always, true, 0, true},
          {0, P2Fill::fit, true},    {0, P2Fill::fit, true, 0, true},
          {2, P2Fill::always, true}, {1, P2Fill::fit, true}};
}

std::vector<ListVariant> make_more_variants(bool split) {
  std::vector<ListVariant> out;
  const std::vector<ListVariant> core = core_variants(split);
  const auto add = [&](const ListVariant& v) {
    const bool known = std::any_of(core.begin(), core.end(),
                                   [&](const ListVariant& c) { return c.name() == v.name(); });
    if (!known) out.push_back(v);
  };
  for (const double depth : {0.0, 3.0, 2.0, 2.5, 1.5, 4.0, 1.0, 5.0}) {
    if (split) {
      for (const bool alternate : {true, false}) {
        for (const P2Fill fill : {P2Fill::always, P2Fill::fit, P2Fill::overshoot})
          add({depth, fill, true, 0, alternate});
      }
      for (const double lag : {0.5, 1.0})
        add({depth, P2Fill::fit, true, lag});
    }
    add({depth, P2Fill::fit, false});  // fused B: least memory, the 1F1B family
  }
  return out;
}

// The second tier, made once per process (its names are compared with the first tier's).
const std::vector<ListVariant>& more_variants(bool split) {
  static const std::vector<ListVariant> fused = make_more_variants(false);
  static const std::vector<ListVariant> two = make_more_variants(true);
  return split ? two : fused;
}

// The fixed families' orders as generated (before a backward mode), once per family and chunk
// count: the V and interleaved layouts make the same request, and each keeps the orders of its
// own stage-to-device map.
class FamilyOrders {
 public:
  // Generates, on two threads, the orders of those of `families` not generated yet.
  void generate(const std::vector<const ScheduleFamily*>& families,
                const ScheduleRequest& request) {
    std::vector<std::pair<const ScheduleFamily*, std::optional<Schedule>*>> missing;
    for (const ScheduleFamily* family : families) {
      const auto [it, added] = orders_.try_emplace(std::make_pair(family, request.chunks));
      if (added) missing.emplace_back(family, &it->second);
    }
    run_items_beside(missing.size(), [&](std::size_t i) {
      try {
        *missing[i].second = missing[i].first->generate(request);
      } catch (const Error&) {
        missing[i].second->reset();  // the family does not suit this shape
      }
    });
  }
  // The family's order for the request once generated; nullptr where it does not suit this
  // shape (e.g. micro-batches vs devices).
  const Schedule* get(const ScheduleFamily& family, int chunks) const {
    const auto it = orders_.find(std::make_pair(&family, chunks));
    return it == orders_.end() || !it->second ? nullptr : &*it->second;
  }

 private:
  std::map<std::pair<const ScheduleFamily*, int>, std::optional<Schedule>> orders_;
};

// A family seed of a layout: its order in one backward mode and, when timed, its evaluation
// (nullopt where it cannot run or fit, `error` then saying why).
struct Seed {
  std::string name;
  Schedule schedule;
  bool timed = false;
  std::optional<AutoEval> eval;
  std::string error;
};

// The fixed families of a layout (same chunks and stage-to-device map) in every backward mode
// they accept (fused only when the request keeps B whole), as candidates: the search then never
// returns anything slower than a hand-made schedule that fits the same memory. Made, and timed
// where `time` says, on two threads: each seed on its own. `time` (if set) receives a seed's order
// and returns whether to time it.
std::vector<Seed> family_seeds(const Layout& layout, FamilyOrders& orders, const AutoRequest& r,
                               const std::function<bool(const Schedule&)>& time) {
  const bool split = r.mode != BackwardMode::fused;
  const PlanMeta& meta = layout.meta;
  const ScheduleRequest request{meta.devices, layout.chunks, meta.microbatches,
                                std::nullopt, r.p2_concat,   nullptr};
  std::vector<const ScheduleFamily*> families;
  for (const ScheduleFamily* family : schedule_families()) {
    // A family holding the model twice (dualpipe) runs on the two copies' layout only.
    if (!family->traits().needs_costs && family->traits().replicas == layout.replicas &&
        family->traits().chunks.accepts(layout.chunks))
      families.push_back(family);
  }
  orders.generate(families, request);
  struct Made {
    const ScheduleFamily* family;
    const Schedule* generated;
    BackwardMode mode;
  };
  std::vector<Made> made;
  for (const ScheduleFamily* family : families) {
    const Schedule* generated = orders.get(*family, layout.chunks);
    if (generated == nullptr || generated->stage_device != layout.stage_device) continue;
    // Fused last, so that on equal scores (a stable sort) the split orders win.
    std::vector<BackwardMode> modes;
    for (const BackwardMode m : family->backward_modes()) {
      if (split || m == BackwardMode::fused) modes.push_back(m);
    }
    std::stable_partition(modes.begin(), modes.end(),
                          [](BackwardMode m) { return m != BackwardMode::fused; });
    for (const BackwardMode m : modes)
      made.push_back({family, generated, m});
  }
  std::vector<Seed> out(made.size());
  const EvalContext context{&layout.costs, &layout.meta, r.objective};
  run_items_beside(made.size(), [&](std::size_t i) {
    const auto [family, generated, mode] = made[i];
    ScheduleRequest with_mode = request;
    with_mode.backward = mode;
    Seed& seed = out[i];
    seed.name =
        family->places_p2() ? family->name() : family->name() + " " + std::string(to_string(mode));
    seed.schedule = with_backward_mode(*family, *generated, with_mode, layout.costs, meta);
    seed.schedule.family = kAutoScheduleName;
    seed.schedule.backward = r.mode;
    if (!time || !time(seed.schedule)) return;
    seed.timed = true;
    seed.eval = evaluate_order(seed.schedule, context, false, seed.error);
  });
  return out;
}

// The search's budget beyond the first tier of candidates and the seeds, in simulated actions
// (one compact evaluation of a schedule costs its action count; a list-scheduler run about
// kListCost times that): the second tier of variants takes up to kSecondTierActions, the local
// search the rest, between kMinEvaluations and kMaxEvaluations evaluations in all. Deterministic,
// unlike a wall-clock limit.
constexpr double kBudgetActions = 2e5, kSecondTierActions = 5e4, kFirstTierActions = 3e5;
constexpr std::size_t kMinFirstTier = 2;
constexpr double kListCost = 12;
constexpr int kMinEvaluations = 4, kMaxEvaluations = 400;

struct Candidate {
  std::size_t layout = 0;
  Schedule schedule;
  std::string name;
  AutoEval eval;
  bool first = false;  // the first candidate evaluated, as evaluated (no moves applied)
};

// The best few candidates so far (the local search's starts), best first; ties keep the earlier.
class Leaders {
 public:
  Leaders(std::size_t keep, Objective objective) : keep_(keep), objective_(objective) {}
  void offer(Candidate c) {
    auto it = std::find_if(list_.begin(), list_.end(), [&](const Candidate& x) {
      return preferred(c.eval.score, x.eval.score, objective_);
    });
    if (it == list_.end() && list_.size() >= keep_) return;
    list_.insert(it, std::move(c));
    if (list_.size() > keep_) list_.pop_back();
  }
  bool empty() const { return list_.empty(); }
  const AutoScore& best() const { return list_.front().eval.score; }
  std::vector<Candidate>& all() { return list_; }

 private:
  std::size_t keep_;
  Objective objective_;
  std::vector<Candidate> list_;
};

// The score the simulator gives an order of the layout (lowered, then simulated with the
// layout's contention model), and the memory its stages take together on the GPU they share;
// nullopt where it cannot lower or run.
struct SimulatedScore {
  AutoScore score;
  double shared_bytes = 0;
};
std::optional<SimulatedScore> simulated_score(const Schedule& schedule, const Layout& layout) {
  try {
    const TaskGraph graph = lower(schedule, layout.costs, layout.meta);
    const SimResult sim = simulate(graph);
    AutoScore score{sim.makespan_us, sim.max_stage_span_us, 0, 0};
    for (const DeviceMetrics& device : sim.devices) {  // as the compact evaluation sums them
      score.sum_last_end_us += device.last_end_us;
      score.peak_bytes = std::max(score.peak_bytes, static_cast<double>(device.peak_memory_bytes));
    }
    return SimulatedScore{score, static_cast<double>(sim.shared_gpu_memory_bytes())};
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace

AutoResult make_auto_schedule(const AutoRequest& r) {
  if (static_cast<int>(r.costs.size()) != r.devices) {
    throw FieldError("chunks", "schedule 'auto' needs one stage per device, got " +
                                   std::to_string(r.costs.size()) + " stages for " +
                                   std::to_string(r.devices) + " devices");
  }
  if (r.microbatches < 1) throw FieldError("microbatches", "must be at least 1");
  if (r.p2_concat < 0) throw FieldError("p2_concat", "must be 0 (all) or a positive count");
  const bool split = r.mode != BackwardMode::fused;
  const int max_group = r.p2_concat == 0 ? r.microbatches : r.p2_concat;
  const bool steady = r.objective == Objective::steady;
  std::vector<Layout> all = layouts(r);
  // Layouts by their bounds (the objective's first): the one that can go lowest is tried first.
  const auto primary = [&](const Layout& l) { return steady ? l.bound_span_us : l.bound_step_us; };
  const auto secondary = [&](const Layout& l) {
    return steady ? l.bound_step_us : l.bound_span_us;
  };
  std::stable_sort(all.begin(), all.end(), [&](const Layout& a, const Layout& b) {
    return primary(a) < primary(b) || (primary(a) == primary(b) && secondary(a) < secondary(b));
  });
  // The bounds over one copy of the model: those an order meeting them ends the search at.
  // DualPipe's two copies, with their own bound (often lower: the pipeline fills from both
  // ends), compete with their family's order alone, which seldom meets it; the plan reports
  // their bound when it holds two copies (plan_schedule takes the chosen order's own).
  double bound_step = std::numeric_limits<double>::infinity(), bound_span = bound_step;
  for (const Layout& l : all) {
    if (l.replicas != 1) continue;
    bound_step = std::min(bound_step, l.bound_step_us);
    bound_span = std::min(bound_span, l.bound_span_us);
  }
  const auto meets = [](double value, double bound) { return value <= bound * (1 + 1e-9) + 1e-9; };
  // Under a shared GPU's curves the compact scores leave the slowdown out: they neither meet a
  // bound that ends the search nor rule a layout out, and the finalists are simulated (below).
  const bool curves = !r.contention.empty();
  const auto at_bounds = [&](const AutoScore& s) {
    return !curves && meets(s.makespan_us, bound_step) && meets(s.span_us, bound_span);
  };
  // A layout whose bounds cannot beat the best so far (first figure, then second) is skipped.
  const auto hopeless = [&](const Layout& l, const AutoScore& best) {
    if (curves) return false;
    const double first = steady ? best.span_us : best.makespan_us;
    const double second = steady ? best.makespan_us : best.span_us;
    if (!meets(primary(l), first)) return true;
    return meets(first, primary(l)) && secondary(l) >= second * (1 - 1e-9);
  };

  Leaders leaders(3, r.objective);
  std::vector<Candidate> seeds;  // under curves: every fixed family's order, for the final ranking
  int tried = 0;
  std::string first_error;
  double budget = kBudgetActions;
  bool done = false;
  std::vector<char> seeded(all.size(), 0);  // every family seed of the layout considered
  FamilyOrders orders;
  // A candidate with its evaluation (none: it did not run or fit): the leaders take it.
  const auto take = [&](std::size_t li, Schedule schedule, const std::string& name,
                        std::optional<AutoEval> e) {
    if (!e) return;
    const Layout& layout = all[li];
    done = done || at_bounds(e->score);
    if (curves && name.starts_with("seed="))
      seeds.push_back({li, schedule, layout.name + " " + name, *e, tried == 1});
    leaders.offer({li, std::move(schedule), layout.name + " " + name, std::move(*e), tried == 1});
  };
  const auto consider = [&](std::size_t li, Schedule schedule, const std::string& name) {
    const Layout& layout = all[li];
    ++tried;
    schedule.family = kAutoScheduleName;
    schedule.backward = r.mode;
    const EvalContext context{&layout.costs, &layout.meta, r.objective};
    std::optional<AutoEval> e;
    const auto evaluate = [&] { e = evaluate_order(schedule, context, false, first_error); };
    if (tried == 1 && r.evaluate_first) {
      r.evaluate_first(schedule, layout.costs, evaluate);
    } else {
      evaluate();
    }
    take(li, std::move(schedule), name, std::move(e));
  };
  // The layout's family seeds, in order, as consider() would take them one by one (made and
  // timed on two threads); those that `time` rules out count as tried without an evaluation.
  const auto consider_seeds = [&](std::size_t li,
                                  const std::function<bool(const Schedule&)>& time) {
    // make_plan's hook takes the first candidate (never a seed: the first tier runs before).
    if (tried == 0 && r.evaluate_first) {
      for (Seed& seed : family_seeds(all[li], orders, r, nullptr))
        consider(li, std::move(seed.schedule), "seed=" + seed.name);
      return;
    }
    for (Seed& seed : family_seeds(all[li], orders, r, time)) {
      ++tried;
      if (!seed.timed) continue;
      if (first_error.empty()) first_error = seed.error;
      take(li, std::move(seed.schedule), "seed=" + seed.name, std::move(seed.eval));
    }
  };
  const auto run_list = [&](std::size_t li, const ListVariant& v) {
    const Layout& layout = all[li];
    if (layout.replicas != 1) return;  // the list scheduler holds one copy of the model
    const ListInputs inputs{
        r.devices, r.microbatches,           layout.stage_device,           &layout.costs,
        r.link,    layout.meta.static_bytes, layout.meta.memory_limit_bytes};
    try {
      consider(li, list_schedule(inputs, v, max_group), v.name());
    } catch (const Error& e) {
      ++tried;
      if (first_error.empty()) first_error = e.what();
    }
  };
  const auto layout_actions = [&](const Layout& l) {
    return static_cast<double>(l.costs.size()) * r.microbatches * (split ? 3 : 2);
  };
  // First tier and seeds, layout by layout; then the second tier while the budget lasts.
  for (std::size_t li = 0; li < all.size() && !done; ++li) {
    if (!leaders.empty() && hopeless(all[li], leaders.best())) continue;
    // On large layouts only the first few (at least kMinFirstTier): each run costs O(actions).
    const std::vector<ListVariant> core = core_variants(split);
    const double runs = kFirstTierActions / ((kListCost + 1) * layout_actions(all[li]));
    const auto count =
        std::clamp<std::size_t>(static_cast<std::size_t>(runs), kMinFirstTier, core.size());
    for (std::size_t k = 0; k < count && !done; ++k)
      run_list(li, core[k]);
    if (done) break;
    // Every seed of the layout, once generated, even after one reaches the bounds: the tie-break
    // below would otherwise generate them again.
    consider_seeds(li, [](const Schedule&) { return true; });
    seeded[li] = 1;
  }
  // An order at both bounds ends the search, but one of equal figures and less memory may be a
  // family seed of a layout whose bounds reach them: those seeds run too (a few orders a
  // layout), and the leaders keep the lighter. Nothing can beat the bounds, so a seed whose
  // order alone holds more memory than the best (schedule_peak_memory) cannot win: it counts as
  // tried without being timed.
  if (done) {
    const AutoScore reached = leaders.best();
    const double first = steady ? reached.span_us : reached.makespan_us;
    const double second = steady ? reached.makespan_us : reached.span_us;
    for (std::size_t li = 0; li < all.size(); ++li) {
      if (seeded[li] || !meets(primary(all[li]), first) || !meets(secondary(all[li]), second))
        continue;
      seeded[li] = true;
      const double lightest = leaders.best().peak_bytes;
      consider_seeds(li, [&](const Schedule& schedule) {
        const std::vector<std::int64_t> peaks =
            schedule_peak_memory(schedule, all[li].costs, all[li].meta);
        return static_cast<double>(*std::max_element(peaks.begin(), peaks.end())) <= lightest;
      });
    }
  }
  double second_tier = kSecondTierActions;
  for (std::size_t li = 0; li < all.size() && !done; ++li) {
    if (all[li].replicas != 1) continue;  // family seeds only
    if (!leaders.empty() && hopeless(all[li], leaders.best())) continue;
    const double cost = (kListCost + 1) * layout_actions(all[li]);
    for (const ListVariant& v : more_variants(split)) {
      if (done || second_tier < cost) break;
      second_tier -= cost;
      budget -= cost;
      run_list(li, v);
    }
  }
  if (leaders.empty()) {
    // Nothing fits the memory limit: the limit's error, as a fixed family's plan gives it (a
    // caller that relieves memory, --recompute auto, tells it from the others by its field).
    const std::string memory = field_name("memory_limit_bytes") + ": ";
    if (first_error.starts_with(memory)) {
      throw FieldError("memory_limit_bytes", first_error.substr(memory.size()));
    }
    throw Error(first_error);
  }

  // The local search on the best few, unless the best already meets both bounds.
  std::vector<Candidate>& best = leaders.all();
  const std::size_t starts = done || at_bounds(best.front().eval.score) ? 0 : best.size();
  std::size_t winner = 0;
  std::string suffix;
  int evaluations_left = kMaxEvaluations;
  for (std::size_t i = 0; i < starts; ++i) {
    Candidate& c = best[i];
    const Layout& layout = all[c.layout];
    const EvalContext context{&layout.costs, &layout.meta, r.objective};
    const double per_evaluation = static_cast<double>(c.schedule.action_count() + 1);
    const auto share = static_cast<double>(starts - i);
    int evaluations = std::max(
        kMinEvaluations, static_cast<int>(std::min(budget / per_evaluation / share,
                                                   static_cast<double>(evaluations_left) / share)));
    const int granted = evaluations;
    c.eval = *evaluate_order(c.schedule, context, true, first_error);  // with its times
    const int moves = improve_by_moves(c.schedule, c.eval, context, first_error, evaluations);
    if (moves > 0) c.first = false;  // a rejected move is undone: none kept, the order is as it was
    budget -= (granted - evaluations) * per_evaluation;
    evaluations_left -= granted - evaluations;
    if (i == 0 || preferred(c.eval.score, best[winner].eval.score, r.objective)) {
      winner = i;
      suffix = moves > 0 ? " +" + std::to_string(moves) + " moves" : "";
    }
  }
  if (curves) {
    // The simulator ranks the search's best few and every fixed family's order: auto is then
    // never slower than a fixed family of its layouts under the same contention model. The
    // stages share one GPU: an order whose stages together take more than its HBM is chosen
    // only where every order does (2bp-fill's rule, filled_or_deferred).
    std::vector<Candidate> finalists = std::move(best);
    for (Candidate& seed : seeds)
      finalists.push_back(std::move(seed));
    std::optional<std::size_t> pick;
    bool pick_fits = false;
    for (std::size_t i = 0; i < finalists.size(); ++i) {
      const std::optional<SimulatedScore> simulated =
          simulated_score(finalists[i].schedule, all[finalists[i].layout]);
      if (!simulated) continue;
      finalists[i].eval.score = simulated->score;
      const bool fits = r.gpu_hbm_bytes <= 0 || simulated->shared_bytes <= r.gpu_hbm_bytes;
      if (!pick || (fits && !pick_fits) ||
          (fits == pick_fits &&
           preferred(simulated->score, finalists[*pick].eval.score, r.objective))) {
        pick = i;
        pick_fits = fits;
      }
    }
    best = std::move(finalists);  // the leaders first, at their places
    if (pick && *pick != winner) {
      winner = *pick;
      suffix.clear();
    }
  }
  Candidate& chosen = best[winner];
  const Layout& layout = all[chosen.layout];
  AutoResult out;
  out.schedule = std::move(chosen.schedule);
  out.variant = chosen.name + suffix;
  out.makespan_us = chosen.eval.score.makespan_us;
  out.max_stage_span_us = chosen.eval.score.span_us;
  out.variants_tried = tried;
  out.first_candidate = chosen.first;
  out.chunks = layout.chunks;
  out.blocks = layout.blocks;
  out.costs = layout.costs;
  out.bound_step_us = bound_step;
  out.bound_span_us = bound_span;
  return out;
}

AutoResult make_auto_schedule(const std::vector<StageCost>& costs, const PlanMeta& meta,
                              BackwardMode mode, int p2_concat, Objective objective) {
  if (meta.chunks != 1) throw FieldError("chunks", "schedule 'auto' chooses the chunks itself");
  AutoRequest r;
  r.devices = meta.devices;
  r.microbatches = meta.microbatches;
  r.mode = mode;
  r.p2_concat = p2_concat;
  r.objective = objective;
  r.costs = costs;
  r.static_bytes = meta.static_bytes;
  r.memory_limit_bytes = meta.memory_limit_bytes;
  r.link = meta.link;
  return make_auto_schedule(r);
}

}  // namespace pipeplan
