// `--schedule auto` and `plan --search` (targets on a 2-core machine, the planner's own
// time in-process): auto on uniform P = 8, m = 24 <= 0.5 ms and P = 32, m = 96 <= 4 ms (make_plan
// end to end: the search, then lowering, validation and simulation of the chosen plan); `plan
// --search` for llama-7b on 8 H100s with global batch 64 <= 200 ms. The phases alone show where
// the time goes. Run:
//   ./build/bench/bench_auto --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <chrono>

#include "bench/bench_main.h"
#include "planner/graph/evaluate.h"
#include "planner/graph/schedule_sim.h"
#include "planner/graph/simulator.h"
#include "planner/graph/validator.h"
#include "planner/search/auto_list.h"
#include "planner/search/auto_schedule.h"
#include "planner/search/search.h"
#include "profiles/analytic.h"
#include "profiles/gpu.h"

namespace pipeplan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Uniform paper costs (F=B=W=1 ms, comm 0.05 ms) with a memory limit of `mb_per_device` * M_B
// per device: 2P (Zero Bubble's ZB-2p setting) or P (1F1B's and ZB-H1's memory). As `pipeplan
// plan --uniform 1:1:1:0.05 --uniform-mem 1:-0.5:-0.5 --memory <2P|P>GiB --schedule auto` builds
// it: two blocks per device, so auto may cut each stage in two (a V, interleaved).
PlanRequest uniform_request(int devices, int microbatches, int mb_per_device) {
  const UniformCosts costs{1.0, 1.0, 1.0, 0.05, 1.0, -0.5, -0.5};
  PlanRequest r;
  r.profile = uniform_profile(costs, 2 * devices, 2);
  r.devices = devices;
  r.microbatches = microbatches;
  r.schedule = kAutoScheduleName;
  r.backward = BackwardMode::twobp;
  r.memory_limit_bytes = mb_per_device * kGiB;
  return r;
}

// The target inputs: (P, m, memory in M_B per device), at 2P and at P micro-batches' memory.
void target_args(benchmark::internal::Benchmark* b) {
  for (const auto& args :
       {std::vector<std::int64_t>{8, 24, 16}, {8, 24, 8}, {32, 96, 64}, {32, 96, 32}})
    b->Args(args);
  b->Unit(benchmark::kMillisecond);
}
void target_inputs(benchmark::internal::Benchmark* b) {
  target_args(b);
  b->UseRealTime();
}

// make_plan end to end, as `pipeplan plan --schedule auto` runs it and times it (planning_ms):
// the call alone, timed by hand; freeing the plan it returns is the caller's, after the clock.
void BM_AutoPlan(benchmark::State& state) {
  const PlanRequest r =
      uniform_request(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                      static_cast<int>(state.range(2)));
  double bubble = 0, chunks = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    const auto started = std::chrono::steady_clock::now();
    const Plan plan = make_plan(r);
    const std::chrono::duration<double> planning = std::chrono::steady_clock::now() - started;
    state.SetIterationTime(planning.count());
    bubble = plan.sim.span_bubble_ratio;
    chunks = plan.graph.meta.chunks;
    benchmark::DoNotOptimize(plan.sim.makespan_us);
  }
  state.counters["span_bubble_pct"] = bubble * 100;
  state.counters["chunks"] = chunks;
}

BENCHMARK(BM_AutoPlan)->Apply(target_args)->UseManualTime();

// The phases of BM_AutoPlan: the search alone (make_plan's family call), and the final lowering,
// validation and simulation of the plan it returns.
struct AutoInputs {
  AutoRequest request;
  PlanRequest plan;
};

AutoInputs auto_inputs(int devices, int microbatches, int mb_per_device) {
  AutoInputs in;
  in.plan = uniform_request(devices, microbatches, mb_per_device);
  // Uniform blocks with no embedding or head: every grouping of the stages cuts them alike.
  // With several copies, one copy's cut held that many times (as make_plan costs it).
  const auto cut = [plan = in.plan](int stages, const std::vector<int>& blocks,
                                    CutBalance /*balance*/, int replicas) {
    const Partition p =
        blocks.empty() ? partition_balanced(plan.profile.model, plan.profile, 1, stages / replicas)
                       : partition_fixed(plan.profile.model, blocks);
    std::vector<int> counts;
    for (const StageLayers& s : p.stages)
      counts.push_back(s.layer_count);
    const std::vector<StageCost> one =
        stage_costs(plan.profile.model, plan.profile, 1, p, plan.microbatches / replicas);
    std::vector<StageCost> costs;
    for (int copy = 0; copy < replicas; ++copy)
      costs.insert(costs.end(), one.begin(), one.end());
    return StageCut{counts, costs};
  };
  AutoRequest& r = in.request;
  r.devices = devices;
  r.microbatches = microbatches;
  r.costs = cut(devices, {}, CutBalance::mod_devices, 1).costs;
  for (const StageCost& c : r.costs)
    r.static_bytes.push_back(c.static_bytes);
  r.memory_limit_bytes.assign(static_cast<std::size_t>(devices), in.plan.memory_limit_bytes);
  r.link = in.plan.profile.p2p;
  r.p2_concat = in.plan.p2_concat;  // as make_plan hands it over
  r.cut = cut;
  return in;
}

