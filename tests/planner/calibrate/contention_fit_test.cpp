// The contention fit recovers the model that made a trace: the simulator predicts a plan's step
// under known slowdowns, and that prediction stands for a measurement of the same plan made
// without them.
#include "planner/calibrate/contention_fit.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "planner/base/error.h"
#include "planner/graph/simulator.h"
#include "planner/plan/make_plan.h"
#include "profiles/profile.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

const std::vector<double> kTruth = {1.1, 1.2, 1.3, 1.45};
const CopySlowdown kCopy{1.3, 6.0};

// The shipped LLaMA-7B profile on 4 devices, m = 8, 2bp.
Plan shipped_plan(const std::string& schedule = "1f1b", int chunks = 1) {
  PlanRequest r;
  r.profile =
      load_profile(std::string(PIPEPLAN_SOURCE_DIR) + "/profiles/h100-sxm-llama-7b.analytic.json");
  r.gpu = "h100-sxm";
  r.devices = 4;
  r.chunks = chunks;
  r.microbatches = 8;
  r.schedule = schedule;
  r.backward = BackwardMode::twobp;
  return make_plan(r);
}

// The plan, "measured" as the simulator predicts it under `truth`.
MeasuredRun measured_under(const Plan& plan, const Contention& truth) {
  TaskGraph made = plan.graph;
  made.meta.contention = truth;
  return {"run", plan.graph, simulate(made).times};
}

void expect_curve_near(const std::vector<double>& got, const std::vector<double>& want,
                       double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < got.size(); ++k)
    EXPECT_NEAR(got[k], want[k], tolerance) << "level " << k + 1;
}

class ContentionFitTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { plan_ = new Plan(shipped_plan()); }
  static void TearDownTestSuite() {
    delete plan_;
    plan_ = nullptr;
  }
  static Plan* plan_;
};
Plan* ContentionFitTest::plan_ = nullptr;

TEST_F(ContentionFitTest, RecoversTheSlowdownsAndCopyFactorsThatMadeTheTrace) {
  Contention truth;
  truth.slowdown = kTruth;
  truth.copy = kCopy;
  const MeasuredRun run = measured_under(*plan_, truth);
  const ContentionFit fit = fit_contention({run}, Contention{}, ContentionFitOptions{});
  expect_curve_near(fit.contention.slowdown, kTruth, 2e-3);
  for (const auto& [op, curve] : fit.contention.by_op) {
    SCOPED_TRACE(op);
    expect_curve_near(curve, kTruth, 2e-3);
  }
  ASSERT_TRUE(fit.copy_fitted);
  EXPECT_NEAR(fit.contention.copy->sender_idle, kCopy.sender_idle, 2e-3 * kCopy.sender_idle);
  EXPECT_NEAR(fit.contention.copy->sender_computing, kCopy.sender_computing,
              2e-3 * kCopy.sender_computing);
  EXPECT_FALSE(fit.contention.sustained.has_value());

  ASSERT_EQ(fit.runs.size(), 1U);
  const RunFitReport& r = fit.runs[0];
  EXPECT_GT(r.ops, 0);
  EXPECT_GT(r.op_error_before, 0.05);
  EXPECT_LT(r.op_error_after, 1e-3);
  EXPECT_LT(r.op_error_after, r.op_error_before);
  EXPECT_LT(r.copy_error_after, r.copy_error_before);
  // The simulator, run on the recorded plan with the fitted model, predicts the measured step.
  EXPECT_GT(r.measured_makespan_us / r.predicted_before_us - 1, 0.05);
  EXPECT_NEAR(r.predicted_after_us / r.measured_makespan_us, 1.0, 2e-3);
}

