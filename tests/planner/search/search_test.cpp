// `plan --search`: the best plan over mbs / schedule / backward / chunks / partition and the
// Pareto front of step time against peak memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "planner/base/error.h"
#include "planner/search/search.h"
#include "profiles/analytic.h"
#include "profiles/gpu.h"
#include "profiles/profile.h"
#include "tests/planner/plan_fixtures.h"
#include "tools/plan_options.h"

namespace pipeplan {
namespace {

SearchRequest uniform_search(int devices, int microbatches, double limit_gib) {
  testing::UniformPlan u;
  u.devices = devices;
  u.microbatches = microbatches;
  u.memory_limit_bytes = limit_gib * testing::kGiB;
  SearchRequest s;
  s.base = testing::uniform_request(u);
  return s;
}

// The request that plans front point `p` of a search on `base`.
PlanRequest point_request(const PlanRequest& base, const SearchPoint& p) {
  PlanRequest c = base;
  c.schedule = p.schedule;
  c.backward = p.backward;
  c.chunks = p.chunks;
  c.layers_per_stage = p.layers_per_stage;
  return c;
}

TEST(Search, BestIsNoWorseThanEveryFixedPlanAndFrontIsNonDominated) {
  const SearchRequest s = uniform_search(4, 12, 0);
  const SearchResult r = search_plans(s);
  EXPECT_GE(r.evaluated, 9);  // gpipe, 1f1b x 3 modes; zb-h1, zb-h2, auto (4 blocks: no shifts)
  for (const char* family : {"1f1b", "gpipe", "zb-h1", "zb-h2"}) {
    PlanRequest req = s.base;
    req.schedule = family;
    req.backward =
        std::string(family).starts_with("zb") ? BackwardMode::twobp : BackwardMode::fused;
    EXPECT_LE(r.best.sim.makespan_us, make_plan(req).sim.makespan_us + 1e-6) << family;
  }
  ASSERT_FALSE(r.pareto.empty());
  EXPECT_DOUBLE_EQ(r.pareto.front().step_time_us, r.best_point.step_time_us);
  for (std::size_t i = 1; i < r.pareto.size(); ++i) {
    EXPECT_GT(r.pareto[i].step_time_us, r.pareto[i - 1].step_time_us);
    EXPECT_LT(r.pareto[i].peak_memory_bytes, r.pareto[i - 1].peak_memory_bytes);
  }
  for (const SearchPoint& p : r.pareto)
    EXPECT_LE(p.bound_us, p.step_time_us + 1e-6);
  EXPECT_NE(format_pareto(r).find("Pareto front"), std::string::npos);
}

// Where a device holds several stages, make_plan's second balanced cut (the stages alone) is a
// candidate of its own: LLaMA-13B, interleaved V = 2 fused on 8 devices, where it is the faster
// (755.8 ms against the device-balanced 760.9), the best plan written is the best point.
TEST(Search, TheStageBalancedCutIsACandidateOfItsOwn) {
  AnalyticOptions analytic;
  analytic.seq = 2048;
  SearchRequest s;
  s.base.profile = analytic_profile(model_preset("llama-13b"), find_gpu("h100"), analytic);
  s.base.devices = 8;
  s.base.microbatches = 16;
  s.only_schedule = "interleaved";
  s.only_backward = BackwardMode::fused;
  const SearchResult r = search_plans(s);
  EXPECT_DOUBLE_EQ(r.best.sim.makespan_us, r.best_point.step_time_us);
  PlanRequest alone = s.base;
  alone.schedule = "interleaved";
  alone.chunks = 2;
  const std::vector<int> cut = stage_balanced_cut(alone);
  ASSERT_FALSE(cut.empty());
  EXPECT_TRUE(std::any_of(r.pareto.begin(), r.pareto.end(),
                          [&](const SearchPoint& p) { return p.layers_per_stage == cut; }));
}

// The front's columns line up whatever the schedules' names: "interleaved V=2" is wider than the
// column's usual 12 characters.
TEST(Search, TheFrontsColumnsLineUpForLongScheduleNames) {
  SearchResult r;
  SearchPoint wide;
  wide.schedule = "interleaved";
  wide.chunks = 2;
  wide.backward = BackwardMode::twobp;
  wide.step_time_us = 1000;
  SearchPoint narrow;
  narrow.schedule = "1f1b";
  narrow.backward = BackwardMode::fused;
  narrow.step_time_us = 2000;
  r.pareto = {wide, narrow};
  const std::string text = format_pareto(r);
  const auto header = text.find("backward");
  const auto row_1 = text.find("interleaved V=2");
  const auto row_2 = text.find(" 1f1b");
  ASSERT_NE(header, std::string::npos);
  ASSERT_NE(row_1, std::string::npos);
  ASSERT_NE(row_2, std::string::npos);
  const auto column = [&](std::size_t at) { return at - text.rfind('\n', at) - 1; };
  EXPECT_EQ(column(text.find("2bp", row_1)), column(header)) << text;
  EXPECT_EQ(column(text.find("fused", row_2)), column(header)) << text;
}

// --objective steady: the best plan and the front are by the largest stage span, which the best
// of the step objective can only match or exceed.
TEST(Search, TheSteadyObjectiveRanksByTheLargestStageSpan) {
  SearchRequest s = uniform_search(4, 12, 0);
  const SearchResult by_step = search_plans(s);
  s.base.objective = Objective::steady;
  const SearchResult r = search_plans(s);
  EXPECT_EQ(r.objective, Objective::steady);
  ASSERT_FALSE(r.pareto.empty());
  EXPECT_DOUBLE_EQ(r.pareto.front().span_us, r.best_point.span_us);
  EXPECT_LE(r.best_point.span_us, by_step.best_point.span_us + 1e-6);
  EXPECT_DOUBLE_EQ(r.best.sim.max_stage_span_us, r.best_point.span_us);
  for (std::size_t i = 1; i < r.pareto.size(); ++i) {
    EXPECT_GT(r.pareto[i].span_us, r.pareto[i - 1].span_us);
    EXPECT_LT(r.pareto[i].peak_memory_bytes, r.pareto[i - 1].peak_memory_bytes);
  }
  EXPECT_NE(format_pareto(r).find("Pareto front (largest stage span vs peak memory)"),
            std::string::npos);
  // Each point's span is what the simulator gives its plan.
  for (const SearchPoint& p : by_step.pareto) {
    EXPECT_GT(p.span_us, 0);
    EXPECT_LE(p.span_us, p.step_time_us + 1e-6);
  }
}

// Times a few ulps apart are one time: the lighter point is the better and the heavier one is
// off the front, whichever is the faster in its last bits (the best point is the front's first).
TEST(Search, TimesWithinTheTieToleranceRankByMemory) {
  const auto point = [](const char* schedule, double span_us, std::int64_t peak) {
    SearchPoint p;
    p.schedule = schedule;
    p.span_us = span_us;
    p.step_time_us = 2 * span_us;
    p.peak_memory_bytes = peak;
    return p;
  };
  const double t = 42147.781729508914;
  const std::vector<SearchPoint> points = {
      point("auto", t, 6 * (1LL << 30)), point("looped-bfs", t - 3.5e-11, 7 * (1LL << 30)),
      point("zb-v", t + 1, 5 * (1LL << 30)),
      point("1f1b", t + 1 - 4e-11, 5 * (1LL << 30)),  // the same as zb-v: one of them
  };
  const std::vector<std::size_t> front = pareto_order(points, Objective::steady);
  ASSERT_EQ(front.size(), 2U);
  EXPECT_EQ(points[front[0]].schedule, "auto");
  EXPECT_EQ(points[front[1]].peak_memory_bytes, 5 * (1LL << 30));
  // Under the step objective the same points rank by their step times alike.
  const std::vector<std::size_t> by_step = pareto_order(points, Objective::step);
  ASSERT_EQ(by_step.size(), 2U);
  EXPECT_EQ(points[by_step[0]].schedule, "auto");
}

// The same from the command line's options: GPT-1.5B on 8 H100s, m = 4, mbs 2, steady, where
// looped-bfs (6.88 GiB) and auto (6.25 GiB) have one span to the last bits: the front's first
// row is the best plan written, the lighter.
TEST(Search, TheFrontsFirstRowIsTheBestPlan) {
  PlanOptions o;
  o.model = "gpt-1.5b";
  o.gpu = "h100";
  o.stages = 8;
  o.microbatches = 4;
  o.mbs = 2;
  o.memory = "0";
  o.objective = "steady";
  const SearchResult r = search_plans(make_search_request(o, 0, "", "--search-mbs"));
  ASSERT_FALSE(r.pareto.empty());
  const SearchPoint& top = r.pareto.front();
  EXPECT_EQ(top.schedule, r.best_point.schedule);
  EXPECT_EQ(top.schedule, r.best.graph.meta.schedule);
  EXPECT_EQ(top.peak_memory_bytes, r.best_point.peak_memory_bytes);
  EXPECT_EQ(top.peak_memory_bytes, r.best.sim.largest_peak_memory_bytes());
  for (const SearchPoint& p : r.pareto) {
    EXPECT_FALSE(p.span_us < top.span_us + 1e-9 && p.peak_memory_bytes > top.peak_memory_bytes)
        << p.schedule;
  }
  for (std::size_t i = 1; i < r.pareto.size(); ++i) {
    EXPECT_GT(r.pareto[i].span_us, r.pareto[i - 1].span_us + 1e-9);
    EXPECT_LT(r.pareto[i].peak_memory_bytes, r.pareto[i - 1].peak_memory_bytes);
  }
}

// Stages sharing one GPU (a profile's contention curves): the candidates are ranked by the
// simulator that times the plan, so the best point's step time is the returned plan's.
TEST(Search, UnderContentionCurvesTheBestPointIsTheSimulatedPlan) {
  SearchRequest s = uniform_search(4, 8, 0);
  s.base.profile.contention.slowdown = {1.0, 1.4, 1.8, 2.2};
  const SearchResult r = search_plans(s);
  EXPECT_DOUBLE_EQ(r.best_point.step_time_us, r.best.sim.makespan_us);
  for (const SearchPoint& p : r.pareto) {
    EXPECT_DOUBLE_EQ(p.step_time_us, make_plan(point_request(s.base, p)).sim.makespan_us)
        << p.schedule;
  }
}

// Stages sharing one GPU: a point's memory is what that GPU holds, the stages' peaks summed (as
// compare's "peak mem sum"), and a point whose sum is over the GPU's HBM is infeasible (at m = 48
// on 16 SMs, zb-h1's 42.10 GiB summed stood on the front beside 1F1B-2bp plans of 176 GiB).
TEST(Search, OnASharedGpuMemoryIsTheStagesSumWithinItsHbm) {
  SearchRequest s;
  s.base.profile = load_profile(std::string(PIPEPLAN_SOURCE_DIR) +
                                "/profiles/h200-llama-7b-blocks8-sm16.calibrated.json");
  s.base.devices = 4;
  s.base.microbatches = 48;
  s.base.memory_limit_bytes = 0;
  const SearchResult r = search_plans(s);
  EXPECT_TRUE(r.shared_gpu);
  EXPECT_GT(r.infeasible, 0);
  ASSERT_FALSE(r.pareto.empty());
  const double hbm = gpu_hbm_bytes("h200");
  for (const SearchPoint& p : r.pareto) {
    const Plan plan = make_plan(point_request(s.base, p));
    EXPECT_EQ(p.peak_memory_bytes, plan.sim.shared_gpu_memory_bytes()) << p.schedule;
    EXPECT_LE(static_cast<double>(p.peak_memory_bytes), hbm) << p.schedule;
  }
  EXPECT_NE(format_pareto(r).find("sum GiB"), std::string::npos);
}

// --p2-concat bounds the families that leave p2 to --backward; one that places each p2 itself
// (`plan` refuses the flag for it) is the plan made without it, its bound included.
TEST(Search, AFamilyThatPlacesP2ItselfIgnoresP2Concat) {
  SearchRequest s = uniform_search(4, 12, 0);
  s.base.p2_concat = 2;
  s.only_schedule = "zb-h1";
  const SearchResult r = search_plans(s);
  ASSERT_FALSE(r.pareto.empty());
  for (const SearchPoint& p : r.pareto) {
    PlanRequest c = point_request(s.base, p);
    c.p2_concat = 0;
    const Plan plan = make_plan(c);
    EXPECT_DOUBLE_EQ(p.bound_us, plan.bound.makespan_us);
    EXPECT_EQ(r.best.graph.meta.p2_concat, 0);
  }
}

// The same from the command line's options, without --global-batch: the profile the search plans
// on has every p2 group size, so --p2-concat moves no bound of zb-v (5.4 % against 7.6 % before).
TEST(Search, P2ConcatMovesNoBoundOfAFamilyThatPlacesP2Itself) {
  PlanOptions o;
  o.model = "gpt-1.5b";
  o.gpu = "h100";
  o.stages = 4;
  o.microbatches = 8;
  PlanOptions concat = o;
  concat.p2_concat = 2;
  SearchRequest plain = make_search_request(o, 0, "", "--mbs-list");
  SearchRequest grouped = make_search_request(concat, 0, "", "--mbs-list");
  EXPECT_EQ(grouped.base.p2_concat, 2);
  plain.only_schedule = grouped.only_schedule = "zb-v";
  const SearchResult a = search_plans(plain);
  const SearchResult b = search_plans(grouped);
  ASSERT_FALSE(a.pareto.empty());
  ASSERT_EQ(a.pareto.size(), b.pareto.size());
  for (std::size_t i = 0; i < a.pareto.size(); ++i) {
    EXPECT_DOUBLE_EQ(a.pareto[i].bound_us, b.pareto[i].bound_us) << i;
    EXPECT_DOUBLE_EQ(a.pareto[i].step_time_us, b.pareto[i].step_time_us) << i;
  }
}

TEST(Search, MemoryLimitTrimsTheCandidates) {
  const SearchResult loose = search_plans(uniform_search(4, 8, 0));
  const SearchResult tight = search_plans(uniform_search(4, 8, 4.5));
  EXPECT_GT(tight.infeasible, loose.infeasible);
  EXPECT_LE(static_cast<double>(tight.best_point.peak_memory_bytes), 4.5 * testing::kGiB);
}

TEST(Search, GlobalBatchSetsMicroBatchesPerSize) {
  const ModelConfig model = resolve_model("gpt-1.5b");
  const GpuSpec gpu = find_gpu("h100");
  SearchRequest s;
  s.base.profile = analytic_profile(model, gpu, AnalyticOptions{});
  s.base.gpu = gpu.name;
  s.base.devices = 4;
  s.base.memory_limit_bytes = gpu.hbm_bytes;
  s.global_batch = 16;
  s.mbs_candidates = {1, 2, 3, 4};
  s.shift_partition = false;
  s.profile_for = [&](int mbs) {
    AnalyticOptions a;
    a.micro_batch_sizes = {mbs};
    a.max_p2_concat = 16;
    return analytic_profile(model, gpu, a);
  };
  const SearchResult r = search_plans(s);
  EXPECT_EQ(r.best_point.mbs * r.best_point.microbatches, 16);
  for (const SearchPoint& p : r.pareto)
    EXPECT_EQ(p.mbs * p.microbatches, 16);
  s.mbs_candidates = {3};
  EXPECT_THROW(search_plans(s), Error);
}

TEST(Search, AGivenFamilyAndModeKeepTheSearchToThem) {
  SearchRequest s = uniform_search(4, 12, 0);
  s.only_schedule = "gpipe";
  s.only_backward = BackwardMode::twobp;
  const SearchResult r = search_plans(s);
  EXPECT_GE(r.evaluated, 1);
  ASSERT_FALSE(r.pareto.empty());
  for (const SearchPoint& p : r.pareto) {
    EXPECT_EQ(p.schedule, "gpipe");
    EXPECT_EQ(p.backward, BackwardMode::twobp);
  }
  EXPECT_EQ(r.best.graph.meta.schedule, "gpipe");
  s.only_schedule.clear();
  s.only_backward = BackwardMode::fused;
  for (const SearchPoint& p : search_plans(s).pareto)
    EXPECT_EQ(p.backward, BackwardMode::fused) << p.schedule;
}

}  // namespace
}  // namespace pipeplan