void BM_AutoSearchOnly(benchmark::State& state) {
  const AutoInputs in =
      auto_inputs(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                  static_cast<int>(state.range(2)));
  int tried = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    const AutoResult a = make_auto_schedule(in.request);
    tried = a.variants_tried;
    benchmark::DoNotOptimize(a.makespan_us);
  }
  state.counters["candidates"] = tried;
}

BENCHMARK(BM_AutoSearchOnly)->Apply(target_inputs);

void BM_AutoFinalPlan(benchmark::State& state) {
  const AutoInputs in =
      auto_inputs(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                  static_cast<int>(state.range(2)));
  const AutoResult a = make_auto_schedule(in.request);
  const PlanMeta meta = make_plan(in.plan).graph.meta;
  std::size_t nodes = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    const TaskGraph graph = lower(a.schedule, a.costs, meta);
    const CheckedSimulation checked = validate_and_simulate(graph);
    if (checked.violation) state.SkipWithError(checked.violation->message.c_str());
    nodes = static_cast<std::size_t>(graph.node_count());
    benchmark::DoNotOptimize(checked.sim.makespan_us);
  }
  state.counters["nodes"] = static_cast<double>(nodes);
}

BENCHMARK(BM_AutoFinalPlan)
    ->Args({8, 24, 16})
    ->Args({32, 96, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The final phase's parts, one at a time on the P = 32 plan: lowering (and freeing the graph),
// the simulation with its step metrics, and the validator (which validate_and_simulate runs on
// its helper thread beside the simulation).
enum class FinalPart { lower, simulate, validate };

void BM_FinalPart(benchmark::State& state, FinalPart part) {
  const AutoInputs in = auto_inputs(32, 96, 64);
  const AutoResult a = make_auto_schedule(in.request);
  const PlanMeta meta = make_plan(in.plan).graph.meta;
  const TaskGraph lowered = lower(a.schedule, a.costs, meta);
  lowered.graph();        // the Boost.Graph view, built once as validate_and_simulate shares it
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    switch (part) {
      case FinalPart::lower:
        benchmark::DoNotOptimize(lower(a.schedule, a.costs, meta).node_count());
        break;
      case FinalPart::simulate:
        benchmark::DoNotOptimize(simulate(lowered).makespan_us);
        break;
      case FinalPart::validate:
        benchmark::DoNotOptimize(find_violation(lowered, true).has_value());
        break;
    }
  }
}

BENCHMARK_CAPTURE(BM_FinalPart, lower, FinalPart::lower)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_FinalPart, simulate, FinalPart::simulate)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_FinalPart, validate, FinalPart::validate)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One list-scheduler run and one compact evaluation of its order, on one chunk and on a V.
void BM_ListSchedule(benchmark::State& state) {
  const AutoInputs in =
      auto_inputs(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                  2 * static_cast<int>(state.range(0)));
  const bool v = state.range(2) != 0;
  const int p = in.request.devices;
  ListInputs li;
  li.devices = p;
  li.microbatches = in.request.microbatches;
  const StageCut cut =
      in.request.cut(v ? 2 * p : p, {}, v ? CutBalance::folded : CutBalance::mod_devices, 1);
  for (int s = 0; s < (v ? 2 * p : p); ++s)
    li.stage_device.push_back(!v ? s : (s < p ? s : 2 * p - 1 - s));
  li.costs = &cut.costs;
  li.link = in.request.link;
  li.static_bytes.assign(static_cast<std::size_t>(p), 0);
  li.memory_limit_bytes = in.request.memory_limit_bytes;
  PlanMeta meta;
  meta.devices = p;
  meta.microbatches = li.microbatches;
  meta.link = li.link;
  meta.static_bytes = li.static_bytes;
  meta.memory_limit_bytes = li.memory_limit_bytes;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    const Schedule s = list_schedule(li, {0, P2Fill::always, true}, li.microbatches);
    const ScheduleSim sim = simulate_schedule(s, cut.costs, meta);
    benchmark::DoNotOptimize(sim.makespan_us);
  }
}