TEST_F(ContentionFitTest, CopyOnlyKeepsTheGivenCurves) {
  Contention truth;
  truth.slowdown = kTruth;
  truth.copy = kCopy;
  const MeasuredRun run = measured_under(*plan_, truth);
  Contention given;
  given.slowdown = {1.5};
  given.source = "given";
  ContentionFitOptions options;
  options.copy_only = true;
  const ContentionFit fit = fit_contention({run}, given, options);
  EXPECT_EQ(fit.contention.slowdown, std::vector<double>{1.5});
  ASSERT_TRUE(fit.contention.copy.has_value());
  EXPECT_NEAR(fit.contention.copy->sender_computing, 6.0, 0.012);
  // Without curves to keep there is nothing to fit the copies beside.
  EXPECT_THROW(fit_contention({run}, Contention{}, options), Error);
}

TEST_F(ContentionFitTest, SustainedFitRecoversTheTermAndTheCurves) {
  Contention truth;
  truth.slowdown = {1.0, 1.05, 1.1, 1.15};
  truth.sustained = SustainedLoad{0.6, 20000.0};
  const MeasuredRun run = measured_under(*plan_, truth);
  ContentionFitOptions options;
  options.sustained = true;
  int lines = 0;
  const ContentionFit fit =
      fit_contention({run}, Contention{}, options, [&](const std::string&) { ++lines; });
  EXPECT_EQ(lines, static_cast<int>(options.time_constants_us.size()));
  ASSERT_TRUE(fit.contention.sustained.has_value());
  EXPECT_EQ(*fit.contention.sustained, *truth.sustained);
  expect_curve_near(fit.contention.slowdown, truth.slowdown, 2e-3);
  EXPECT_NEAR(fit.runs[0].predicted_after_us / fit.runs[0].measured_makespan_us, 1.0, 2e-3);

  // The term fixed: kept as given; the true term gives the true curves back.
  options.min_factor = options.max_factor = 0.6;
  options.time_constants_us = {20000.0};
  const ContentionFit fixed = fit_contention({run}, Contention{}, options);
  EXPECT_EQ(*fixed.contention.sustained, (SustainedLoad{0.6, 20000.0}));
  EXPECT_TRUE(fixed.sustained_fixed);
  EXPECT_FALSE(fit.sustained_fixed);
  expect_curve_near(fixed.contention.slowdown, truth.slowdown, 2e-3);
  options.min_factor = options.max_factor = 1.2;
  options.time_constants_us = {50000.0};
  EXPECT_EQ(*fit_contention({run}, Contention{}, options).contention.sustained,
            (SustainedLoad{1.2, 50000.0}));

  // Without the term the same trace is predicted worse: the model that made it is out of reach.
  const ContentionFit plain = fit_contention({run}, Contention{}, ContentionFitOptions{});
  EXPECT_GT(plain.runs[0].op_error_after, fit.runs[0].op_error_after);
  EXPECT_GT(std::abs(plain.runs[0].predicted_after_us / plain.runs[0].measured_makespan_us - 1),
            std::abs(fit.runs[0].predicted_after_us / fit.runs[0].measured_makespan_us - 1));
}

// A profile that measured its sustained-load term (profile --sustain-seconds) keeps it through a
// plain fit: the curves are fitted under it, and they are the true ones.
TEST_F(ContentionFitTest, APlainFitKeepsTheProfilesSustainedTermAndFitsTheCurvesUnderIt) {
  Contention truth;
  truth.slowdown = {1.0, 1.05, 1.1, 1.15};
  truth.sustained = SustainedLoad{0.6, 20000.0};
  const MeasuredRun run = measured_under(*plan_, truth);
  Contention given;
  given.slowdown = {1.5, 1.5, 1.5, 1.5};
  given.sustained = truth.sustained;
  const ContentionFit fit = fit_contention({run}, given, ContentionFitOptions{});
  EXPECT_TRUE(fit.sustained_kept);
  ASSERT_TRUE(fit.contention.sustained.has_value());
  EXPECT_EQ(*fit.contention.sustained, *truth.sustained);
  expect_curve_near(fit.contention.slowdown, truth.slowdown, 2e-3);
  EXPECT_NEAR(fit.runs[0].predicted_after_us / fit.runs[0].measured_makespan_us, 1.0, 2e-3);

  // A profile without the term: none is invented, and the curves absorb what they can.
  const ContentionFit plain = fit_contention({run}, Contention{}, ContentionFitOptions{});
  EXPECT_FALSE(plain.sustained_kept);
  EXPECT_FALSE(plain.contention.sustained.has_value());
  EXPECT_GT(plain.runs[0].op_error_after, fit.runs[0].op_error_after);
}

