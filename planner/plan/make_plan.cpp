#include "planner/plan/make_plan.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <utility>

#include "planner/base/concurrent.h"
#include "planner/base/error.h"
#include "planner/base/limits.h"
#include "planner/graph/evaluate.h"
#include "planner/graph/simulator.h"
#include "planner/graph/validator.h"
#include "planner/plan/backward_fill.h"
#include "profiles/gpu.h"
#include "profiles/partition.h"
#include "schedules/backward.h"

namespace pipeplan {

namespace {

// Everything the plan could hold at once, summed without overflow: every stage's stash and
// retained bytes for every micro-batch, plus every stage's static bytes. Beyond
// limits::kMaxPlanBytes running memory totals could leave int64; no real profile comes near.
void check_plan_bytes(const std::vector<StageCost>& costs, int microbatches) {
  double total = 0;
  for (const StageCost& c : costs) {
    total += static_cast<double>(c.static_bytes) +
             static_cast<double>(c.stash_bytes + c.retained_bytes) * microbatches;
  }
  if (total > static_cast<double>(limits::kMaxPlanBytes)) {
    throw FieldError(
        "microbatches",
        limits::above_limit("the profile's memory for " + std::to_string(microbatches) +
                                " micro-batches (" + std::to_string(total) + " bytes)",
                            static_cast<double>(limits::kMaxPlanBytes)));
  }
}

// Blocks of the largest of `stages`.
int most_blocks_per_stage(const ModelConfig& model, const std::vector<StageLayers>& stages) {
  const std::vector<int> blocks = blocks_per_stage(model, Partition{stages});
  return blocks.empty() ? 0 : *std::max_element(blocks.begin(), blocks.end());
}

}  // namespace

std::vector<std::int64_t> static_bytes_per_device(int devices, const std::vector<int>& stage_device,
                                                  int replicas,
                                                  const std::vector<StageCost>& costs) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(std::max(devices, 0)), 0);
  const std::size_t stages = stage_device.size();
  const std::size_t copy = stages / static_cast<std::size_t>(std::max(replicas, 1));
  for (std::size_t s = 0; s < stages; ++s) {
    const auto d = static_cast<std::size_t>(stage_device[s]);
    out[d] += costs[s].static_bytes;
    const std::size_t other = replicas > 1 ? (s + copy) % stages : s;
    if (stage_device[other] != stage_device[s]) out[d] += costs[other].grad_bytes;
  }
  return out;
}

