// `--schedule auto` and `plan --search` (issue 4 targets on a 2-core machine): auto at P=8, m=32
// <= 1 s; P=32, m=128 <= 10 s; the full search for llama-7b on 8 H100s <= 30 s. Run:
//   ./build/bench/bench_auto --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include "bench/bench_main.h"
#include "planner/search/auto_schedule.h"
#include "planner/search/search.h"
#include "profiles/analytic.h"
#include "profiles/gpu.h"

namespace pipeplan {
namespace {

// Uniform paper costs (F=B=W=1 ms, comm 0.05 ms) with a memory limit of `mb_per_device` * M_B
// per device: 2P (Zero Bubble's ZB-2p setting; auto's best candidate meets the lower bound, so
// the local search is skipped) or P (1F1B's and ZB-H1's memory; the local search runs).
PlanRequest uniform_request(int devices, int microbatches, int mb_per_device) {
  const UniformCosts costs{1.0, 1.0, 1.0, 0.05, 1.0, -0.5, -0.5};
  PlanRequest r;
  r.profile = uniform_profile(costs, devices, 1);
  r.devices = devices;
  r.microbatches = microbatches;
  r.schedule = kAutoScheduleName;
  r.backward = BackwardMode::twobp;
  r.memory_limit_bytes = mb_per_device * 1024.0 * 1024.0 * 1024.0;
  return r;
}

void BM_AutoPlan(benchmark::State& state) {
  const PlanRequest r =
      uniform_request(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                      static_cast<int>(state.range(2)));
  double bubble = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    const Plan plan = make_plan(r);
    bubble = plan.sim.span_bubble_ratio;
    benchmark::DoNotOptimize(plan.sim.makespan_us);
  }
  state.counters["span_bubble_pct"] = bubble * 100;
}

BENCHMARK(BM_AutoPlan)
    ->Args({8, 32, 16})
    ->Args({32, 128, 64})
    ->Args({8, 32, 8})
    ->Args({32, 128, 32})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

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

BENCHMARK(BM_SearchLlama7b)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

}  // namespace
}  // namespace pipeplan

int main(int argc, char** argv) {
  return pipeplan::bench::run_benchmarks(argc, argv);
}