TEST_F(ContentionFitTest, ARunWithoutContentionGivesFactorsOfOne) {
  const MeasuredRun run = measured_under(*plan_, Contention{});
  const ContentionFit fit = fit_contention({run}, Contention{}, ContentionFitOptions{});
  expect_curve_near(fit.contention.slowdown, {1, 1, 1, 1}, 1e-6);
  EXPECT_NEAR(fit.runs[0].predicted_after_us, fit.runs[0].measured_makespan_us, 1e-3);
}

TEST_F(ContentionFitTest, TooFewTransfersLeaveTheCopyFactorsOut) {
  const MeasuredRun run = measured_under(*plan_, Contention{});
  ContentionFitOptions options;
  options.min_ops = 100000;
  const ContentionFit fit = fit_contention({run}, Contention{}, options);
  EXPECT_FALSE(fit.copy_fitted);
  EXPECT_FALSE(fit.copy_kept);
  EXPECT_FALSE(fit.contention.copy.has_value());
  EXPECT_TRUE(fit.contention.by_op.empty());
}

// Copies too few to fit leave the profile's copy factors as they were, with the curves or the
// sustained term fitted beside them, and the step after the fit is simulated with them.
TEST_F(ContentionFitTest, TooFewTransfersKeepTheProfilesCopyFactors) {
  Contention truth;
  truth.slowdown = kTruth;
  truth.copy = kCopy;
  const MeasuredRun run = measured_under(*plan_, truth);
  Contention given;
  given.slowdown = {1.5};
  given.copy = kCopy;
  ContentionFitOptions options;
  options.min_ops = 100000;
  for (const bool sustained : {false, true}) {
    SCOPED_TRACE(sustained ? "sustained" : "plain");
    options.sustained = sustained;
    options.time_constants_us = {20000.0};
    const ContentionFit fit = fit_contention({run}, given, options);
    EXPECT_FALSE(fit.copy_fitted);
    EXPECT_TRUE(fit.copy_kept);
    ASSERT_TRUE(fit.contention.copy.has_value());
    EXPECT_EQ(*fit.contention.copy, kCopy);
    EXPECT_LT(fit.runs.at(0).copy_error_after, 1e-9);
  }
  // Copy factors outside what a profile holds are no fit either: the given ones stay.
  Contention slow_copies;
  slow_copies.slowdown = {1, 1, 1, 1};
  slow_copies.copy = CopySlowdown{150, 300};
  const ContentionFit outside =
      fit_contention({measured_under(*plan_, slow_copies)}, given, ContentionFitOptions{});
  EXPECT_FALSE(outside.copy_note.empty());
  EXPECT_TRUE(outside.copy_kept);
  EXPECT_EQ(outside.contention.copy, given.copy);
}