namespace {

PlanMeta make_meta(const PlanRequest& r, const Partition& partition,
                   const std::vector<StageCost>& costs, const Schedule& schedule) {
  const int chunks = r.devices > 0 ? schedule.stage_count() / r.devices : r.chunks;
  PlanMeta m;
  m.model = r.profile.model;
  m.gpu = r.gpu.empty() ? r.profile.gpu : r.gpu;
  m.devices = r.devices;
  m.chunks = chunks;
  m.microbatches = r.microbatches;
  m.mbs = r.mbs;
  m.seq = r.profile.seq;
  m.schedule = r.schedule;
  m.backward = r.backward;
  m.p2_concat = r.p2_concat;
  m.attention = r.profile.attention;
  m.stage_layers = partition.stages;
  m.memory_limit_bytes.assign(static_cast<std::size_t>(r.devices), r.memory_limit_bytes);
  m.static_bytes =
      static_bytes_per_device(r.devices, schedule.stage_device, schedule.replicas, costs);
  m.flops_per_token = r.profile.model.flops_per_token(r.profile.seq);
  m.peak_flops_per_device = r.peak_flops_per_device;
  m.tensor_parallel = r.tensor_parallel;
  m.data_parallel = r.data_parallel;
  // The first N blocks of stages that hold no more than N: every block, as full says it.
  m.recompute = r.recompute.method == Recompute::Method::block &&
                        r.recompute.blocks >= most_blocks_per_stage(m.model, partition.stages)
                    ? Recompute{Recompute::Method::full, 0}
                    : r.recompute;
  m.link = r.profile.p2p;
  m.contention = r.profile.contention;
  m.overlap = r.profile.overlap;
  const Provenance& p = r.profile.provenance;
  m.profile_source =
      p.source + (p.gpu.empty() ? "" : " on " + p.gpu) + (p.date.empty() ? "" : " " + p.date);
  return m;
}

struct StageInputs {
  Partition partition;
  std::vector<StageCost> costs;
};

// The stages of the model's cut: the request's virtual stages over the copies of the model.
int model_stage_count(const PlanRequest& request, int replicas) {
  return request.devices * request.chunks / std::max(replicas, 1);
}

// Each device's stages of a cut into `stages` (partition_balanced's device_stages): stages s and
// stages - 1 - s together when `folded` (ScheduleFamilyTraits::folded_stages), else s mod
// `devices`.
std::vector<std::vector<int>> device_stages(int stages, int devices, bool folded) {
  std::vector<std::vector<int>> groups;
  if (folded) {
    for (int s = 0; s < stages - 1 - s; ++s)
      groups.push_back({s, stages - 1 - s});
    if (stages % 2 == 1) groups.push_back({stages / 2});
    return groups;
  }
  if (devices < 1 || stages <= devices) return groups;  // one stage per device
  groups.resize(static_cast<std::size_t>(devices));
  for (int s = 0; s < stages; ++s)
    groups[static_cast<std::size_t>(s % devices)].push_back(s);
  return groups;
}

// The same read from a schedule's own stage-to-device map (an imported order).
std::vector<std::vector<int>> device_stages(const Schedule& schedule) {
  std::vector<std::vector<int>> groups(static_cast<std::size_t>(schedule.devices));
  for (std::size_t s = 0; s < schedule.stage_device.size(); ++s) {
    const int d = schedule.stage_device[s];
    if (d < 0 || d >= schedule.devices) return {};  // check_schedule names it
    groups[static_cast<std::size_t>(d)].push_back(static_cast<int>(s));
  }
  std::erase_if(groups, [](const std::vector<int>& g) { return g.empty(); });
  return groups;
}

// The cut of the model into `stage_count` virtual stages: balanced when `blocks` is empty (each
// device's stages, `groups`, balanced as a whole; empty: one per device). With `replicas` copies
// of the model (Schedule::replicas), the model is cut into stage_count / replicas stages
// (`blocks` and `groups` count those) and the virtual stages are that cut `replicas` times.
StageInputs stage_inputs(const PlanRequest& request, int stage_count,
                         const std::vector<int>& blocks, int replicas = 1,
                         const std::vector<std::vector<int>>& groups = {}) {
  const ModelConfig& model = request.profile.model;
  const int model_stages = stage_count / replicas;
  Partition partition;
  if (blocks.empty()) {
    const int block_count = std::max(model.layers, 0);  // layer_list()'s blocks
    if (model_stages > block_count && request.devices > 0 && model_stages > request.devices) {
      // The virtual stages come from --chunks or the family: say so, not only the total.
      throw FieldError("devices", std::to_string(request.devices) + " devices x " +
                                      std::to_string(model_stages / request.devices) +
                                      " virtual stages each (" + request.schedule +
                                      ") = " + std::to_string(model_stages) + " stages but " +
                                      (model.name.empty() ? "the model" : model.name) + " has " +
                                      std::to_string(block_count) + " blocks");
    }
    partition = partition_balanced(model, request.profile, request.mbs, model_stages,
                                   request.recompute, groups);
  } else {
    if (static_cast<int>(blocks.size()) != model_stages) {
      throw FieldError(
          "layers_per_stage",
          std::to_string(blocks.size()) + " counts for " + std::to_string(model_stages) +
              " stages" +
              (replicas > 1 ? " of the model (held " + std::to_string(replicas) + " times by the " +
                                  std::to_string(stage_count) + " virtual stages)"
                            : std::string()));
    }
    partition = partition_fixed(model, blocks);
  }
  const int max_concat = request.p2_concat == 0 ? request.microbatches : request.p2_concat;
  auto costs =
      stage_costs(model, request.profile, request.mbs, partition,
                  std::min(max_concat, request.microbatches / replicas), request.recompute);
  for (int copy = 1; copy < replicas; ++copy) {
    for (int s = 0; s < model_stages; ++s) {
      partition.stages.push_back(partition.stages[static_cast<std::size_t>(s)]);
      costs.push_back(costs[static_cast<std::size_t>(s)]);
    }
  }
  check_plan_bytes(costs, request.microbatches / replicas);
  return {std::move(partition), std::move(costs)};
}

StageInputs stage_inputs(const PlanRequest& request, const ScheduleFamilyTraits& traits) {
  return stage_inputs(request, request.devices * request.chunks, request.layers_per_stage,
                      traits.replicas,
                      device_stages(model_stage_count(request, traits.replicas), request.devices,
                                    traits.folded_stages));
}

// The two balanced cuts of the model (blocks per stage): each device's stages (`groups`)
// balanced as a whole, and the stages alone. Throws Error where the model cannot be cut so.
std::pair<std::vector<int>, std::vector<int>> balanced_cuts(
    const PlanRequest& request, const Recompute& recompute,
    const std::vector<std::vector<int>>& groups, int model_stages) {
  const ModelConfig& model = request.profile.model;
  const auto cut = [&](const std::vector<std::vector<int>>& grouping) {
    return blocks_per_stage(model, partition_balanced(model, request.profile, request.mbs,
                                                      model_stages, recompute, grouping));
  };
  return {cut(groups), cut({})};
}

// `known`: the plan's lower bound where the caller has it already (plan_schedule computes it,
// with the search's own bounds folded in); otherwise it is computed here. `given`: the schedule
// came as data (an imported CSV), not from a family. `schedule_checked`: check_schedule has run on
// it; otherwise it runs beside the lowering.
Plan simulate_lowered(TaskGraph graph, const std::vector<StageCost>& costs,
                      const std::optional<LowerBound>& known, BpipeMode bpipe, bool given);

Plan lower_and_simulate(Schedule schedule, const std::vector<StageCost>& costs, PlanMeta meta,
                        const std::optional<LowerBound>& known, BpipeMode bpipe = BpipeMode::off,
                        bool given = false, bool schedule_checked = true) {
  return simulate_lowered(schedule_checked
                              ? lower(std::move(schedule), costs, std::move(meta))
                              : lower_and_check(std::move(schedule), costs, std::move(meta)),
                          costs, known, bpipe, given);
}

// BPipe's caps (plan_bpipe) come from an order-based estimate of each device's memory; the
// simulation also sees when the transfers run. The evictor's op that reuses an evicted stash's
// memory (its next forward, or the op after a backward next) waits for the eviction
// (add_bpipe_transfers), so a slow eviction costs time there, not memory; the acceptor's
// receives and returns, timed by their links, can still overlap more stashes than the estimate
// counts. When a device of a pair goes over --memory in the simulation, the pair's cap moves by one
// stash (the evictor over: it keeps one fewer; the acceptor over: one more) and the transfers are
// planned again, for as long as that lowers the device's simulated peak. Returns the first plan
// that fits, or else the first plan made (its violation is the one reported).
//
// A pair keeps its transfers only where they pay in the simulation: its larger simulated peak
// falls by more than the tolerance plan_pair counts as the same peak (a cap can balance a pair
// without lowering its maximum, where the newest evicted stash is still in flight), and, under
// --memory, one of its devices was over the limit without them. Other pairs move nothing (link
// time and HBM traffic for no memory), unless the plan without their transfers no longer fits.
CheckedSimulation keep_paying_pairs(TaskGraph& graph, const TaskGraph& without, BpipePlan plan,
                                    CheckedSimulation with) {
  const std::vector<double>& limits = graph.meta.memory_limit_bytes;
  // `without` is the lowered graph the transfers went into: with them it validated, so it is
  // sound to simulate (only its peaks are read here; a memory limit it breaks is the point).
  const std::vector<std::int64_t> before = simulate(without).peak_memory_bytes();
  const std::vector<std::int64_t> after = with.sim.peak_memory_bytes();
  const auto over = [&](int d) {
    const auto i = static_cast<std::size_t>(d);
    return i < limits.size() && limits[i] > 0 && static_cast<double>(before[i]) > limits[i];
  };
  const bool limited = graph.meta.memory_limited();
  bool dropped = false;
  for (BpipePair& pair : plan.pairs) {
    if (pair.moves.empty()) continue;
    const auto e = static_cast<std::size_t>(pair.evictor);
    const auto a = static_cast<std::size_t>(pair.acceptor);
    const auto highest_before = static_cast<double>(std::max(before[e], before[a]));
    const auto highest_after = static_cast<double>(std::max(after[e], after[a]));
    const double same = std::min(highest_before * kBpipeSamePeak,
                                 static_cast<double>(pair.moves.front().bytes) / 2);
    const bool pays = highest_before - highest_after > same &&
                      (!limited || over(pair.evictor) || over(pair.acceptor));
    if (pays) continue;
    pair.moves.clear();
    pair.max_evicted = 0;
    dropped = true;
  }
  if (!dropped) return with;
  TaskGraph attempt = without;
  add_bpipe_transfers(attempt, plan);
  CheckedSimulation checked = validate_and_simulate(attempt);
  if (checked.violation) return with;  // the dropped transfers were needed after all
  graph = std::move(attempt);
  return checked;
}

CheckedSimulation add_bpipe_within_memory(TaskGraph& graph, const std::vector<StageCost>& costs) {
  const int devices = graph.schedule.devices;
  const std::vector<double>& limits = graph.meta.memory_limit_bytes;
  std::vector<CapRange> ranges(static_cast<std::size_t>(devices / 2));
  std::optional<std::pair<TaskGraph, CheckedSimulation>> first;
  std::vector<std::int64_t> previous;  // the last attempt's simulated peaks
  while (const std::optional<BpipePlan> transfers = plan_bpipe(graph, costs, ranges)) {
    TaskGraph attempt = graph;
    add_bpipe_transfers(attempt, *transfers);
    CheckedSimulation checked = validate_and_simulate(attempt);
    if (!checked.violation || checked.violation->rule != "memory-limit") {
      if (checked.violation) {  // not a memory fault: reported as it is
        graph = std::move(attempt);
        return checked;
      }
      const TaskGraph without = graph;
      graph = std::move(attempt);
      return keep_paying_pairs(graph, without, *transfers, std::move(checked));
    }
    const std::vector<std::int64_t> peaks = checked.sim.peak_memory_bytes();
    bool moved = false;
    for (int d = 0; d < devices; ++d) {
      const auto i = static_cast<std::size_t>(d);
      const int x = std::min(d, devices - 1 - d);  // the pair's evictor
      if (x == devices - 1 - x || i >= limits.size() || limits[i] <= 0) continue;  // unpaired
      if (static_cast<double>(peaks[i]) <= limits[i]) continue;
      if (!previous.empty() && peaks[i] >= previous[i]) continue;  // the last move did not help
      CapRange& range = ranges[static_cast<std::size_t>(x)];
      const int cap = transfers->pairs[static_cast<std::size_t>(x)].cap;
      (d == x ? range.max : range.min) = d == x ? cap - 1 : cap + 1;
      moved = true;
    }
    if (!first) first.emplace(std::move(attempt), std::move(checked));
    if (!moved) break;
    previous = peaks;
  }
  graph = std::move(first->first);
  return std::move(first->second);
}

// The overlap efficiency the lower bound must allow for: the profile's when the schedule has
// overlapped pairs, else 0 (the bound of every other schedule stays as tight as it was).
double pair_efficiency(const Schedule& schedule, const PlanMeta& meta) {
  for (const std::vector<Action>& actions : schedule.per_device) {
    for (const Action& a : actions) {
      if (a.overlaps_next) return meta.overlap.efficiency;
    }
  }
  return 0;
}

// The rest of lower_and_simulate, from the lowered graph on.
Plan simulate_lowered(TaskGraph graph, const std::vector<StageCost>& costs,
                      const std::optional<LowerBound>& known, BpipeMode bpipe, bool given) {
  Plan plan{std::move(graph), {}, {}, {}};
  plan.bound = known ? *known
                     : step_time_lower_bound(costs, plan.graph.schedule.stage_device,
                                             plan.graph.meta.link, plan.graph.schedule.microbatches,
                                             pair_efficiency(plan.graph.schedule, plan.graph.meta),
                                             plan.graph.schedule.replicas);
  // The bound sums and maxes profiled op and link times; the contention model may run an op
  // faster than profiled (a fitted curve below 1), and every time at most that much faster.
  // (auto's search compares its bounds with its compact evaluation, which has no curves: only
  // the bound the plan reports is scaled.)
  const double fastest = plan.graph.meta.contention.fastest_factor();
  plan.bound.makespan_us *= fastest;
  plan.bound.stage_span_us *= fastest;
  CheckedSimulation checked = bpipe == BpipeMode::on ? add_bpipe_within_memory(plan.graph, costs)
                                                     : validate_and_simulate(plan.graph);
  if (const auto& v = checked.violation) {
    if (v->rule == "memory-limit") {
      // The first op over the limit, and what the whole plan would need (it ran as planned).
      const std::vector<std::int64_t> peaks = checked.sim.peak_memory_bytes();
      const auto highest = std::max_element(peaks.begin(), peaks.end());
      std::string need;
      if (highest != peaks.end()) {
        need = "; the plan's peak is " + gib_text(static_cast<double>(*highest)) + ", on device " +
               std::to_string(highest - peaks.begin());
      }
      throw FieldError("memory_limit_bytes", v->message + need);
    }
    // A schedule given as data (an imported CSV) is input: its faults are the input's.
    if (given) throw Error("schedule: the plan it lowers to is invalid: " + v->message);
    throw InternalError("generated plan is invalid: " + v->message);
  }
  plan.sim = std::move(checked.sim);
  return plan;
}

}  // namespace

