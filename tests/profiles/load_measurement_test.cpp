#include "profiles/load_measurement.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "profiles/profile.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

using nlohmann::json;
using testing::error_of;

struct OpCost {
  const char* op;
  double cold_us;
};
// A LLaMA-7B block's shape on a whole H200, roughly: F, p1, p2.
const std::vector<OpCost> kCycle = {{"F", 6000}, {"P1", 12000}, {"P2", 11000}};

// A deterministic jitter of about ±0.3 %.
double jitter(std::size_t i) {
  return 1 + 0.003 * std::sin(static_cast<double>(i) * 12.9898);
}

// Stages [0, active) run the cycle in lockstep from `t` until `until_us`, ops taking the time
// `model` gives them, and idle `gap_us` after each cycle: the timed ops of a load run under a
// known model, `h` the load carried in and out.
void generate(std::vector<TimedOp>& ops, const SustainedLoad& model, int active, int devices,
              double& t, double until_us, double gap_us, double& h) {
  const double share = static_cast<double>(active) / devices;
  while (t < until_us) {
    for (const OpCost& c : kCycle) {
      const double work = c.cold_us * jitter(ops.size());
      const double time = sustained_time(model, work, share, h);
      for (int s = 0; s < active; ++s)
        ops.push_back({c.op, t, t + time});
      h = sustained_load_after(model, time, share, h);
      t += time;
    }
    h = sustained_load_after(model, gap_us, 0, h);
    t += gap_us;
  }
}

std::vector<TimedOp> whole_gpu_run(const SustainedLoad& model, double seconds, double gap_us) {
  std::vector<TimedOp> ops;
  double t = 0, h = 0;
  generate(ops, model, 1, 1, t, seconds * 1e6, gap_us, h);
  return ops;
}

TEST(SustainedLoadFit, RecoversTheModelAWholeGpuRunWasMadeWith) {
  const SustainedLoad truth{0.15, 2e6};
  const SustainedMeasurement m = fit_sustained_load(whole_gpu_run(truth, 20, 0), 1);
  EXPECT_NEAR(m.model.factor, truth.factor, 0.01);
  EXPECT_NEAR(m.model.time_constant_us / truth.time_constant_us, 1.0, 0.15);
  EXPECT_EQ(m.devices, 1);
  EXPECT_NEAR(m.seconds, 20, 0.1);
  ASSERT_EQ(m.ops.size(), 3U);
  for (const OpCost& c : kCycle) {
    const LoadOpTimes& t = m.ops.at(c.op);
    EXPECT_NEAR(t.burst_us / c.cold_us, 1.0, 0.005) << c.op;
    // Ten time constants in: the load is 1, every op 1 + factor slower.
    EXPECT_NEAR(t.steady_us / c.cold_us, 1 + truth.factor, 0.01) << c.op;
    EXPECT_GT(t.count, 200) << c.op;
  }
  EXPECT_LT(m.error_model_pct, 0.5);
  EXPECT_GT(m.error_constant_pct, 5 * m.error_model_pct);
}

TEST(SustainedLoadFit, SeesTheLoadOfStagesThatComputeAPartOfTheTime) {
  // Four emulated stages: two of them for 8 s (share 1/2), then all four with idle gaps.
  const SustainedLoad truth{0.3, 1.5e6};
  std::vector<TimedOp> ops;
  double t = 0, h = 0;
  generate(ops, truth, 2, 4, t, 8e6, 0, h);
  generate(ops, truth, 4, 4, t, 20e6, 15000, h);
  const SustainedMeasurement m = fit_sustained_load(ops, 4);
  EXPECT_NEAR(m.model.factor, truth.factor, 0.02);
  EXPECT_NEAR(m.model.time_constant_us / truth.time_constant_us, 1.0, 0.15);
  EXPECT_EQ(m.devices, 4);
  EXPECT_NEAR(m.ops.at("P1").burst_us / 12000, 1.0, 0.005);
  // The cold work under the fitted model is each op's own, whatever the load was.
  const std::vector<double> cold = cold_work_of(ops, 4, m.model);
  ASSERT_EQ(cold.size(), ops.size());
  for (std::size_t i = 0; i < ops.size(); i += 97) {
    const double expected = ops[i].op == "F" ? 6000 : ops[i].op == "P1" ? 12000 : 11000;
    EXPECT_NEAR(cold[i] / expected, 1.0, 0.01) << i;
  }
}