// A fit writes slowdowns and copy factors from 0.01 to 100 (profiles/contention.h holds (0, 100],
// four decimals): copy factors outside are left out with the reason (with copy_only, refused), and
// curves outside refused, so that no fit writes a profile its reader refuses.
TEST_F(ContentionFitTest, FactorsAProfileCannotHoldAreLeftOutOrRefused) {
  Contention slow_copies;
  slow_copies.slowdown = {1, 1, 1, 1};
  slow_copies.copy = CopySlowdown{150, 300};
  const MeasuredRun slow_run = measured_under(*plan_, slow_copies);
  const ContentionFit fit = fit_contention({slow_run}, Contention{}, ContentionFitOptions{});
  EXPECT_FALSE(fit.copy_fitted);
  EXPECT_FALSE(fit.contention.copy.has_value());
  EXPECT_EQ(fit.copy_note.find(
                "copy factors 150 (sender idle) and 300 (sender computing): outside 0.01 to 100"),
            0U)
      << fit.copy_note;
  // --copy-only has nothing else to write: the same is an error, the given curves not rewritten.
  ContentionFitOptions copy_only;
  copy_only.copy_only = true;
  Contention given;
  given.slowdown = {1.5};
  std::string what = testing::error_of([&] { fit_contention({slow_run}, given, copy_only); });
  EXPECT_EQ(what.rfind("contention.copy: copy factors 150 (sender idle)", 0), 0U) << what;
  // Copies far faster than the link says are as far off.
  Contention fast_copies = slow_copies;
  fast_copies.copy = CopySlowdown{0.001, 0.002};
  what = testing::error_of(
      [&] { fit_contention({measured_under(*plan_, fast_copies)}, given, copy_only); });
  EXPECT_NE(what.find("outside 0.01 to 100"), std::string::npos) << what;

  Contention slow_ops;
  slow_ops.slowdown = {150, 150, 150, 150};
  what = testing::error_of([&] {
    fit_contention({measured_under(*plan_, slow_ops)}, Contention{}, ContentionFitOptions{});
  });
  EXPECT_EQ(what.rfind("contention.slowdown: the fit gives 150 with 1 ops at once, outside 0.01 "
                       "to 100",
                       0),
            0U)
      << what;
  // Ops 30000 times faster than profiled: a slowdown that four decimals would store as 0.
  Contention fast_ops;
  fast_ops.slowdown = {1.0 / 30000, 1.0 / 30000, 1.0 / 30000, 1.0 / 30000};
  what = testing::error_of([&] {
    fit_contention({measured_under(*plan_, fast_ops)}, Contention{}, ContentionFitOptions{});
  });
  EXPECT_EQ(what.rfind("contention.slowdown: the fit gives 0 with 1 ops at once, outside", 0), 0U)
      << what;
}

// A profile whose sustained term has no curves is of separate GPUs, each with its own load: a
// plain fit would keep that term under curves of one shared GPU. Refused, naming the way out.
TEST_F(ContentionFitTest, APlainFitRefusesASeparateGpusSustainedTerm) {
  const MeasuredRun run = measured_under(*plan_, Contention{});
  Contention separate;
  separate.sustained = SustainedLoad{0.12, 40000.0};
  const std::string what =
      testing::error_of([&] { fit_contention({run}, separate, ContentionFitOptions{}); });
  EXPECT_EQ(what.rfind("contention.sustained: the profile's sustained load is of separate GPUs", 0),
            0U)
      << what;
  EXPECT_NE(what.find("--sustained"), std::string::npos) << what;
  ContentionFitOptions options;
  options.sustained = true;
  options.min_factor = options.max_factor = 0.1;
  options.time_constants_us = {40000.0};
  EXPECT_NO_THROW(fit_contention({run}, separate, options));
}

// "Before" is the model the run was planned with: a run measured under exactly that model has no
// error before, whatever the fit then gives.
TEST_F(ContentionFitTest, TheErrorBeforeIsThePlansOwnModels) {
  Contention truth;
  truth.slowdown = kTruth;
  truth.copy = kCopy;
  truth.sustained = SustainedLoad{0.5, 30000.0};
  MeasuredRun run = measured_under(*plan_, truth);
  run.plan.meta.contention = truth;  // planned with the model it ran under
  Contention given;
  given.slowdown = kTruth;
  given.sustained = truth.sustained;
  const ContentionFit fit = fit_contention({run}, given, ContentionFitOptions{});
  const RunFitReport& r = fit.runs.at(0);
  EXPECT_LT(r.op_error_before, 1e-9);
  EXPECT_LT(r.copy_error_before, 1e-9);
  EXPECT_NEAR(r.predicted_before_us, r.measured_makespan_us, 1e-6 * r.measured_makespan_us);
}