void check_plan_request(const PlanRequest& r) {
  using limits::check_limit;
  if (r.devices < 1) throw FieldError("devices", "must be at least 1");
  check_limit("devices", r.devices, limits::kMaxDevices);
  if (r.chunks < 1) throw FieldError("chunks", "must be at least 1");
  check_limit("chunks", r.chunks, limits::kMaxChunks);
  const std::int64_t stages = std::int64_t{r.devices} * r.chunks;
  if (stages > limits::kMaxStages) {
    throw FieldError("chunks", limits::above_limit(std::to_string(r.devices) + " devices x " +
                                                       std::to_string(r.chunks) + " chunks = " +
                                                       std::to_string(stages) + " stages",
                                                   limits::kMaxStages));
  }
  if (r.microbatches < 1) throw FieldError("microbatches", "must be at least 1");
  check_limit("microbatches", r.microbatches, limits::kMaxMicrobatches);
  const std::int64_t pairs = stages * r.microbatches;
  if (pairs > limits::kMaxStageMicrobatches) {
    throw FieldError("microbatches",
                     limits::above_limit(
                         std::to_string(stages) + " stages x " + std::to_string(r.microbatches) +
                             " micro-batches = " + std::to_string(pairs) + " stage micro-batches",
                         static_cast<double>(limits::kMaxStageMicrobatches)));
  }
  if (r.mbs < 1) throw FieldError("mbs", "must be at least 1");
  check_limit("mbs", r.mbs, limits::kMaxMicroBatchSize);
  if (r.p2_concat < 0) throw FieldError("p2_concat", "must be 0 (all) or a positive count");
  check_limit("p2_concat", r.p2_concat, limits::kMaxMicrobatches);
  if (!(r.memory_limit_bytes >= 0)) throw FieldError("memory_limit_bytes", "must not be negative");
  if (r.memory_limit_bytes > limits::kMaxMemoryBytes) {
    throw FieldError("memory_limit_bytes",
                     limits::above_limit(std::to_string(r.memory_limit_bytes) + " bytes",
                                         limits::kMaxMemoryBytes));
  }
  check_limit("layers_per_stage", static_cast<std::int64_t>(r.layers_per_stage.size()),
              limits::kMaxStages);
}