TEST(SustainedLoadFit, ConstantTimesGiveNoFactor) {
  const SustainedMeasurement m = fit_sustained_load(whole_gpu_run({0, 1}, 5, 0), 1);
  EXPECT_EQ(m.model.factor, 0);
  EXPECT_EQ(m.error_model_pct, m.error_constant_pct);
  EXPECT_NEAR(m.ops.at("F").burst_us / 6000, 1.0, 0.004);
  EXPECT_NEAR(m.ops.at("F").steady_us / 6000, 1.0, 0.004);
}

TEST(SustainedLoadFit, ColdWorkWithoutAFactorIsTheMeasuredTime) {
  const std::vector<TimedOp> ops = {{"F", 0, 10}, {"P1", 10, 30}, {"F", 40, 52}};
  EXPECT_EQ(cold_work_of(ops, 1, {0, 1}), (std::vector<double>{10, 20, 12}));
}

TEST(SustainedLoadFit, RefusesRunsItCannotFit) {
  std::vector<TimedOp> few(kMinOpsPerType - 1, TimedOp{"F", 0, 1});
  for (std::size_t i = 0; i < few.size(); ++i)
    few[i] = {"F", 10.0 * static_cast<double>(i), 10.0 * static_cast<double>(i) + 5};
  EXPECT_EQ(error_of([&] { fit_sustained_load(few, 1); }),
            "sustained load: 7 F op(s) timed, at least 8 needed (a longer load run)");
  EXPECT_EQ(error_of([&] { fit_sustained_load(std::vector<TimedOp>{}, 1); }),
            "sustained load: the load run timed no op");
  const std::vector<TimedOp> backwards = {{"P2", 5, 5}};
  EXPECT_EQ(error_of([&] {
              cold_work_of(backwards, 1, {0, 1});
            }),
            "sustained load: op 0 (P2) does not end after it starts");
  const std::vector<TimedOp> nan = {{"F", std::nan(""), 1}};
  EXPECT_EQ(error_of([&] {
              cold_work_of(nan, 1, {0, 1});
            }),
            "sustained load: op 0 has no finite start and end");
  EXPECT_EQ(error_of([&] {
              cold_work_of(backwards, 0, {0, 1});
            }),
            "sustained load: devices must be at least 1");
}

TEST(ClockSummary, TakesTheStartAndTheLastQuarter) {
  std::vector<ClockSample> samples;
  for (int i = 0; i <= 100; ++i) {
    const bool late = i >= 75;
    samples.push_back({i * 1e5, late ? 1695.0 : 1980.0, late && i % 10 != 0, late ? 690.0 : 520.0});
  }
  samples.push_back({-5, 0, false, 0});  // before the run: ignored
  const std::optional<ClockSummary> c = summarize_clock(samples, 10);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->start_mhz, 1980);
  EXPECT_EQ(c->steady_mhz, 1695);
  EXPECT_NEAR(c->power_capped, 23.0 / 26.0, 1e-12);  // 75..100, minus 80, 90, 100
  EXPECT_EQ(c->steady_power_w, 690);
  EXPECT_EQ(c->samples, 101);
  EXPECT_FALSE(summarize_clock({}, 10));
  EXPECT_FALSE(summarize_clock(std::vector<ClockSample>{{1e9, 1, false, 1}}, 10));
}

TEST(ContentionFromBursts, CurvesAreTimesOverTheTimeAlone) {
  const std::map<std::string, std::vector<double>> medians = {
      {"F", {100, 110, 130}}, {"P1", {200, 210, 260}}, {"P2", {300, 330, 360}}};
  const Contention c = contention_from_bursts(medians, "measured");
  EXPECT_EQ(c.by_op.at("F"), (std::vector<double>{1, 1.1, 1.3}));
  EXPECT_EQ(c.by_op.at("P1"), (std::vector<double>{1, 1.05, 1.3}));
  EXPECT_EQ(c.by_op.at("P2"), (std::vector<double>{1, 1.1, 1.2}));
  EXPECT_EQ(c.by_op.at("B"), (std::vector<double>{1, 540.0 / 500, 620.0 / 500}));
  EXPECT_EQ(c.slowdown, (std::vector<double>{1, 650.0 / 600, 750.0 / 600}));
  EXPECT_EQ(c.source, "measured");
  EXPECT_FALSE(c.sustained);
  // What the profile writes, its reader takes.
  EXPECT_EQ(contention_from_json(contention_to_json(c), "test").by_op, c.by_op);
}