// A run planned for separate GPUs (a sustained term without curves) and measured under that model:
// each device's ops are predicted under its own load, as the simulator times them, so the error
// before is none; the shared GPU's load would make it tens of percent.
TEST_F(ContentionFitTest, TheErrorBeforeOfSeparateGpusIsUnderEachDevicesOwnLoad) {
  Contention separate;
  separate.sustained = SustainedLoad{0.5, 30000.0};
  ContentionFitOptions options;
  options.sustained = true;
  options.time_constants_us = {30000.0};
  for (const Plan& plan : {*plan_, shipped_plan("dualpipe-v", 2)}) {
    SCOPED_TRACE(plan.graph.schedule.family);
    MeasuredRun run = measured_under(plan, separate);
    run.plan.meta.contention = separate;  // planned with the model it ran under
    const ContentionFit fit = fit_contention({run}, Contention{}, options);
    const RunFitReport& r = fit.runs.at(0);
    EXPECT_LT(r.op_error_before, 1e-9);
    EXPECT_NEAR(r.predicted_before_us, r.measured_makespan_us, 1e-6 * r.measured_makespan_us);
    EXPECT_LT(contention_fit::separate_gpus_op_error(run, *separate.sustained), 1e-9);
    // Another term predicts the same trace worse.
    EXPECT_GT(contention_fit::separate_gpus_op_error(run, SustainedLoad{1.0, 30000.0}), 0.05);
  }
}

// The sustained load H is the share of the run's own devices computing, as the simulator takes it
// for that plan: a 4-device run fitted beside a 2-device one gives the term and curves that made
// both.
TEST(ContentionFitRuns, EachRunsSustainedLoadIsItsOwnDevicesShare) {
  const auto plan_of = [](int devices) {
    PlanRequest r;
    r.profile = load_profile(std::string(PIPEPLAN_SOURCE_DIR) +
                             "/profiles/h100-sxm-llama-7b.analytic.json");
    r.gpu = "h100-sxm";
    r.devices = devices;
    r.microbatches = 2 * devices;
    r.schedule = "1f1b";
    r.backward = BackwardMode::twobp;
    return make_plan(r);
  };
  Contention truth;
  truth.slowdown = {1.0, 1.05, 1.1, 1.15};
  truth.sustained = SustainedLoad{0.6, 20000.0};
  MeasuredRun four = measured_under(plan_of(4), truth);
  MeasuredRun two = measured_under(plan_of(2), truth);
  two.name = "two";
  Contention given;
  given.slowdown = {1.5};
  given.sustained = truth.sustained;
  const ContentionFit fit = fit_contention({four, two}, given, ContentionFitOptions{});
  expect_curve_near(fit.contention.slowdown, truth.slowdown, 2e-3);
  for (const RunFitReport& r : fit.runs) {
    SCOPED_TRACE(r.name);
    EXPECT_LT(r.op_error_after, 1e-3);
    EXPECT_NEAR(r.predicted_after_us / r.measured_makespan_us, 1.0, 2e-3);
  }
}