namespace {

// 2bp-fill's gaps come from a simulation without a shared GPU's contention curves, with which a
// P2 placed in one stage's gap slows what the others run beside it: the 2bp order is kept where
// the filled one is slower in the simulator that has them (an 8-stage 1F1B on the 16-SM profile:
// 942.0 ms filled against 905.5), and where it also fits: every device within its limit, and
// the stages sharing the GPU within its memory (the 2bp order keeps the retained sets longer),
// or no heavier in all than the filled order where the GPU's memory is not known.
Schedule filled_or_deferred(Schedule filled, const Schedule& generated,
                            const std::vector<StageCost>& costs, const PlanMeta& meta,
                            int p2_concat) {
  Schedule deferred = apply_backward_mode(generated, BackwardMode::twobp, p2_concat);
  deferred.backward = BackwardMode::twobp_fill;
  const SimResult with_fill = simulate(lower(filled, costs, meta));
  const SimResult without = simulate(lower(deferred, costs, meta));
  if (!(without.makespan_us < with_fill.makespan_us)) return filled;
  const std::vector<std::int64_t> peaks = without.peak_memory_bytes();
  for (std::size_t d = 0; d < peaks.size() && d < meta.memory_limit_bytes.size(); ++d) {
    const double limit = meta.memory_limit_bytes[d];
    if (limit > 0 && static_cast<double>(peaks[d]) > limit) return filled;
  }
  const double room =
      std::max(gpu_hbm_bytes(meta.gpu), static_cast<double>(with_fill.shared_gpu_memory_bytes()));
  return static_cast<double>(without.shared_gpu_memory_bytes()) <= room ? std::move(deferred)
                                                                        : std::move(filled);
}

}  // namespace