TEST(ContentionFromBursts, RefusesMedianItCannotUse) {
  EXPECT_EQ(error_of([] { contention_from_bursts({}, ""); }), "contention: no op was timed");
  EXPECT_EQ(error_of([] {
              contention_from_bursts({{"F", {1, 2}}, {"P1", {1}}}, "");
            }),
            "contention: P1 was timed at 1 concurrency levels, the others at 2");
  EXPECT_EQ(error_of([] {
              contention_from_bursts({{"X", {1}}}, "");
            }),
            "contention: op 'X' is not F, B, P1 or P2");
  EXPECT_EQ(error_of([] {
              contention_from_bursts({{"F", {1, 0}}}, "");
            }),
            "contention: a median time of F is not a positive number");
  EXPECT_EQ(error_of([] {
              contention_from_bursts({{"F", {1, 200}}}, "");
            }),
            "contention: a slowdown above 100 was measured");
}

SustainedMeasurement sample_measurement() {
  SustainedMeasurement m;
  m.devices = 4;
  m.seconds = 20.25;
  m.ops["F"] = {6000.5, 6900.25, 400};
  m.ops["P1"] = {12000, 13800, 400};
  m.model = {0.15, 2e6};
  m.error_constant_pct = 5.5;
  m.error_model_pct = 0.25;
  m.clock = ClockSummary{1980, 1695, 0.9, 690.5, 1000};
  m.source = "measured at profile time";
  return m;
}

TEST(SustainedMeasurementJson, RoundTrips) {
  const SustainedMeasurement m = sample_measurement();
  EXPECT_EQ(sustained_measurement_from_json(sustained_measurement_to_json(m), "p.json"), m);
  SustainedMeasurement no_clock = m;
  no_clock.clock.reset();
  const json j = sustained_measurement_to_json(no_clock);
  EXPECT_FALSE(j.contains("clock"));
  EXPECT_EQ(sustained_measurement_from_json(j, "p.json"), no_clock);
}

TEST(SustainedMeasurementJson, ErrorsNameTheField) {
  const json good = sustained_measurement_to_json(sample_measurement());
  const auto error_with = [&](const json::json_pointer& where, const json& value) {
    json j = good;
    j[where] = value;
    return error_of([&] { sustained_measurement_from_json(j, "p.json"); });
  };
  EXPECT_EQ(error_with(json::json_pointer("/devices"), 0),
            "p.json: field 'sustained_load.devices' must be an integer from 1 to 1024");
  EXPECT_EQ(error_with(json::json_pointer("/ops/X"), json::object()),
            "p.json: field 'sustained_load.ops.X' is not an op type (F, B, P1 or P2)");
  EXPECT_EQ(error_with(json::json_pointer("/ops/F/steady_us"), -1),
            "p.json: field 'sustained_load.ops.F.steady_us' must be a number from 0 to 1e+09");
  EXPECT_EQ(error_with(json::json_pointer("/model/time_constant_us"), 0),
            "p.json: field 'sustained_load.model.time_constant_us' must be positive");
  EXPECT_EQ(error_with(json::json_pointer("/clock/power_capped"), 1.5),
            "p.json: field 'sustained_load.clock.power_capped' must be a number from 0 to 1");
  EXPECT_EQ(error_with(json::json_pointer("/source"), 3),
            "p.json: field 'sustained_load.source' must be a string");
  json missing = good;
  missing.erase("model");
  EXPECT_EQ(error_of([&] { sustained_measurement_from_json(missing, "p.json"); }),
            "p.json: field 'sustained_load.model' is missing");
  EXPECT_EQ(error_of([&] { sustained_measurement_from_json(json::array(), "p.json"); }),
            "p.json: field 'sustained_load' must be an object");
}

TEST(SustainedMeasurementJson, TravelsInAProfile) {
  Profile p;
  p.model = model_preset("tiny");
  p.gpu = "h200";
  p.seq = 128;
  p.provenance = {"measured", "NVIDIA H200", "2026-11-28T00:00:00Z", "pipeplan profile", ""};
  LayerCost cost;
  cost.forward_us = cost.p1_us = cost.p2_us = 10;
  cost.p2_concat_us = {{1, 10}};
  for (const char* kind : {"embedding", "block", "head"})
    p.layers[kind][1] = cost;
  // The tiny model's weights in bf16, as its shape gives them.
  p.layers["embedding"][1].param_bytes = 2 * p.model.embedding_parameters();
  p.layers["block"][1].param_bytes = 2 * p.model.block_parameters();
  p.layers["head"][1].param_bytes = 2 * p.model.head_parameters();
  p.sustained_load = sample_measurement();
  p.contention.sustained = p.sustained_load->model;
  const Profile back = profile_from_json(profile_to_json(p), "p.json");
  ASSERT_TRUE(back.sustained_load);
  EXPECT_EQ(*back.sustained_load, *p.sustained_load);
  ASSERT_TRUE(back.contention.sustained);
  EXPECT_EQ(*back.contention.sustained, p.sustained_load->model);
}

}  // namespace
}  // namespace pipeplan