TEST_F(ContentionFitTest, NodeTimesThatDoNotMatchThePlanAreRefusedNamingTheRun) {
  MeasuredRun run = measured_under(*plan_, Contention{});
  run.name = "runs/p";
  run.times.pop_back();
  try {
    fit_contention({run}, Contention{}, ContentionFitOptions{});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("runs/p"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fit_contention({}, Contention{}, ContentionFitOptions{}), Error);
}

// The shipped LLaMA-7B profile's dualpipe-v plan at 4 devices, m = 8, simulated with overlap
// efficiency `efficiency` (the plan itself keeps the profile's, 0).
MeasuredRun paired_run(double efficiency) {
  const Plan plan = shipped_plan("dualpipe-v", 2);
  TaskGraph made = plan.graph;
  made.meta.overlap = {efficiency, "truth"};
  return {"pairs at " + std::to_string(efficiency), plan.graph, simulate(made).times};
}

// The overlap efficiency that made the runs' pair times, from each pair beside its ops run alone,
// pooled over the runs; a run without pairs adds nothing, and runs without any are refused.
TEST(OverlapFit, RecoversTheEfficiencyThatMadeThePairTimes) {
  const MeasuredRun half = paired_run(0.5);
  const OverlapFit fit = fit_overlap({half});
  EXPECT_NEAR(fit.efficiency, 0.5, 1e-9);
  EXPECT_GT(fit.pairs, 0);
  // With a plan of no pairs beside it: the same, from the same pairs.
  const MeasuredRun plain = measured_under(shipped_plan(), Contention{});
  const OverlapFit pooled = fit_overlap({plain, half});
  EXPECT_NEAR(pooled.efficiency, 0.5, 1e-9);
  EXPECT_EQ(pooled.pairs, fit.pairs);
  EXPECT_NEAR(fit_overlap({paired_run(1.0)}).efficiency, 1.0, 1e-9);
  // The fitted figure in the plan's meta predicts the run it came from.
  EXPECT_NEAR(simulated_makespan(half.plan, std::nullopt, OverlapModel{fit.efficiency, ""}),
              measured_makespan(half.plan, half.times), 1e-6);
  try {
    fit_overlap({plain});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("overlap: no run has an overlapped pair", 0), 0u)
        << e.what();
  }
}

// A run with overlapped pairs under known slowdowns: the fit counts each pair as one op running
// (as the simulator runs it) and takes no pair as a sample of an op's own time, so it recovers
// the slowdowns that made the trace.
TEST(OverlapFit, PairsCountAsOneOpInTheContentionFit) {
  MeasuredRun run = paired_run(0.5);
  TaskGraph made = run.plan;
  made.meta.overlap = {0.5, "truth"};
  made.meta.contention.slowdown = kTruth;
  run.times = simulate(made).times;
  ContentionFitOptions options;
  options.min_ops = 1;
  const ContentionFit fit = fit_contention({run}, Contention{}, options);
  expect_curve_near(fit.contention.slowdown, kTruth, 1e-6);
}

TEST(ContentionFitPieces, TheStepStartsAtTheLoadItEndsAt) {
  // Ops of 500 and 250 us on two devices, tau 1000 us: share 1 for 250 us, then 1/2.
  const std::vector<double> points = {0, 250, 500};
  const std::vector<double> shares = {1.0, 0.5};
  const std::vector<double> load = contention_fit::periodic_load(points, shares, 1000.0);
  ASSERT_EQ(load.size(), 2U);
  const double end = shares[1] + (load[1] - shares[1]) * std::exp(-250.0 / 1000.0);
  EXPECT_NEAR(end, load[0], 1e-12);
  EXPECT_GT(end, 0.5);
  EXPECT_LT(end, 1.0);
  // Ops that take no time, or none: no load.
  EXPECT_TRUE(contention_fit::periodic_load({5}, {}, 1000.0).empty());
  EXPECT_TRUE(contention_fit::periodic_load({}, {}, 1000.0).empty());
}

TEST(ContentionFitPieces, SustainedWorkIsTheIntegralOfTheRate) {
  const SustainedLoad load{0.8, 3000.0};
  const double share = 0.75;
  const double h = 0.2;
  const double dt = 1700;
  // The midpoint rule on 1 / (1 + factor * H(t)).
  constexpr int kSteps = 20000;
  double sum = 0;
  for (int i = 0; i < kSteps; ++i) {
    const double t = (i + 0.5) * dt / kSteps;
    const double hh = share + (h - share) * std::exp(-t / load.time_constant_us);
    sum += dt / kSteps / (1 + load.factor * hh);
  }
  EXPECT_NEAR(sustained_work(load, dt, share, h), sum, 1e-6 * sum);
  EXPECT_EQ(sustained_work(SustainedLoad{0, 3000.0}, dt, share, h), dt);
  EXPECT_EQ(sustained_work(load, -1, share, h), 0);
}

