// `--schedule auto` across layouts (one chunk, a V, interleaved) and
// objectives (step time, largest stage span).
//
// Item 1: on every `compare` input here (the README's LLaMA-7B examples, GPT-1.5B with its
// heavier head, uniform stages, and emulated stages under a shared GPU's contention curves), auto's
// step time is at most every fixed family × backward mode's, both at the request's memory limit and
// at that family's own per-device peak. Item 2: with F = B = W, comm 0 and 2P·M_B, the span bubble
// is at most 1 %; with F:B:W = 2:2:1 and comm 5 % of F, at most 2 %; under either objective, for P
// = 4 to 32 and m = 3P.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "planner/plan/make_plan.h"
#include "profiles/gpu.h"
#include "schedules/family.h"
#include "tests/planner/plan_fixtures.h"
#include "tools/plan_options.h"

namespace pipeplan {
namespace {

using testing::kGiB;

// The request `pipeplan compare` builds for one row (tools/cmd_compare.cpp).
PlanRequest compare_row(PlanOptions o, const ScheduleFamily& family, BackwardMode mode) {
  const ChunkRule& chunks = family.traits().chunks;
  o.schedule = family.name();
  o.backward = std::string(to_string(mode));
  o.chunks =
      chunks.max > 1 ? std::clamp(std::max(o.chunks, chunks.preferred), chunks.min, chunks.max) : 1;
  return make_request(o);
}

double max_peak(const Plan& plan) {
  const auto peaks = plan.sim.peak_memory_bytes();
  return static_cast<double>(*std::max_element(peaks.begin(), peaks.end()));
}

// Every fixed row that fits against auto at the same limit, and auto at that row's own peak.
// Returns how many rows were compared.
int expect_auto_first(const PlanOptions& options, const std::string& label) {
  PlanOptions a = options;
  a.schedule = "auto";
  a.backward = "2bp";
  const Plan automatic = make_plan(make_request(a));
  // Stages sharing one GPU (contention curves) must fit its HBM together: auto is then measured
  // against the rows that do, and fits it itself where any row does.
  const double hbm =
      automatic.graph.meta.contention.empty() ? 0.0 : gpu_hbm_bytes(automatic.graph.meta.gpu);
  const auto fits_gpu = [&](const Plan& plan) {
    return hbm <= 0 || static_cast<double>(plan.sim.shared_gpu_memory_bytes()) <= hbm;
  };
  bool any_fits = false;
  int rows = 0;
  for (const ScheduleFamily* family : schedule_families()) {
    if (family->traits().needs_costs) continue;
    for (const BackwardMode mode : family->backward_modes()) {
      const std::string row = label + " " + family->name() + " " + std::string(to_string(mode));
      Plan fixed;
      try {
        fixed = make_plan(compare_row(options, *family, mode));
      } catch (const Error&) {
        continue;  // does not fit, or not this shape (interleaved: m a multiple of P)
      }
      ++rows;
      if (!fits_gpu(fixed)) continue;
      any_fits = true;
      EXPECT_LE(automatic.sim.makespan_us, fixed.sim.makespan_us + 1e-6) << row;
      // At the row's own memory: its largest per-device peak as every device's limit.
      PlanRequest tight = make_request(a);
      tight.memory_limit_bytes = max_peak(fixed);
      const Plan same_memory = make_plan(tight);
      EXPECT_LE(same_memory.sim.makespan_us, fixed.sim.makespan_us + 1e-6) << row << " (its peak)";
      EXPECT_LE(max_peak(same_memory), tight.memory_limit_bytes) << row;
    }
  }
  if (any_fits) {
    EXPECT_TRUE(fits_gpu(automatic)) << label << ": auto's stages exceed the GPU";
  }
  return rows;
}

PlanOptions model_options(const std::string& model, int stages, int microbatches, int seq) {
  PlanOptions o;
  o.model = model;
  o.gpu = "h100";
  o.stages = stages;
  o.microbatches = microbatches;
  o.seq = seq;
  return o;
}

TEST(AutoLayouts, FirstOnTheReadmesCompareExamples) {
  // pipeplan compare --model llama-7b --gpu h100 --stages 4 --microbatches 4|8 --seq 2048
  for (const int m : {4, 8}) {
    const PlanOptions o = model_options("llama-7b", 4, m, 2048);
    EXPECT_GE(expect_auto_first(o, "llama-7b m=" + std::to_string(m)), 17);
  }
  // Predicted (step ms, the optimizer step included): m = 8, interleaved 2bp-fill 348.9, zb-v
  // 351.5, auto 334.5 (a V); m = 4, interleaved 2bp-fill 203.4, auto 203.2.
  PlanOptions a = model_options("llama-7b", 4, 8, 2048);
  a.schedule = "auto";
  a.backward = "2bp";
  const Plan plan = make_plan(make_request(a));
  EXPECT_LT(plan.sim.makespan_us, 340e3);
  EXPECT_EQ(plan.graph.meta.chunks, 2);
  EXPECT_LE(plan.bound.makespan_us, plan.sim.makespan_us);
}

// Uneven stages: the embedding and the LM head make the first and last stages heavier (GPT-1.5B's
// 50k-token head, LLaMA-13B's at 8 stages), and a memory limit that some fixed rows break.
TEST(AutoLayouts, FirstOnUnevenStages) {
  EXPECT_GE(expect_auto_first(model_options("gpt-1.5b", 4, 8, 1024), "gpt-1.5b P=4"), 15);
  // At 50 GiB (47 GiB after the reserve) 14 of 20 rows break the limit; auto still beats the
  // rest: 663.9 ms against zb-h1's 727.4, the fastest that fits.
  PlanOptions tight = model_options("llama-13b", 8, 16, 2048);
  tight.memory = "50GiB";
  EXPECT_GE(expect_auto_first(tight, "llama-13b P=8 50GiB"), 5);
}

// A chunked fixed family takes the faster of two cuts, each device's stages balanced or each
// stage alone (make_plan); auto's V and interleaved layouts take both too. On the device-balanced
// cut alone auto took 229.6 ms where zb-v takes 221.5 (LLaMA-13B, P = 8, m = 1) and 34.8 where
// interleaved 2bp-fill takes 33.9 (GPT-1.5B, P = 8, m = 8), reporting a bound above both.
TEST(AutoLayouts, FirstWhereTheStageBalancedCutIsFaster) {
  EXPECT_GE(expect_auto_first(model_options("llama-13b", 8, 1, 2048), "llama-13b P=8 m=1"), 5);
  EXPECT_GE(expect_auto_first(model_options("gpt-1.5b", 8, 8, 1024), "gpt-1.5b P=8 m=8"), 15);
}

// Emulated stages sharing one GPU: the shipped calibrated SM-share profiles carry contention
// curves, which the compact evaluation leaves out; the simulator ranks the finalists, so auto
// still beats every fixed row that fits the GPU (it used to pick 1385.9 ms at P = 8, m = 24 on
// 16 SMs, where 1F1B-2bp takes 1334.7), and its stages fit the one GPU together (at m = 48 on 16
// SMs it chose a 2bp order whose stages took 176.38 GiB of the H200's 140.4, P = 4, and 188.38,
// P = 8).
TEST(AutoLayouts, FirstUnderASharedGpusContentionCurves) {
  for (const char* sm : {"sm16", "sm32"}) {
    for (const auto& [stages, microbatches] : {std::pair{8, 24}, std::pair{8, 16}, std::pair{4, 12},
                                               std::pair{4, 48}, std::pair{8, 48}}) {
      PlanOptions o;
      o.profile = std::string(PIPEPLAN_SOURCE_DIR) + "/profiles/h200-llama-7b-blocks8-" + sm +
                  ".calibrated.json";
      o.stages = stages;
      o.microbatches = microbatches;
      const std::string label =
          std::string(sm) + " P=" + std::to_string(stages) + " m=" + std::to_string(microbatches);
      EXPECT_GE(expect_auto_first(o, label), 5) << label;
    }
  }
}

// DualPipe's two copies of the model are one of auto's layouts: on 16 SMs, P = 4, m = 48, the
// dualpipe order (4043.6 ms, the stages 88.10 GiB of the GPU's 140.4) is faster than every one-copy
// order (auto had chosen interleaved 2bp-fill, 4462.1 ms); auto's plan then holds two copies,
// reports their own lower bound, and its stages fit the GPU together.
TEST(AutoLayouts, ChoosesDualPipesTwoCopiesWhereTheyAreFaster) {
  PlanOptions o;
  o.profile =
      std::string(PIPEPLAN_SOURCE_DIR) + "/profiles/h200-llama-7b-blocks8-sm16.calibrated.json";
  o.stages = 4;
  o.microbatches = 48;
  o.schedule = "dualpipe";
  o.backward = "2bp";
  const Plan dualpipe = make_plan(make_request(o));
  o.schedule = "auto";
  const Plan automatic = make_plan(make_request(o));
  EXPECT_EQ(automatic.graph.schedule.replicas, 2);
  EXPECT_TRUE(automatic.chosen.starts_with("two copies")) << automatic.chosen;
  EXPECT_LE(automatic.sim.makespan_us, dualpipe.sim.makespan_us * (1 + 1e-9));
  EXPECT_LE(automatic.bound.makespan_us, automatic.sim.makespan_us);
  EXPECT_DOUBLE_EQ(automatic.bound.makespan_us, dualpipe.bound.makespan_us);
  EXPECT_EQ(automatic.graph.meta.static_bytes, dualpipe.graph.meta.static_bytes);
  EXPECT_LE(static_cast<double>(automatic.sim.shared_gpu_memory_bytes()),
            gpu_hbm_bytes(automatic.graph.meta.gpu));
  // --auto-copies 1 keeps it to one copy (a plan PyTorch's CSV can take): the one-copy best.
  o.auto_copies = 1;
  const Plan one = make_plan(make_request(o));
  EXPECT_EQ(one.graph.schedule.replicas, 1);
  EXPECT_GT(one.sim.makespan_us, automatic.sim.makespan_us);
  EXPECT_LT(one.bound.makespan_us, one.sim.makespan_us);
  EXPECT_GT(one.bound.makespan_us, automatic.bound.makespan_us);
  // Where a one-copy order wins (uniform stages, 2:2:1), the bound is the one-copy layouts'.
  PlanOptions u;
  u.uniform = "2:2:1:0.1";
  u.stages = 4;
  u.microbatches = 12;
  u.schedule = "auto";
  u.backward = "2bp";
  const Plan one_copy = make_plan(make_request(u));
  EXPECT_EQ(one_copy.graph.schedule.replicas, 1);
  EXPECT_LE(one_copy.bound.makespan_us, one_copy.sim.makespan_us);
}

TEST(AutoLayouts, FirstOnUniformStages) {
  for (const char* times : {"1:1:1:0", "2:2:1:0.1"}) {
    PlanOptions o;
    o.uniform = times;
    o.uniform_mem = "1:-0.5:-0.5";
    o.stages = 4;
    o.microbatches = 12;
    o.memory = "8GiB";
    EXPECT_GE(expect_auto_first(o, times), 10) << times;
  }
}

struct SpanCase {
  double f, b, w, comm;
  double max_span_bubble;
};

Plan uniform_auto(int p, int m, const SpanCase& c, Objective objective) {
  testing::UniformPlan u{.devices = p,
                         .microbatches = m,
                         .schedule = "auto",
                         .backward = BackwardMode::twobp,
                         .f = c.f,
                         .b = c.b,
                         .w = c.w,
                         .comm = c.comm,
                         .memory_limit_bytes = 2.0 * p * kGiB};  // 2P·M_B, M_B = 1 GiB
  PlanRequest r = testing::uniform_request(u);
  r.objective = objective;
  return make_plan(r);
}

// Measured span bubbles (m = 3P, P = 4, 8, 16, 32): F = B = W: 0 under both objectives; 2:2:1 with
// comm 0.1: 0, 0, 0.9 %, 1.4 % (step) and 0, 0, 0.9 %, 1.4 % (steady).
TEST(AutoLayouts, SpanBubbleWithTwicePMbOfMemory) {
  const SpanCase cases[] = {{1, 1, 1, 0, 0.01}, {2, 2, 1, 0.1, 0.02}};
  for (const SpanCase& c : cases) {
    for (const int p : {4, 8, 16, 32}) {
      for (const Objective objective : {Objective::step, Objective::steady}) {
        const int m = 3 * p;
        const Plan plan = uniform_auto(p, m, c, objective);
        const std::string label = "F:B:W " + std::to_string(c.f) + ":" + std::to_string(c.b) + ":" +
                                  std::to_string(c.w) + " P=" + std::to_string(p) + " objective " +
                                  std::string(to_string(objective));
        EXPECT_LE(plan.sim.span_bubble_ratio, c.max_span_bubble) << label;
        for (const auto peak : plan.sim.peak_memory_bytes())
          EXPECT_LE(static_cast<double>(peak), 2.0 * p * kGiB) << label;
        if (objective == Objective::step) {
          // The step time meets its lower bound here, and auto went on improving the span.
          EXPECT_NEAR(plan.sim.makespan_us, plan.bound.makespan_us, 1e-6) << label;
        }
      }
    }
  }
}

// Each objective wins on its own figure: the step objective's step time is no longer than the
// steady one's, and the steady objective's span within 1 % of the step one's (both heuristics:
// the local search can land the step objective on a slightly shorter span).
TEST(AutoLayouts, EachObjectiveWinsOnItsOwnFigure) {
  for (const int p : {4, 8}) {
    for (const int m : {p, 2 * p, 3 * p}) {
      const SpanCase c{2, 2, 1, 0.1, 0};
      const Plan step = uniform_auto(p, m, c, Objective::step);
      const Plan steady = uniform_auto(p, m, c, Objective::steady);
      const std::string label = "P=" + std::to_string(p) + " m=" + std::to_string(m);
      EXPECT_LE(step.sim.makespan_us, steady.sim.makespan_us + 1e-6) << label;
      EXPECT_LE(steady.sim.max_stage_span_us, 1.01 * step.sim.max_stage_span_us) << label;
      EXPECT_GE(step.sim.makespan_us, step.bound.makespan_us - 1e-6) << label;
      EXPECT_GE(steady.sim.max_stage_span_us, steady.bound.stage_span_us - 1e-6) << label;
    }
  }
}

}  // namespace
}  // namespace pipeplan
