// Reading node times back from a trace: a trace that is not what `pipeplan run --trace` writes
// gives one line naming the file and the event, never an exception of the JSON library.
#include "runtime/trace_diff.h"

#include <functional>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/graph/trace.h"
#include "planner/plan/make_plan.h"
#include "profiles/analytic.h"

namespace pipeplan {
namespace {

using nlohmann::json;

Plan small_plan() {
  PlanRequest r;
  r.profile = uniform_profile(parse_uniform("1:1:1:0.1", ""), 2, 1);
  r.devices = 2;
  r.microbatches = 2;
  return make_plan(r);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a pipeplan error: ") + e.what();
  }
  return "<no error>";
}

// The first slice event of the trace, for editing.
json& first_slice(json& trace) {
  for (json& event : trace["traceEvents"]) {
    if (event.value("ph", "") == "X") return event;
  }
  throw std::logic_error("no slice");
}

TEST(TraceTimes, ReadsTheTraceItWrote) {
  const Plan plan = small_plan();
  const json trace = perfetto_trace(plan.graph, plan.sim, "t");
  const auto times = node_times_from_trace(plan.graph, trace, "t.json");
  ASSERT_EQ(times.size(), plan.sim.times.size());
  for (std::size_t i = 0; i < times.size(); ++i)
    EXPECT_NEAR(times[i].end_us, plan.sim.times[i].end_us, 1e-6);
}

TEST(TraceTimes, MalformedEventsAreOneLineErrors) {
  const Plan plan = small_plan();
  const json good = perfetto_trace(plan.graph, plan.sim, "t");
  const auto error = [&](const std::function<void(json&)>& change) {
    json trace = good;
    change(trace);
    return error_of([&] { node_times_from_trace(plan.graph, trace, "t.json"); });
  };
  EXPECT_EQ(error([](json& t) { t = json::array(); }),
            "t.json: field 'traceEvents' missing (not a pipeplan trace)");
  EXPECT_NE(error([](json& t) { first_slice(t)["args"]["node"] = "x"; }).find("field 'args.node'"),
            std::string::npos);
  EXPECT_NE(error([](json& t) {
              first_slice(t)["args"]["node"] = 1e300;
            }).find("field 'args.node' = 1e+300"),
            std::string::npos);
  EXPECT_NE(
      error([](json& t) { first_slice(t)["ts"] = "soon"; }).find("field 'ts' must be a number"),
      std::string::npos);
  EXPECT_NE(error([](json& t) { first_slice(t)["dur"] = -1; }).find("field 'dur' must be"),
            std::string::npos);
  EXPECT_NE(error([](json& t) {
              first_slice(t)["args"]["stage"] = "s";
            }).find("does not match the plan's"),
            std::string::npos);
  EXPECT_NE(error([](json& t) {
              first_slice(t)["args"]["microbatches"] = json::object();
            }).find("does not match the plan's"),
            std::string::npos);
  EXPECT_NE(
      error([](json& t) { t["traceEvents"].push_back(first_slice(t)); }).find("a second slice for"),
      std::string::npos);
  // Events that are not slices are skipped, whatever they hold.
  EXPECT_EQ(error([](json& t) {
              t["traceEvents"].push_back(42);
              t["traceEvents"].push_back({{"ph", 7}});
              t["traceEvents"].push_back({{"ph", "X"}, {"args", json::array()}});
            }),
            "<no error>");
  for (const std::string& message : {error([](json& t) { first_slice(t)["args"]["node"] = "x"; }),
                                     error([](json& t) { first_slice(t)["ts"] = "soon"; })}) {
    EXPECT_EQ(message.find("not a pipeplan error"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace pipeplan