TEST(ContentionFitPieces, FactorGridHasBothBoundsAndTheStepsBetween) {
  EXPECT_EQ(contention_fit::factor_grid(0.6, 0.6), std::vector<double>{0.6});
  EXPECT_EQ(contention_fit::factor_grid(0.12, 0.2), (std::vector<double>{0.12, 0.15, 0.2}));
  EXPECT_EQ(contention_fit::factor_grid(0, 2).size(), 41U);
}

// 100 ops at 1.2 times their profiled time, alone, and 10 held up by something else (6 times):
// the curve is the ops' slowdown, as op_error measures it, not pulled towards the ten.
TEST(ContentionFitPieces, AFewOpsHeldUpDoNotPullTheCurve) {
  std::vector<contention_fit::OpSample> samples;
  for (int i = 0; i < 110; ++i) {
    const double profiled = 100.0 + i;
    samples.push_back({OpType::F, profiled, {(i < 100 ? 1.2 : 6.0) * profiled, 0.0}});
  }
  std::vector<const contention_fit::OpSample*> view;
  view.reserve(samples.size());
  for (const auto& s : samples)
    view.push_back(&s);
  const auto curve = contention_fit::fit_curve(view, 2, nullptr);
  ASSERT_TRUE(curve.has_value());
  EXPECT_NEAR((*curve)[0], 1.2, 1e-6);
  EXPECT_NEAR((*curve)[1], 1.2, 1e-6) << "level 2 had no time: the nearest fitted level's";
  Contention fitted;
  fitted.slowdown = *curve;
  EXPECT_LT(contention_fit::op_error(samples, fitted), contention_fit::op_error(samples, {}));
}

// Half the ops ran alone at their profiled time; the other half spent 1.5x their time alone and a
// little beside another op: exactly fitted only by a negative rate at level 2. That level is left
// to its neighbour instead of failing the fit.
TEST(ContentionFitPieces, ALevelTheRunsLeaveNonPositiveTakesItsNeighbours) {
  std::vector<contention_fit::OpSample> samples;
  for (int i = 0; i < 100; ++i) {
    if (i % 2 == 0) {
      samples.push_back({OpType::F, 100.0, {100.0, 0.0}});
    } else {
      samples.push_back({OpType::F, 100.0, {150.0, 10.0}});
    }
  }
  std::vector<const contention_fit::OpSample*> view;
  view.reserve(samples.size());
  for (const auto& s : samples)
    view.push_back(&s);
  const auto curve = contention_fit::fit_curve(view, 2, nullptr);
  ASSERT_TRUE(curve.has_value());
  EXPECT_GT((*curve)[0], 0);
  EXPECT_EQ((*curve)[1], (*curve)[0]) << "level 2 is not identifiable: level 1's factor";
  const std::vector<double> fallback = {1.0, 1.7};
  const auto with_fallback = contention_fit::fit_curve(view, 2, &fallback);
  ASSERT_TRUE(with_fallback.has_value());
  EXPECT_EQ((*with_fallback)[1], 1.7);
}

TEST(ContentionFitPieces, CopyFitNeedsBothCases) {
  std::vector<contention_fit::CopySample> idle_only(30, {100, 130, 0});
  EXPECT_FALSE(contention_fit::fit_copy(idle_only, 20).has_value());
  std::vector<contention_fit::CopySample> both;
  for (int i = 0; i < 30; ++i) {
    const double idle = 10.0 * (i % 5 + 1);
    const double busy = 7.0 * (i % 3);
    both.push_back({idle / 2 + busy / 4, idle, busy});
  }
  const auto copy = contention_fit::fit_copy(both, 20);
  ASSERT_TRUE(copy.has_value());
  EXPECT_NEAR(copy->sender_idle, 2, 1e-9);
  EXPECT_NEAR(copy->sender_computing, 4, 1e-9);
  EXPECT_NEAR(contention_fit::copy_error(both, *copy), 0, 1e-9);
  EXPECT_FALSE(contention_fit::fit_copy(both, 31).has_value());
}

