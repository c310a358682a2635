// The contention model's closed forms (sustained_work, its inverse sustained_time,
// sustained_load_after, one GPU's DeviceLoad) and its JSON: the sustained-only form (separate
// GPUs, each with its own clock) round-trips, and what needs a curve is refused without one.
#include "profiles/contention.h"

#include <cmath>
#include <random>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/error_support.h"

namespace pipeplan {
namespace {

using nlohmann::json;
using testing::error_of;

TEST(SustainedTime, IsTheInverseOfSustainedWork) {
  std::mt19937 rng(77);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int i = 0; i < 2000; ++i) {
    const SustainedLoad load{.factor = 3 * unit(rng), .time_constant_us = 1 + 1e4 * unit(rng)};
    const double share = unit(rng) < 0.3 ? 1.0 : unit(rng);
    const double h = unit(rng);
    const double work = load.time_constant_us * 4 * unit(rng) + 1e-3;
    const double t = sustained_time(load, work, share, h);
    EXPECT_NEAR(sustained_work(load, t, share, h), work, 1e-10 * work) << i;
    // Between the slowest and the fastest rate the course allows.
    EXPECT_GE(t, work * (1 + load.factor * std::min(share, h)) * (1 - 1e-12)) << i;
    EXPECT_LE(t, work * (1 + load.factor * std::max(share, h)) * (1 + 1e-12)) << i;
  }
}

TEST(SustainedTime, WithoutWorkOrFactorIsTheWorkItself) {
  const SustainedLoad load{.factor = 0.5, .time_constant_us = 100};
  EXPECT_EQ(sustained_time(load, 0, 1, 0.5), 0.0);
  EXPECT_EQ(sustained_time(load, -2, 1, 0.5), -2.0);
  const SustainedLoad none{.factor = 0, .time_constant_us = 100};
  EXPECT_EQ(sustained_time(none, 123.456, 1, 0.7), 123.456);
  // At a steady load the rate is constant: 1 / (1 + factor * H).
  EXPECT_NEAR(sustained_time(load, 300, 1, 1), 450, 1e-9);
  EXPECT_NEAR(sustained_time(load, 300, 0.4, 0.4), 360, 1e-9);
}

TEST(SustainedLoadAfter, RelaxesExponentiallyTowardsTheShare) {
  const SustainedLoad load{.factor = 0.5, .time_constant_us = 100};
  EXPECT_EQ(sustained_load_after(load, 0, 1, 0.25), 0.25);
  EXPECT_EQ(sustained_load_after(load, -5, 0, 0.25), 0.25);
  EXPECT_NEAR(sustained_load_after(load, 100, 1, 0.25), 1 - 0.75 * std::exp(-1.0), 1e-15);
  EXPECT_NEAR(sustained_load_after(load, 250, 0, 0.8), 0.8 * std::exp(-2.5), 1e-15);
  // Two spans at one share are one span.
  EXPECT_NEAR(sustained_load_after(load, 30, 0.6, sustained_load_after(load, 70, 0.6, 0.1)),
              sustained_load_after(load, 100, 0.6, 0.1), 1e-15);
}

// One GPU: ops in order of start, H towards 1 while any runs and towards 0 between them.
TEST(DeviceLoad, FollowsTheGpuOpByOp) {
  const SustainedLoad s{.factor = 0.8, .time_constant_us = 50};
  DeviceLoad gpu(0.3);
  EXPECT_EQ(gpu.at(s, 0), 0.3);
  // Idle until 20: H decays; the op runs from there towards 1.
  const double h1 = 0.3 * std::exp(-20.0 / 50);
  EXPECT_NEAR(gpu.at(s, 20), h1, 1e-15);
  const double d1 = gpu.run(s, 20, 40);
  EXPECT_EQ(d1, sustained_time(s, 40, 1, h1));
  const double h1_end = 1 + (h1 - 1) * std::exp(-d1 / 50);
  EXPECT_NEAR(gpu.at(s, 20 + d1), h1_end, 1e-12);
  // An op that starts within the first runs from H on its way to 1, and the GPU stays busy
  // until the later end.
  const double h2 = 1 + (h1 - 1) * std::exp(-10.0 / 50);
  const double d2 = gpu.run(s, 30, 100);
  EXPECT_NEAR(d2, sustained_time(s, 100, 1, h2), 1e-9);
  EXPECT_NEAR(gpu.at(s, 30 + d2), 1 + (h2 - 1) * std::exp(-d2 / 50), 1e-12);
  // A short one inside the second changes nothing after it.
  const double after = gpu.at(s, 30 + d2 + 25);
  gpu.run(s, 40, 1);
  EXPECT_NEAR(gpu.at(s, 30 + d2 + 25), after, 1e-12);
  EXPECT_NEAR(after, (1 + (h2 - 1) * std::exp(-d2 / 50)) * std::exp(-25.0 / 50), 1e-12);
}

TEST(ContentionJson, ASustainedTermAloneRoundTrips) {
  const json j = {{"sustained", {{"factor", 0.35}, {"time_constant_us", 40000}}},
                  {"source", "a 700 W cap"}};
  const Contention c = contention_from_json(j, "p.json");
  EXPECT_TRUE(c.empty());  // no curve: no processor sharing
  EXPECT_TRUE(c.has_model());
  EXPECT_EQ(c.sustained, (SustainedLoad{.factor = 0.35, .time_constant_us = 40000}));
  EXPECT_EQ(c.source, "a 700 W cap");
  const json back = contention_to_json(c);
  EXPECT_FALSE(back.contains("slowdown"));
  EXPECT_FALSE(back.contains("by_op"));
  EXPECT_FALSE(back.contains("copy"));
  EXPECT_EQ(back, j);
  const Contention again = contention_from_json(back, "q.json");
  EXPECT_EQ(again.sustained, c.sustained);
  EXPECT_TRUE(again.slowdown.empty());

  // A curve beside it stays a curve, and no model at all is no model.
  Contention shared = c;
  shared.slowdown = {1.1, 1.2};
  EXPECT_EQ(contention_from_json(contention_to_json(shared), "p.json").slowdown, shared.slowdown);
  EXPECT_FALSE(Contention{}.has_model());
  Contention curve_only;
  curve_only.slowdown = {1.0};
  EXPECT_TRUE(curve_only.has_model());
}

TEST(ContentionJson, WhatNeedsACurveIsRefusedWithoutOne) {
  const json sustained = {{"factor", 0.35}, {"time_constant_us", 40000}};
  EXPECT_EQ(error_of([&] {
              contention_from_json({{"sustained", sustained}, {"by_op", {{"F", {1.1}}}}}, "p.json");
            }),
            "p.json: field 'contention.by_op' needs 'contention.slowdown' (stages sharing one "
            "GPU)");
  EXPECT_EQ(error_of([&] {
              contention_from_json({{"sustained", sustained},
                                    {"copy", {{"sender_idle", 1.0}, {"sender_computing", 2.0}}}},
                                   "p.json");
            }),
            "p.json: field 'contention.copy' needs 'contention.slowdown' (stages sharing one GPU)");
  // Neither a curve nor a sustained term: the curve is missing.
  EXPECT_EQ(error_of([&] {
              contention_from_json({{"source", "x"}}, "p.json");
            }),
            "p.json: field 'contention.slowdown' must be an array of 1 to 1024 numbers");
  // The sustained term alone is still checked.
  EXPECT_EQ(error_of([&] {
              contention_from_json({{"sustained", {{"factor", 0.5}}}}, "p.json");
            }),
            "p.json: field 'contention.sustained.time_constant_us' is missing");
  // An empty curve beside it is a malformed curve, not an absent one.
  EXPECT_EQ(
      error_of([&] {
        contention_from_json({{"sustained", sustained}, {"slowdown", json::array()}}, "p.json");
      }),
      "p.json: field 'contention.slowdown' must be an array of 1 to 1024 numbers");
}

}  // namespace
}  // namespace pipeplan
