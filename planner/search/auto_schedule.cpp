#include "planner/search/auto_schedule.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "planner/base/error.h"
#include "planner/plan/lower_bound.h"
#include "planner/plan/make_plan.h"
#include "planner/search/auto_list.h"
#include "planner/search/auto_moves.h"

namespace pipeplan {

double boundary_transfer_us(const P2pLink& link, const StageCost& sender) {
  return transfer_time_us(link, sender.send_bytes);
}

namespace {

std::size_t at(int i) {
  return static_cast<std::size_t>(i);
}

// A layout of virtual stages on devices, on one cut of the model, with what its candidates are
// evaluated under and the lower bounds no order of it can beat.
struct Layout {
  std::string name;
  int chunks = 1;
  std::vector<int> stage_device;
  std::vector<int> blocks;  // empty: the request's cut
  std::vector<StageCost> costs;
  PlanMeta meta;  // devices, micro-batches, link, static bytes and limits per device
  double bound_step_us = 0, bound_span_us = 0;
};

Layout make_layout(const AutoRequest& r, std::string name, std::vector<int> stage_device,
                   StageCut cut, const std::vector<std::int64_t>* static_bytes) {
  Layout l;
  l.name = std::move(name);
  l.chunks = static_cast<int>(stage_device.size()) / r.devices;
  l.stage_device = stage_device;
  l.blocks = std::move(cut.blocks);
  l.costs = std::move(cut.costs);
  l.meta.devices = r.devices;
  l.meta.chunks = l.chunks;
  l.meta.microbatches = r.microbatches;
  l.meta.schedule = kAutoScheduleName;
  l.meta.backward = r.mode;
  l.meta.p2_concat = r.p2_concat;
  l.meta.link = r.link;
  l.meta.memory_limit_bytes = r.memory_limit_bytes;
  l.meta.memory_limit_bytes.resize(at(r.devices), 0.0);
  if (static_bytes != nullptr) {
    l.meta.static_bytes = *static_bytes;
    l.meta.static_bytes.resize(at(r.devices), 0);
  } else {
    l.meta.static_bytes.assign(at(r.devices), 0);
    for (std::size_t s = 0; s < stage_device.size(); ++s)
      l.meta.static_bytes[at(stage_device[s])] += l.costs[s].static_bytes;
  }
  const LowerBound bound = step_time_lower_bound(l.costs, stage_device, r.link, r.microbatches);
  l.bound_step_us = bound.makespan_us;
  l.bound_span_us = bound.stage_span_us;
  return l;
}

// One chunk per device on the request's cut; with other cuts available, a V and interleaved on
// the balanced cut into 2P stages (when the model has blocks enough).
std::vector<Layout> layouts(const AutoRequest& r) {
  std::vector<Layout> out;
  std::vector<int> one(at(r.devices));
  for (int d = 0; d < r.devices; ++d)
    one[at(d)] = d;
  out.push_back(make_layout(r, "one chunk", one, {{}, r.costs}, &r.static_bytes));
  if (!r.cut || r.devices < 2) return out;
  StageCut two;
  try {
    two = r.cut(2 * r.devices, {});
  } catch (const Error&) {
    return out;  // fewer blocks than 2P stages
  }
  std::vector<int> v_map, interleaved_map;
  for (int s = 0; s < 2 * r.devices; ++s) {
    v_map.push_back(s < r.devices ? s : 2 * r.devices - 1 - s);
    interleaved_map.push_back(s % r.devices);
  }
  out.push_back(make_layout(r, "V", v_map, two, nullptr));
  out.push_back(make_layout(r, "interleaved", interleaved_map, std::move(two), nullptr));
  return out;
}

std::vector<ListVariant> list_variants(bool split) {
  std::vector<ListVariant> out;
  for (const double depth : {0.0, 1.0, 1.5, 2.0, 3.0}) {
    if (split) {
      out.push_back({depth, P2Fill::fit, true});
      out.push_back({depth, P2Fill::always, true});
    }
    out.push_back({depth, P2Fill::fit, false});  // fused B: least memory, the 1F1B family
  }
  return out;
}

// The fixed families of a layout (same chunks and stage-to-device map) in every backward mode
// they accept (fused only when the request keeps B whole), as candidates: the search then never
// returns anything slower than a hand-made schedule that fits the same memory.
std::vector<std::pair<std::string, Schedule>> family_seeds(const Layout& layout,
                                                           const std::vector<int>& stage_device,
                                                           BackwardMode mode, int p2_concat) {
  std::vector<std::pair<std::string, Schedule>> out;
  const bool split = mode != BackwardMode::fused;
  const PlanMeta& meta = layout.meta;
  for (const ScheduleFamily* family : schedule_families()) {
    if (family->traits().needs_costs || !family->traits().chunks.accepts(layout.chunks)) continue;
    ScheduleRequest request{meta.devices, layout.chunks, meta.microbatches,
                            std::nullopt, p2_concat,     nullptr};
    Schedule generated;
    try {
      generated = family->generate(request);
    } catch (const Error&) {
      continue;  // the family does not suit this shape (e.g. micro-batches vs devices)
    }
    if (generated.stage_device != stage_device) continue;
    // Fused last, so that on equal scores (a stable sort) the split orders win.
    std::vector<BackwardMode> modes;
    for (const BackwardMode m : family->backward_modes()) {
      if (split || m == BackwardMode::fused) modes.push_back(m);
    }
    std::stable_partition(modes.begin(), modes.end(),
                          [](BackwardMode m) { return m != BackwardMode::fused; });
    for (const BackwardMode m : modes) {
      request.backward = m;
      Schedule s = with_backward_mode(*family, generated, request, layout.costs, meta);
      out.emplace_back(
          family->places_p2() ? family->name() : family->name() + " " + std::string(to_string(m)),
          std::move(s));
    }
  }
  return out;
}

// Evaluations the local search may spend, shared by its starts: a fixed budget of simulated
// actions, at least kMinEvaluations and at most kMaxEvaluations. Deterministic, unlike a
// wall-clock limit.
int local_search_budget(const Schedule& schedule) {
  constexpr double kActionBudget = 3e5;
  constexpr double kMinEvaluations = 8, kMaxEvaluations = 600;
  std::size_t actions = 0;
  for (const auto& device : schedule.per_device)
    actions += device.size();
  const double evaluations = kActionBudget / static_cast<double>(actions + 1);
  return static_cast<int>(std::clamp(evaluations, kMinEvaluations, kMaxEvaluations));
}

struct Candidate {
  std::size_t layout = 0;
  Schedule schedule;
  std::string name;
  AutoEval eval;
};

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
  const std::vector<Layout> all = layouts(r);