Schedule with_backward_mode(const ScheduleFamily& family, Schedule generated,
                            const ScheduleRequest& request, const std::vector<StageCost>& costs,
                            const PlanMeta& meta) {
  if (family.places_p2()) return generated;
  if (!request.backward) throw InternalError("with_backward_mode: the backward mode is undecided");
  const BackwardMode mode = *request.backward;
  if (mode == BackwardMode::twobp_fill) {
    Schedule filled = fill_p2_into_gaps(generated, costs, meta, request.p2_concat);
    if (meta.contention.empty()) return filled;
    return filled_or_deferred(std::move(filled), generated, costs, meta, request.p2_concat);
  }
  return apply_backward_mode(generated, mode, request.p2_concat);
}

namespace {

// A search's first candidate, lowered and checked while the search evaluated it
// (StageCostContext::evaluate_first), with the costs it was lowered on: make_plan takes the graph
// when the family returns that very order (StageCostContext::returned_first) on those costs.
struct Prepared {
  bool ready = false;
  bool returned = false;  // the family returned the candidate
  TaskGraph graph;        // without its schedule
  std::vector<StageCost> costs;
};

// The hook that lowers a family's first candidate on this thread while the helper evaluates and
// checks it (run_beside); a candidate that does not lower or check is left to the usual path,
// which reports its fault.
void prepare_candidate(Prepared& prepared, const P2pLink& link, const Schedule& candidate,
                       const std::vector<StageCost>& costs, const std::function<void()>& evaluate) {
  if (candidate.action_count() < kConcurrentActions) {
    evaluate();
    return;
  }
  PlanMeta meta;
  meta.devices = candidate.devices;
  meta.link = link;  // what lowering reads of the metadata: make_plan sets the rest after
  bool checked = false, lowered = false;
  run_beside(
      [&] {
        evaluate();
        try {
          check_schedule(candidate);
          checked = true;
        } catch (const Error&) {
          return;
        }
        prepared.costs = costs;
      },
      [&] {
        try {
          prepared.graph = lower_detached(candidate, costs, std::move(meta));
          lowered = true;
        } catch (const Error&) {
        }
      });
  prepared.ready = checked && lowered;
}

// plan_schedule; with `defer_check`, a family's order that the backward mode leaves as generated
// is not checked here but returned with `checked` false, for make_plan to check beside lowering.
// With `prepared`, a family that evaluates candidates gets prepare_candidate as its hook.
PlannedSchedule plan_schedule(const PlanRequest& request, bool defer_check, bool& checked,
                              Prepared* prepared = nullptr) {
  check_plan_request(request);
  const ScheduleFamily& family = find_schedule_family(request.schedule);
  ScheduleRequest schedule_request{request.devices,  request.chunks,    request.microbatches,
                                   request.backward, request.p2_concat, nullptr};
  family.check(schedule_request);
  if (request.bpipe == BpipeMode::automatic)
    throw FieldError("bpipe", "auto searches micro-batch sizes and needs a global batch");
  if (request.bpipe == BpipeMode::on && !family.traits().bpipe) {
    throw FieldError("bpipe", "schedule '" + family.name() +
                                  "' is not supported; BPipe pairs the stages of 1f1b (one "
                                  "stage per device)");
  }
  StageInputs inputs = stage_inputs(request, family.traits());
  StageCostContext context;
  context.costs = inputs.costs;
  context.memory_limit_bytes.assign(static_cast<std::size_t>(request.devices),
                                    request.memory_limit_bytes);
  context.link = request.profile.p2p;
  context.overlap = request.profile.overlap;
  context.contention = request.profile.contention;
  context.gpu_hbm_bytes = gpu_hbm_bytes(request.gpu.empty() ? request.profile.gpu : request.gpu);
  if (family.traits().needs_costs && request.layers_per_stage.empty()) {
    // Other cuts, for a family that chooses the layout: an explicit --layers-per-stage fixes it.
    context.cut = [&request](int stage_count, const std::vector<int>& blocks, CutBalance balance,
                             int replicas) {
      StageInputs cut = stage_inputs(request, stage_count, blocks, replicas,
                                     balance == CutBalance::stages
                                         ? std::vector<std::vector<int>>{}
                                         : device_stages(stage_count / replicas, request.devices,
                                                         balance == CutBalance::folded));
      if (!blocks.empty()) return StageCut{blocks, std::move(cut.costs)};
      std::vector<int> counts = blocks_per_stage(request.profile.model, cut.partition);
      counts.resize(static_cast<std::size_t>(stage_count / replicas));  // one copy's
      return StageCut{std::move(counts), std::move(cut.costs)};
    };
  }
  if (prepared != nullptr && family.traits().needs_costs && family.places_p2()) {
    context.evaluate_first = [prepared, &request](const Schedule& candidate,
                                                  const std::vector<StageCost>& costs,
                                                  const std::function<void()>& evaluate) {
      prepare_candidate(*prepared, request.profile.p2p, candidate, costs, evaluate);
    };
  }
  schedule_request.costs = &context;
  schedule_request.objective = request.objective;
  schedule_request.max_copies = request.auto_copies;
  Schedule generated = family.generate(schedule_request);
  checked = !(defer_check && family.places_p2());  // with_backward_mode returns it as it is
  if (prepared != nullptr) prepared->returned = context.returned_first;
  if (checked) check_schedule(generated);
  if (!context.chosen_blocks.empty())
    inputs =
        stage_inputs(request, generated.stage_count(), context.chosen_blocks, generated.replicas);
  PlannedSchedule out;
  // The metadata needs the family's stage-to-device map (V shapes differ from v mod P).
  out.meta = make_meta(request, inputs.partition, inputs.costs, generated);
  out.schedule =
      with_backward_mode(family, std::move(generated), schedule_request, inputs.costs, out.meta);
  out.bound = step_time_lower_bound(inputs.costs, out.schedule.stage_device, out.meta.link,
                                    out.schedule.microbatches,
                                    pair_efficiency(out.schedule, out.meta), out.schedule.replicas);
  if (context.bound_step_us > 0 && context.bound_step_us < out.bound.makespan_us) {
    out.bound.makespan_us = context.bound_step_us;
    out.bound.binding_device = -1;
  }
  if (context.bound_span_us > 0)
    out.bound.stage_span_us = std::min(out.bound.stage_span_us, context.bound_span_us);
  out.costs = std::move(inputs.costs);
  out.chosen = std::move(context.chosen);
  return out;
}

}  // namespace

