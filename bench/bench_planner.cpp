// Planner hot path: lower + validate + simulate a 1F1B schedule with 2BP backward, and each phase
// (with the plan file's writer and reader) from 10^4 to 10^6 nodes.
// Target: P = 32, m = 256 in <= 20 ms on a 2-core machine (validation and simulation
// on two threads, as make_plan runs them; the one-thread figure is measured beside it). Run:
//   ./build/bench/bench_planner --benchmark_repetitions=10 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <string>

#include "bench/bench_main.h"
#include "planner/graph/evaluate.h"
#include "planner/graph/schedule_sim.h"
#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"
#include "planner/graph/validator.h"
#include "profiles/analytic.h"
#include "profiles/partition.h"
#include "schedules/backward.h"
#include "schedules/family.h"

namespace pipeplan {
namespace {

struct Inputs {
  Schedule schedule;
  std::vector<StageCost> costs;
  PlanMeta meta;
};

Inputs make_inputs(int devices, int microbatches) {
  UniformCosts uniform{1.0, 1.0, 1.0, 0.05, 1.0, -0.5, -0.5};
  const Profile profile = uniform_profile(uniform, devices, 1);
  const Partition partition = partition_balanced(profile.model, profile, 1, devices);
  Inputs in;
  in.costs = stage_costs(profile.model, profile, 1, partition, microbatches);
  const Schedule fused = generate_schedule("1f1b", {devices, 1, microbatches});
  in.schedule = apply_backward_mode(fused, BackwardMode::twobp, 0);
  in.meta.model = profile.model;
  in.meta.devices = devices;
  in.meta.microbatches = microbatches;
  in.meta.seq = 1;
  in.meta.schedule = "1f1b";
  in.meta.backward = BackwardMode::twobp;
  in.meta.stage_layers = partition.stages;
  in.meta.memory_limit_bytes.assign(static_cast<std::size_t>(devices), 0.0);
  in.meta.static_bytes.assign(static_cast<std::size_t>(devices), 0);
  in.meta.link = profile.p2p;
  return in;
}

// As make_plan does it: validation and simulation concurrently on large graphs.
void BM_LowerValidateSimulate(benchmark::State& state) {
  const auto devices = static_cast<int>(state.range(0));
  const auto microbatches = static_cast<int>(state.range(1));
  const Inputs in = make_inputs(devices, microbatches);
  std::size_t nodes = 0;
  for (auto _ : state) {
    const TaskGraph graph = lower(in.schedule, in.costs, in.meta);
    const CheckedSimulation checked = validate_and_simulate(graph);
    if (checked.violation) state.SkipWithError(checked.violation->message.c_str());
    benchmark::DoNotOptimize(checked.sim.makespan_us);
    nodes = static_cast<std::size_t>(graph.node_count());
  }
  state.counters["nodes"] = static_cast<double>(nodes);
}

// The same on one thread: validate, then simulate.
void BM_LowerValidateSimulateOneThread(benchmark::State& state) {
  const auto devices = static_cast<int>(state.range(0));
  const auto microbatches = static_cast<int>(state.range(1));
  const Inputs in = make_inputs(devices, microbatches);
  for (auto _ : state) {
    const TaskGraph graph = lower(in.schedule, in.costs, in.meta);
    validate(graph);
    const SimResult sim = simulate(graph);
    benchmark::DoNotOptimize(sim.makespan_us);
  }
}

// The phases alone, at about 10^4, 10^5 and 10^6 task-graph nodes (1F1B-2bp): P = 16, m = 104;
// P = 32, m = 512; P = 128, m = 1280 (the pipeline grows with the plan), and at P = 32 alone
// with m = 52, 520 and 5200 (only the micro-batches grow). The per-node time ("s_per_node") of
// each phase across a series shows how it grows with nodes; the fixed-P series separates the
// node count from the pipeline's depth. Also the plan file's writer and reader.
constexpr std::array<std::array<std::int64_t, 2>, 6> kScaleSizes = {
    {{16, 104}, {32, 512}, {128, 1280}, {32, 52}, {32, 520}, {32, 5200}}};

void per_node(benchmark::State& state, const TaskGraph& graph) {
  state.counters["nodes"] = graph.node_count();
  state.counters["s_per_node"] =
      benchmark::Counter(graph.node_count(), benchmark::Counter::kIsIterationInvariantRate |
                                                 benchmark::Counter::kInvert);
}

Inputs scale_inputs(const benchmark::State& state) {
  return make_inputs(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
}

void BM_Lower(benchmark::State& state) {
  const Inputs in = scale_inputs(state);
  for (auto _ : state) {
    const TaskGraph graph = lower(in.schedule, in.costs, in.meta);
    benchmark::DoNotOptimize(graph.node_count());
  }
  per_node(state, lower(in.schedule, in.costs, in.meta));
}

void BM_Validate(benchmark::State& state) {
  const Inputs in = scale_inputs(state);
  const TaskGraph lowered = lower(in.schedule, in.costs, in.meta);
  for (auto _ : state) {
    state.PauseTiming();
    const TaskGraph graph = lowered;  // a fresh copy: no Boost.Graph view built yet
    state.ResumeTiming();
    validate(graph);
  }
  per_node(state, lowered);
}

void BM_Simulate(benchmark::State& state) {
  const Inputs in = scale_inputs(state);
  const TaskGraph graph = lower(in.schedule, in.costs, in.meta);
  validate(graph);  // builds the Boost.Graph view once
  for (auto _ : state) {
    const SimResult sim = simulate(graph);
    benchmark::DoNotOptimize(sim.makespan_us);
  }
  per_node(state, graph);
}

void BM_WritePlan(benchmark::State& state) {
  const Inputs in = scale_inputs(state);
  const TaskGraph graph = lower(in.schedule, in.costs, in.meta);
  std::size_t bytes = 0;
  for (auto _ : state) {
    const std::string text = plan_to_text(graph);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  per_node(state, graph);
  state.counters["bytes"] = static_cast<double>(bytes);
}

void BM_ReadPlan(benchmark::State& state) {
  const Inputs in = scale_inputs(state);
  const TaskGraph graph = lower(in.schedule, in.costs, in.meta);
  const std::string text = plan_to_text(graph);
  for (auto _ : state) {
    const TaskGraph read = plan_from_text(text, "plan.json");
    benchmark::DoNotOptimize(read.node_count());
  }
  per_node(state, graph);
}

void scale_sizes(benchmark::internal::Benchmark* b) {
  for (const auto& size : kScaleSizes)
    b->Args({size[0], size[1]});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

// The compact schedule simulation the planner's searches evaluate candidates with
// (planner/graph/schedule_sim.h): the same times without a task graph.
void BM_ScheduleSim(benchmark::State& state) {
  const Inputs in = make_inputs(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) {
    const ScheduleSim sim = simulate_schedule(in.schedule, in.costs, in.meta);
    benchmark::DoNotOptimize(sim.makespan_us);
  }
}

BENCHMARK(BM_ScheduleSim)
    ->Args({8, 24})
    ->Args({32, 96})
    ->Args({32, 256})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_LowerValidateSimulate)
    ->Args({8, 24})
    ->Args({32, 96})
    ->Args({8, 32})
    ->Args({32, 256})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_LowerValidateSimulateOneThread)
    ->Args({32, 256})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Lower)->Apply(scale_sizes);
BENCHMARK(BM_Validate)->Apply(scale_sizes);
BENCHMARK(BM_Simulate)->Apply(scale_sizes);
BENCHMARK(BM_WritePlan)->Apply(scale_sizes);
BENCHMARK(BM_ReadPlan)->Apply(scale_sizes);

}  // namespace
}  // namespace pipeplan

int main(int argc, char** argv) {
  return pipeplan::bench::run_benchmarks(argc, argv);
}