  double bound_step = std::numeric_limits<double>::infinity(), bound_span = bound_step;
  for (const Layout& l : all) {
    bound_step = std::min(bound_step, l.bound_step_us);
    bound_span = std::min(bound_span, l.bound_span_us);
  }
  const auto at_bounds = [&](const AutoScore& s) {
    return s.makespan_us <= bound_step * (1 + 1e-9) + 1e-9 &&
           s.span_us <= bound_span * (1 + 1e-9) + 1e-9;
  };

  std::vector<Candidate> feasible;
  int tried = 0;
  std::string first_error;
  bool done = false;
  for (std::size_t li = 0; li < all.size() && !done; ++li) {
    const Layout& layout = all[li];
    const std::vector<int>& stage_device = layout.stage_device;
    const EvalContext context{&layout.costs, &layout.meta, r.objective};
    const auto consider = [&](Schedule schedule, const std::string& name) {
      ++tried;
      schedule.family = kAutoScheduleName;
      schedule.backward = r.mode;
      if (std::optional<AutoEval> e = evaluate_order(schedule, context, true, first_error)) {
        done = done || at_bounds(e->score);
        feasible.push_back({li, std::move(schedule), layout.name + " " + name, std::move(*e)});
      }
    };
    ListInputs inputs{r.devices,
                      r.microbatches,
                      stage_device,
                      &layout.costs,
                      r.link,
                      layout.meta.static_bytes,
                      layout.meta.memory_limit_bytes};
    for (const ListVariant& v : list_variants(split)) {
      if (done) break;
      try {
        consider(list_schedule(inputs, v, max_group), v.name());
      } catch (const Error& e) {
        ++tried;
        if (first_error.empty()) first_error = e.what();
      }
    }
    if (done) break;
    for (auto& [name, schedule] : family_seeds(layout, stage_device, r.mode, r.p2_concat)) {
      consider(std::move(schedule), "seed=" + name);
      if (done) break;
    }
  }
  if (feasible.empty()) throw Error(first_error);
  // Stable: equal scores keep candidate order, so the result is deterministic.
  std::stable_sort(feasible.begin(), feasible.end(), [&](const Candidate& a, const Candidate& b) {
    return better(a.eval.score, b.eval.score, r.objective);
  });

  constexpr std::size_t kStarts = 3;
  const std::size_t starts =
      at_bounds(feasible.front().eval.score) ? 0 : std::min(kStarts, feasible.size());
  int budget = starts > 0 ? local_search_budget(feasible.front().schedule) : 0;
  std::size_t best = 0;
  std::string suffix;
  for (std::size_t i = 0; i < starts; ++i) {
    Candidate& c = feasible[i];
    const Layout& layout = all[c.layout];
    const EvalContext context{&layout.costs, &layout.meta, r.objective};
    int share = budget / static_cast<int>(starts - i);
    budget -= share;
    const int moves = improve_by_moves(c.schedule, c.eval, context, first_error, share);
    budget += share;  // what this start left unspent goes to the next
    if (i == 0 || better(c.eval.score, feasible[best].eval.score, r.objective)) {
      best = i;
      suffix = moves > 0 ? " +" + std::to_string(moves) + " moves" : "";
    }
  }
  Candidate& winner = feasible[best];
  const Layout& layout = all[winner.layout];
  AutoResult out;
  out.schedule = std::move(winner.schedule);
  out.variant = winner.name + suffix;
  out.makespan_us = winner.eval.score.makespan_us;
  out.max_stage_span_us = winner.eval.score.span_us;
  out.variants_tried = tried;
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