PlannedSchedule plan_schedule(const PlanRequest& request) {
  bool checked = true;
  return plan_schedule(request, false, checked);
}

std::vector<int> stage_balanced_cut(const PlanRequest& request) {
  // Automatic recomputation is resolved before a cut is made (make_plan plans each count's).
  if (!request.layers_per_stage.empty() || request.recompute.method == Recompute::Method::automatic)
    return {};
  const ScheduleFamilyTraits& traits = find_schedule_family(request.schedule).traits();
  if (traits.needs_costs || request.devices < 1 || traits.replicas < 1) return {};
  const int model_stages = model_stage_count(request, traits.replicas);
  const auto groups = device_stages(model_stages, request.devices, traits.folded_stages);
  if (groups.empty()) return {};
  try {
    auto [by_device, by_stage] = balanced_cuts(request, request.recompute, groups, model_stages);
    return by_stage == by_device ? std::vector<int>{} : std::move(by_stage);
  } catch (const Error&) {
    return {};  // planning the request names the problem
  }
}

namespace {

Plan make_plan_on_its_cut(const PlanRequest& request);

// Where a device holds several stages, two balanced cuts: each device's sum balanced first (what
// a device runs for every micro-batch; stage_inputs' cut), or the virtual stages alone (the
// warm-up and cool-down of a chunked order wait on the largest stage). Each is planned, and the
// faster kept (the device-balanced one on a tie); where one breaks the memory limit, the other.
Plan make_plan_as_requested(const PlanRequest& request) {
  const std::vector<int> alternative = stage_balanced_cut(request);
  if (alternative.empty()) return make_plan_on_its_cut(request);
  const auto attempt = [](const PlanRequest& r, std::exception_ptr& over) -> std::optional<Plan> {
    try {
      return make_plan_on_its_cut(r);
    } catch (const FieldError& e) {
      if (e.field() != "memory_limit_bytes") throw;
      over = std::current_exception();
      return std::nullopt;
    }
  };
  std::exception_ptr over, other_over;
  std::optional<Plan> by_device = attempt(request, over);
  PlanRequest other = request;
  other.layers_per_stage = alternative;
  std::optional<Plan> by_stage = attempt(other, other_over);
  if (by_device && by_stage)
    return by_stage->sim.makespan_us < by_device->sim.makespan_us ? std::move(*by_stage)
                                                                  : std::move(*by_device);
  if (by_device) return std::move(*by_device);
  if (by_stage) return std::move(*by_stage);
  std::rethrow_exception(over);
}

Plan make_plan_on_its_cut(const PlanRequest& request) {
  bool checked = true;
  Prepared prepared;
  PlannedSchedule planned = plan_schedule(request, true, checked, &prepared);
  // The returned order is the prepared one unchanged (with_backward_mode keeps a family's own P2
  // placement as generated): only the costs of the cut are compared.
  if (prepared.ready && prepared.returned && request.bpipe == BpipeMode::off &&
      planned.costs == prepared.costs) {
    // The family returned the candidate lowered while it was evaluated: the same graph lower()
    // makes, its metadata and order now set.
    TaskGraph graph = std::move(prepared.graph);
    graph.meta = std::move(planned.meta);
    graph.schedule = std::move(planned.schedule);
    Plan plan =
        simulate_lowered(std::move(graph), planned.costs, planned.bound, request.bpipe, false);
    plan.chosen = std::move(planned.chosen);
    return plan;
  }
  Plan plan =
      lower_and_simulate(std::move(planned.schedule), planned.costs, std::move(planned.meta),
                         planned.bound, request.bpipe, false, checked);
  plan.chosen = std::move(planned.chosen);
  return plan;
}

Plan make_plan_for_schedule_as_requested(const PlanRequest& request, const Schedule& schedule);

// Recompute::Method::automatic. For a fixed order (`chooses_order` false): no recomputation if
// the plan fits, else the fewest blocks per stage (the first N of each) with which it fits,
// tried from N = 1 up (the balanced cut moves with N, so a plan that fits at N need not fit at
// N + 1: no bisection), and every block once N reaches the most blocks a stage holds on the
// cuts a plan at N would be made on (`most_blocks`: there it is full recomputation's plan). A
// family that chooses its order from the costs
// (auto) can fit without recomputation by serialising its stages, so there every N from none to
// every block is planned and the fastest by the request's objective kept. Anything but the
// memory limit fails at once; when even full recomputation does not fit, its error is the one
// reported.
template <typename MakePlan, typename MostBlocks>
Plan with_least_recomputation(const PlanRequest& request, bool chooses_order, const MakePlan& make,
                              const MostBlocks& most_blocks) {
  if (request.recompute.method != Recompute::Method::automatic) return make(request);
  PlanRequest r = request;
  const auto attempt = [&](Recompute recompute) -> std::optional<Plan> {
    r.recompute = recompute;
    try {
      return make(r);
    } catch (const FieldError& e) {
      if (e.field() != "memory_limit_bytes") throw;
      return std::nullopt;
    }
  };
  std::optional<Plan> kept = attempt({});
  if (kept && !chooses_order) return std::move(*kept);
  std::optional<Plan> full = attempt({Recompute::Method::full, 0});
  if (!full) {
    if (kept) return std::move(*kept);
    r.recompute = {Recompute::Method::full, 0};
    return make(r);  // the memory limit's error
  }
  // The cut full recomputation planned: a family that chooses its cut per request (auto) may cut
  // the others differently, and counts above this cut's largest stage are not tried.
  const int most = most_blocks_per_stage(full->graph.meta.model, full->graph.meta.stage_layers);
  if (chooses_order) {
    const auto faster = [&](const Plan& a, const Plan& b) {
      const auto key = [&](const Plan& p) {
        return request.objective == Objective::steady
                   ? std::pair{p.sim.max_stage_span_us, p.sim.makespan_us}
                   : std::pair{p.sim.makespan_us, p.sim.max_stage_span_us};
      };
      return key(a) < key(b);
    };
    std::optional<Plan> best = std::move(kept);
    for (int n = 1; n < most; ++n) {
      std::optional<Plan> plan = attempt({Recompute::Method::block, n});
      if (plan && (!best || faster(*plan, *best))) best = std::move(plan);
    }
    return best && !faster(*full, *best) ? std::move(*best) : std::move(*full);
  }
  for (int n = 1;; ++n) {
    const Recompute first_n{Recompute::Method::block, n};
    if (n >= most_blocks(first_n)) return std::move(*full);
    if (std::optional<Plan> plan = attempt(first_n)) return std::move(*plan);
  }
}

// The most blocks a stage holds on the cuts a request with `recompute` is planned on: its
// --layers-per-stage, or the balanced cuts (the two of make_plan_as_requested where a device
// holds several stages); 0 where the model cannot be cut so (planning it says why).
int most_blocks_on_its_cuts(const PlanRequest& request, const Recompute& recompute,
                            const std::vector<std::vector<int>>& groups, int replicas) {
  if (!request.layers_per_stage.empty()) {
    return *std::max_element(request.layers_per_stage.begin(), request.layers_per_stage.end());
  }
  try {
    const auto [by_device, by_stage] =
        balanced_cuts(request, recompute, groups, model_stage_count(request, replicas));
    return std::max(*std::max_element(by_device.begin(), by_device.end()),
                    *std::max_element(by_stage.begin(), by_stage.end()));
  } catch (const Error&) {
    return 0;
  }
}

}  // namespace

