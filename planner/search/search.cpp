#include "planner/search/search.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <numeric>
#include <optional>

#include "planner/base/error.h"
#include "planner/base/limits.h"
#include "planner/graph/schedule_sim.h"
#include "planner/graph/validator.h"
#include "profiles/partition.h"
#include "schedules/family.h"

namespace pipeplan {

namespace {

// Transformer blocks per stage of the balanced partition (the form --layers-per-stage takes).
std::vector<int> balanced_blocks(const PlanRequest& r, int stages) {
  const Recompute recompute =
      r.recompute.method == Recompute::Method::automatic ? Recompute{} : r.recompute;
  return blocks_per_stage(r.profile.model,
                          partition_balanced(r.profile.model, r.profile, r.mbs, stages, recompute));
}

// Balanced, then one block moved across the first and across the last boundary, both ways.
std::vector<std::vector<int>> partitions(const PlanRequest& r, int stages, bool shift) {
  std::vector<std::vector<int>> out = {{}};
  if (!shift || stages < 2) return out;
  const std::vector<int> base = balanced_blocks(r, stages);
  const auto last = base.size() - 1;
  const std::pair<std::size_t, std::size_t> moves[] = {
      {0, 1}, {1, 0}, {last, last - 1}, {last - 1, last}};
  for (const auto& [from, to] : moves) {
    if (base[from] < 2) continue;
    std::vector<int> p = base;
    --p[from];
    ++p[to];
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

// The time a search minimises first, and the one that breaks its ties.
double first_time(const SearchPoint& p, Objective objective) {
  return objective == Objective::steady ? p.span_us : p.step_time_us;
}
double second_time(const SearchPoint& p, Objective objective) {
  return objective == Objective::steady ? p.step_time_us : p.span_us;
}

}  // namespace

std::vector<std::size_t> pareto_order(const std::vector<SearchPoint>& points, Objective objective) {
  // The same plan timed along two paths (auto's compact arrays, a family's) differs in its last
  // bits: times this close are one time, and the lighter point is the better.
  constexpr double kTieUs = 1e-9;
  std::vector<std::size_t> order(points.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return first_time(points[a], objective) < first_time(points[b], objective);
  });
  // Each point's time class: a point within kTieUs of its class's first joins it. A pairwise
  // tolerance is not transitive; classes are, so one order serves the sort, the dominance and
  // the best point alike.
  std::vector<int> tie_class(points.size(), 0);
  int current = -1;
  double class_start = 0;
  for (const std::size_t i : order) {
    const double t = first_time(points[i], objective);
    if (current < 0 || t > class_start + kTieUs) {
      ++current;
      class_start = t;
    }
    tie_class[i] = current;
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (tie_class[a] != tie_class[b]) return tie_class[a] < tie_class[b];
    if (points[a].peak_memory_bytes != points[b].peak_memory_bytes)
      return points[a].peak_memory_bytes < points[b].peak_memory_bytes;
    return second_time(points[a], objective) < second_time(points[b], objective);
  });
  // In that order a point is on the front when it is the first of its class and lighter than
  // every point before it: the later ones of a class are no lighter at the same time, and an
  // earlier class's as light point is faster.
  std::vector<std::size_t> front;
  for (const std::size_t i : order) {
    if (!front.empty() && (tie_class[i] == tie_class[front.back()] ||
                           points[i].peak_memory_bytes >= points[front.back()].peak_memory_bytes))
      continue;
    front.push_back(i);
  }
  return front;
}

std::vector<std::pair<int, int>> global_batch_splits(int global_batch,
                                                     const std::vector<int>& mbs_candidates) {
  if (global_batch < 1) throw FieldError("global_batch", "must be at least 1");
  limits::check_limit("global_batch", global_batch, limits::kMaxGlobalBatch);
  limits::check_limit("micro_batch_sizes", static_cast<std::int64_t>(mbs_candidates.size()),
                      limits::kMaxSizeCandidates);
  std::vector<std::pair<int, int>> sizes;  // (mbs, m)
  bool divides = false;
  for (const int mbs : mbs_candidates) {
    if (mbs < 1) throw FieldError("micro_batch_sizes", "must be positive");
    if (global_batch % mbs != 0) continue;
    divides = true;
    if (global_batch / mbs <= limits::kMaxMicrobatches) sizes.emplace_back(mbs, global_batch / mbs);
  }
  if (!divides) {
    std::string candidates;
    for (const int mbs : mbs_candidates)
      candidates += (candidates.empty() ? "" : ", ") + std::to_string(mbs);
    throw FieldError("global_batch", std::to_string(global_batch) +
                                         " is divisible by no candidate micro-batch size (" +
                                         candidates + ")");
  }
  if (sizes.empty()) {
    throw FieldError("global_batch",
                     std::to_string(global_batch) + " samples need more than " +
                         std::to_string(limits::kMaxMicrobatches) +
                         " micro-batches at every candidate micro-batch size, above the limit "
                         "on micro-batches (docs/reference/limits.md)");
  }
  return sizes;
}

SearchResult search_plans(const SearchRequest& request) {
  std::vector<std::pair<int, int>> sizes;  // (mbs, m)
  if (request.global_batch > 0) {
    sizes = global_batch_splits(request.global_batch, request.mbs_candidates);
  } else {
    sizes.emplace_back(request.base.mbs, request.base.microbatches);
  }
  SearchResult result;
  const Objective objective = request.base.objective;
  result.objective = objective;
  result.shared_gpu = !request.base.profile.contention.empty();
  std::vector<SearchPoint> points;
  std::vector<PlanRequest> requests;  // each point's
  std::string first_error;
  // One candidate on compact arrays (planner/graph/schedule_sim.h); through make_plan where only
  // the task graph's simulation models the timing: BPipe transfers, and a profile's contention
  // model (a shared GPU's curves, a sustained-load term); and where make_plan resolves the
  // recomputation (auto). Empty when it breaks the memory limit.
  const auto evaluate = [&](const PlanRequest& c, int mbs, int m, int chunks,
                            const std::vector<int>& layers) -> std::optional<SearchPoint> {
    SearchPoint p{mbs, m, chunks, c.schedule, c.backward, layers, 0, 0, 0, 0, c.recompute};
    if (c.bpipe != BpipeMode::off || !c.profile.contention.empty() ||
        c.recompute.method == Recompute::Method::automatic) {
      const Plan plan = make_plan(c);
      p.step_time_us = plan.sim.makespan_us;
      p.span_us = plan.sim.max_stage_span_us;
      p.bound_us = plan.bound.makespan_us;
      p.peak_memory_bytes = plan.sim.largest_peak_memory_bytes();
      if (!c.profile.contention.empty()) {
        // The stages share one GPU (compare's "peak mem sum"): what it holds is their sum, and a
        // point whose sum is over its HBM cannot run.
        p.peak_memory_bytes = plan.sim.shared_gpu_memory_bytes();
        if (over_shared_gpu_hbm(plan.graph.meta, plan.sim)) {
          if (first_error.empty()) {
            first_error = "the stages share one GPU (" + plan.graph.meta.gpu +
                          "): their summed peaks, " +
                          gib_text(static_cast<double>(p.peak_memory_bytes)) +
                          ", are more than its " + gib_text(shared_gpu_hbm_bytes(plan.graph.meta)) +
                          " (fewer micro-batches in "
                          "flight, recomputation or fewer stages give room)";
          }
          return std::nullopt;
        }
      }
      p.recompute = plan.graph.meta.recompute;
      p.chunks = plan.graph.meta.chunks;  // auto's own choice, not the family's preference
      return p;
    }
    const PlannedSchedule planned = plan_schedule(c);
    const ScheduleSim sim = simulate_schedule(planned.schedule, planned.costs, planned.meta);
    if (!sim.ok) {
      const std::string what = field_name("memory_limit_bytes") + ": " + sim.error;
      if (first_error.empty()) first_error = sim.memory_ok ? "internal: " + sim.error : what;
      return std::nullopt;
    }
    p.step_time_us = sim.makespan_us;
    p.span_us = sim.max_stage_span_us;
    p.bound_us = planned.bound.makespan_us;
    p.chunks = planned.meta.chunks;
    p.peak_memory_bytes =
        *std::max_element(sim.peak_memory_bytes.begin(), sim.peak_memory_bytes.end());
    return p;
  };
  for (const auto& [mbs, m] : sizes) {
    PlanRequest r = request.base;
    r.mbs = mbs;
    r.microbatches = m;
    if (request.profile_for) r.profile = request.profile_for(mbs);
    for (const ScheduleFamily* family : schedule_families()) {
      if (!request.only_schedule.empty() && family->name() != request.only_schedule) continue;
      // Its preferred count only: interleaved with one chunk is 1f1b.
      const int chunks = family->traits().chunks.preferred;
      std::vector<std::vector<int>> parts;
      try {
        // A family that chooses the layout (auto) cuts the model itself.
        parts = family->traits().needs_costs
                    ? std::vector<std::vector<int>>{{}}
                    : partitions(r, r.devices * chunks / family->traits().replicas,
                                 request.shift_partition);
      } catch (const Error& e) {
        if (first_error.empty()) first_error = e.what();
        ++result.evaluated;  // one candidate, whose layout cannot be cut
        ++result.infeasible;
        continue;
      }
      // make_plan's other cut where a device holds several stages: a candidate of its own.
      PlanRequest family_request = r;
      family_request.schedule = family->name();
      family_request.chunks = chunks;
      if (std::vector<int> alone = stage_balanced_cut(family_request);
          !alone.empty() && std::find(parts.begin(), parts.end(), alone) == parts.end())
        parts.push_back(std::move(alone));
      for (const BackwardMode mode : family->backward_modes()) {
        if (request.only_backward && mode != *request.only_backward) continue;
        for (const std::vector<int>& layers : parts) {
          PlanRequest c = r;
          c.schedule = family->name();
          c.backward = mode;
          c.chunks = chunks;
          c.layers_per_stage = layers;
          // Where a p2 group size means nothing (`plan` refuses --p2-concat: a fused backward,
          // a family placing each p2 itself), the point is the plan made without one (0, as the
          // CLI's).
          if (!family->takes_p2_concat(mode)) c.p2_concat = 0;
          ++result.evaluated;
          std::optional<SearchPoint> p;
          try {
            p = evaluate(c, mbs, m, chunks, layers);
          } catch (const Error& e) {
            if (first_error.empty()) first_error = e.what();
          }
          if (!p) {
            ++result.infeasible;
            continue;
          }
          points.push_back(std::move(*p));
          requests.push_back(std::move(c));
        }
      }
    }
  }
  if (points.empty()) {
    // Nothing fits the memory limit: the limit's error, by its field (as make_plan's), so that a
    // caller can tell it from the others.
    const std::string memory = field_name("memory_limit_bytes") + ": ";
    if (first_error.starts_with(memory))
      throw FieldError("memory_limit_bytes", first_error.substr(memory.size()));
    throw Error(first_error.empty() ? "search: no candidate plan" : first_error);
  }
  // The best point is the front's first: one order ranks both.
  const std::vector<std::size_t> front = pareto_order(points, objective);
  for (const std::size_t i : front)
    result.pareto.push_back(points[i]);
  result.best_point = result.pareto.front();
  // The best plan, lowered, validated and simulated for real (the candidates ran on compact
  // arrays): the same step time and peak.
  result.best = make_plan(requests[front.front()]);
  return result;
}

std::string format_pareto(const SearchResult& result) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "Pareto front (%s vs peak memory), %d candidates, %d infeasible:\n",
                result.objective == Objective::steady ? "largest stage span" : "step time",
                result.evaluated, result.infeasible);
  out += line;
  // A recompute column where some point recomputes: none, full or N (the first N of a stage).
  const bool recomputes = std::any_of(result.pareto.begin(), result.pareto.end(),
                                      [](const SearchPoint& p) { return p.recompute.any(); });
  // The schedule column as wide as its widest name ("interleaved V=2").
  const auto schedule_name = [](const SearchPoint& p) {
    return p.chunks > 1 ? p.schedule + " V=" + std::to_string(p.chunks) : p.schedule;
  };
  int schedule_width = 12;
  for (const SearchPoint& p : result.pareto)
    schedule_width = std::max(schedule_width, static_cast<int>(schedule_name(p).size()));
  std::snprintf(line, sizeof line, "%11s %11s %10s %8s %4s %5s %-*s %-9s %s%s\n", "step ms",
                "span ms", result.shared_gpu ? "sum GiB" : "peak GiB", "gap", "mbs", "m",
                schedule_width, "schedule", "backward", recomputes ? "recompute " : "",
                "blocks/stage");
  out += line;
  for (const SearchPoint& p : result.pareto) {
    std::string blocks = "balanced";
    if (!p.layers_per_stage.empty()) {
      blocks.clear();
      for (const int b : p.layers_per_stage)
        blocks += (blocks.empty() ? "" : ",") + std::to_string(b);
    }
    const std::string name = schedule_name(p);
    std::array<char, 32> recompute_cell{};
    if (recomputes) {
      std::snprintf(recompute_cell.data(), recompute_cell.size(), "%-9s ",
                    to_string(p.recompute).c_str());
    }
    std::snprintf(
        line, sizeof line, "%11.3f %11.3f %10.2f %7.1f%% %4d %5d %-*s %-9s %s%s\n",
        p.step_time_us / 1e3, p.span_us / 1e3, static_cast<double>(p.peak_memory_bytes) / (1 << 30),
        p.bound_us > 0 ? 100 * (p.step_time_us - p.bound_us) / p.bound_us : 0.0, p.mbs,
        p.microbatches, schedule_width, name.c_str(), std::string(to_string(p.backward)).c_str(),
        recompute_cell.data(), blocks.c_str());
    out += line;
  }
  return out;
}

}  // namespace pipeplan