// A few sends held up far beyond their copy (a descheduled thread: hundreds of times their link
// time, as CPU runs show) leave the factors the other sends give.
TEST(ContentionFitPieces, HeldUpSendsDoNotPullTheCopyFactors) {
  std::vector<contention_fit::CopySample> samples;
  for (int i = 0; i < 40; ++i) {
    const double idle = 10.0 * (i % 5 + 1);
    const double busy = 7.0 * (i % 3);
    samples.push_back({idle / 2 + busy / 4, idle, busy});
  }
  samples.push_back({5, 3000, 0});
  samples.push_back({5, 10, 1500});
  samples.push_back({7, 800, 900});
  samples.push_back({5, 0, 0});  // measured as taking no time: no row
  const auto copy = contention_fit::fit_copy(samples, 20);
  ASSERT_TRUE(copy.has_value());
  EXPECT_NEAR(copy->sender_idle, 2, 1e-3);
  EXPECT_NEAR(copy->sender_computing, 4, 1e-3);
  // Long copies weigh by their link time: a BPipe-sized transfer slower beside compute than the
  // short ones pulls the busy factor towards its own.
  std::vector<contention_fit::CopySample> stash = samples;
  for (int i = 0; i < 4; ++i)
    stash.push_back({5000, 5000, 5000 * 30.0});  // idle at 2x would leave 60x beside compute
  const auto weighted = contention_fit::fit_copy(stash, 20);
  ASSERT_TRUE(weighted.has_value());
  EXPECT_GT(weighted->sender_computing, 4.5);
  // Sends idle but for one held up beside compute: that one send would set the factor alone.
  std::vector<contention_fit::CopySample> one_beside(40, {10, 20, 0});
  one_beside.push_back({10, 0, 600});
  EXPECT_FALSE(contention_fit::fit_copy(one_beside, 20).has_value());
  one_beside.push_back({10, 0, 20});
  one_beside.push_back({10, 5, 10});
  EXPECT_TRUE(contention_fit::fit_copy(one_beside, 20).has_value());
}

// A fit that predicts its own runs' steps worse than the profile did is said (runs on a busy
// machine disagree); one that predicts them better, or a point worse at most, is not.
TEST(ContentionFit, AFitThatPredictsItsRunsWorseIsWarnedOf) {
  const auto run = [](double measured, double before, double after) {
    RunFitReport r;
    r.measured_makespan_us = measured;
    r.predicted_before_us = before;
    r.predicted_after_us = after;
    return r;
  };
  // Errors before: +10 %, -5 %; after: +25 %, +20 %.
  const std::vector<RunFitReport> worse = {run(110, 100, 88), run(95, 100, 95 / 1.2)};
  EXPECT_NEAR(mean_step_error(worse, false), 0.075, 1e-12);
  EXPECT_NEAR(mean_step_error(worse, true), 0.225, 1e-12);
  EXPECT_EQ(worse_steps_warning(worse),
            "the fit predicts these runs' step times worse than the profile did (mean |error| "
            "7.5 % before, 22.5 % after): the runs disagree with each other or with the ops' "
            "times (runs on a busy machine do); fit on more runs, or keep the profile");
  EXPECT_EQ(worse_steps_warning({run(110, 100, 109)}), "");
  EXPECT_EQ(worse_steps_warning({run(110, 100, 110 / 1.105)}), "");  // half a point worse
  EXPECT_EQ(worse_steps_warning({}), "");
}

}  // namespace
}  // namespace pipeplan