Plan make_plan(const PlanRequest& request) {
  const ScheduleFamilyTraits& traits = find_schedule_family(request.schedule).traits();
  const bool chooses_order =
      request.recompute.method == Recompute::Method::automatic && traits.needs_costs;
  const auto groups = device_stages(model_stage_count(request, traits.replicas), request.devices,
                                    traits.folded_stages);
  return with_least_recomputation(
      request, chooses_order, make_plan_as_requested, [&](const Recompute& recompute) {
        return most_blocks_on_its_cuts(request, recompute, groups, traits.replicas);
      });
}

Plan make_plan_for_schedule(const PlanRequest& request, const Schedule& schedule) {
  const auto groups =
      schedule.replicas == 1 ? device_stages(schedule) : std::vector<std::vector<int>>{};
  return with_least_recomputation(
      request, false,
      [&](const PlanRequest& r) { return make_plan_for_schedule_as_requested(r, schedule); },
      [&](const Recompute& recompute) {
        return most_blocks_on_its_cuts(request, recompute, groups, schedule.replicas);
      });
}

namespace {

Plan make_plan_for_schedule_as_requested(const PlanRequest& request, const Schedule& schedule) {
  check_plan_request(request);
  check_schedule(schedule);
  if (schedule.devices != request.devices || schedule.microbatches != request.microbatches ||
      schedule.stage_count() != request.devices * request.chunks) {
    throw Error("schedule: " + std::to_string(schedule.devices) + " devices, " +
                std::to_string(schedule.stage_count()) + " stages, " +
                std::to_string(schedule.microbatches) + " micro-batches do not match " +
                field_name("devices") + " " + std::to_string(request.devices) + ", " +
                field_name("chunks") + " " + std::to_string(request.chunks) + ", " +
                field_name("microbatches") + " " + std::to_string(request.microbatches));
  }
  // BPipe's transfers are placed by the structure of pipeplan's own 1f1b (planner/plan/bpipe.h);
  // a given order runs as written.
  if (request.bpipe != BpipeMode::off) {
    throw FieldError("bpipe",
                     "a given schedule runs as written; BPipe transfers are planned for "
                     "pipeplan's own 1f1b (plan --schedule 1f1b --bpipe on)");
  }
  const StageInputs inputs = stage_inputs(
      request, request.devices * request.chunks, request.layers_per_stage, schedule.replicas,
      schedule.replicas == 1 ? device_stages(schedule) : std::vector<std::vector<int>>{});
  PlanMeta meta = make_meta(request, inputs.partition, inputs.costs, schedule);
  return lower_and_simulate(schedule, inputs.costs, std::move(meta), std::nullopt, BpipeMode::off,
                            true);
}

}  // namespace

}  // namespace pipeplan