BENCHMARK(BM_ListSchedule)
    ->Args({8, 24, 0})
    ->Args({8, 24, 1})
    ->Args({32, 96, 0})
    ->Args({32, 96, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The stage costs of one cut (P = 32's V: 64 stages of one block each, P2 group sizes up to
// m = 96), as make_plan computes them three times per auto plan (the request's cut, the cut into
// 2P stages, the chosen one).
void BM_StageCosts(benchmark::State& state) {
  const AutoInputs in = auto_inputs(32, 96, 64);
  const Profile& profile = in.plan.profile;
  const Partition partition = partition_balanced(profile.model, profile, 1, 64);
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    const std::vector<StageCost> costs = stage_costs(profile.model, profile, 1, partition, 96);
    benchmark::DoNotOptimize(costs.data());
  }
}

BENCHMARK(BM_StageCosts)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The balanced cut itself (P = 32's model of 64 blocks into 32 and into 64 stages), which
// make_plan computes for the request and for auto's two-chunk layouts.
void BM_PartitionBalanced(benchmark::State& state) {
  const AutoInputs in = auto_inputs(32, 96, 64);
  const Profile& profile = in.plan.profile;
  const auto stages = static_cast<int>(state.range(0));
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    const Partition p = partition_balanced(profile.model, profile, 1, stages);
    benchmark::DoNotOptimize(p.stages.data());
  }
}

BENCHMARK(BM_PartitionBalanced)->Arg(32)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();

// One fixed family's order (generated, backward mode applied), as auto's seeds are made.
// Registered from main() for every family in the registry (BM_Seed/<name>), which static
// registration fills before main runs.
void BM_Seed(benchmark::State& state, const ScheduleFamily* seed) {
  const ScheduleFamily& family = *seed;
  const int p = 32, m = 96;
  const int chunks = family.traits().chunks.preferred;
  const AutoInputs in = auto_inputs(p, m, 2 * p);
  const StageCut cut = in.request.cut(
      p * chunks, {}, family.traits().folded_stages ? CutBalance::folded : CutBalance::mod_devices,
      1);
  PlanMeta meta;
  meta.devices = p;
  meta.microbatches = m;
  meta.link = in.request.link;
  meta.static_bytes.assign(static_cast<std::size_t>(p), 0);
  meta.memory_limit_bytes.assign(static_cast<std::size_t>(p), 0.0);
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    ScheduleRequest request{p, chunks, m, family.backward_modes().back(), 0, nullptr};
    const Schedule s =
        with_backward_mode(family, family.generate(request), request, cut.costs, meta);
    benchmark::DoNotOptimize(s.per_device.size());
  }
}

void register_seed_benchmarks() {
  for (const ScheduleFamily* family : schedule_families()) {
    if (family->traits().needs_costs) continue;  // auto itself: BM_AutoPlan
    const std::string name = "BM_Seed/" + family->name();
    benchmark::RegisterBenchmark(name.c_str(), BM_Seed, family)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
}

// pipeplan plan --search --model llama-7b --gpu h100 --stages 8 --global-batch 64
void BM_SearchLlama7b(benchmark::State& state) {
  const ModelConfig model = resolve_model("llama-7b");
  const GpuSpec gpu = find_gpu("h100");
  SearchRequest s;
  s.base.gpu = gpu.name;
  s.base.peak_flops_per_device = gpu.peak_bf16_tflops * 1e12;
  s.base.devices = 8;
  s.base.memory_limit_bytes = gpu.hbm_bytes;
  s.global_batch = 64;
  s.mbs_candidates = {1, 2, 4, 8};
  s.profile_for = [&](int mbs) {
    AnalyticOptions a;
    a.micro_batch_sizes = {mbs};
    a.max_p2_concat = 64 / mbs;
    return analytic_profile(model, gpu, a);
  };
  s.base.profile = s.profile_for(1);
  int evaluated = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    const SearchResult r = search_plans(s);
    evaluated = r.evaluated;
    benchmark::DoNotOptimize(r.best_point.step_time_us);
  }
  state.counters["plans"] = evaluated;
}

BENCHMARK(BM_SearchLlama7b)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

}  // namespace
}  // namespace pipeplan

int main(int argc, char** argv) {
  pipeplan::register_seed_benchmarks();
  return pipeplan::bench::run_benchmarks(argc, argv);
}
