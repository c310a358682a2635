// Reading node times back from a trace: a trace that is not what `pipeplan run --trace` writes
// gives one line naming the file and the event, never an exception of the JSON library.
#include "runtime/trace_diff.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/graph/metrics.h"
#include "planner/graph/trace.h"
#include "planner/plan/make_plan.h"
#include "profiles/analytic.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

using pipeplan::testing::error_of;

using nlohmann::json;

Plan small_plan() {
  PlanRequest r;
  r.profile = uniform_profile(parse_uniform("1:1:1:0.1", ""), 2, 1);
  r.devices = 2;
  r.microbatches = 2;
  return make_plan(r);
}

// What read_trace_times says of `text` written to a file, the file named "t.json" in it.
std::string file_error(const TaskGraph& plan, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("pipeplan_trace_diff_test_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
  }
  std::string message = error_of([&] { read_trace_times(plan, path); });
  std::filesystem::remove(path);
  for (std::size_t at = message.find(path.string()); at != std::string::npos;
       at = message.find(path.string())) {
    message.replace(at, path.string().size(), "t.json");
  }
  return message;
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

TEST(TraceTimes, TheFileReaderReadsWhatTheStreamedWriterWrote) {
  const Plan plan = small_plan();
  std::string text;
  write_perfetto_trace(plan.graph, plan.sim, "t", [&](std::string_view piece) { text += piece; });
  EXPECT_EQ(text, perfetto_trace(plan.graph, plan.sim, "t").dump() + "\n");
  EXPECT_EQ(file_error(plan.graph, text), "<no error>");
}

// A trace whose metadata comes after its events (another writer's key order) is refused by its
// metadata before a slice of the other plan is looked at, as a whole-document read would.
TEST(TraceTimes, MetadataAfterTheEventsIsStillCheckedFirst) {
  const Plan plan = small_plan();
  json trace = perfetto_trace(plan.graph, plan.sim, "t");
  first_slice(trace)["args"]["stage"] = 7;
  json metadata = trace["metadata"];
  metadata["model"] = "other";
  const std::string text = R"({"traceEvents":)" + trace["traceEvents"].dump() + R"(,"metadata":)" +
                           metadata.dump() + "}";
  EXPECT_NE(file_error(plan.graph, text).find("field 'metadata.model' is \"other\""),
            std::string::npos)
      << file_error(plan.graph, text);
}

TEST(TraceTimes, MalformedEventsAreOneLineErrors) {
  const Plan plan = small_plan();
  const json good = perfetto_trace(plan.graph, plan.sim, "t");
  const auto error = [&](const std::function<void(json&)>& change) {
    json trace = good;
    change(trace);
    std::string message = error_of([&] { node_times_from_trace(plan.graph, trace, "t.json"); });
    // The file reader, event by event, says the same.
    EXPECT_EQ(file_error(plan.graph, trace.dump()), message);
    return message;
  };
  EXPECT_EQ(error([](json& t) { t = json::array(); }),
            "t.json: field 'traceEvents' missing (not a pipeplan trace)");
  EXPECT_EQ(error([](json& t) {
              t["traceEvents"] = {{"a", 1}};
            }),
            "t.json: field 'traceEvents' must be an array of events, not {\"a\":1}");
  EXPECT_NE(error([](json& t) { first_slice(t)["args"]["node"] = "x"; }).find("field 'args.node'"),
            std::string::npos);
  EXPECT_NE(error([](json& t) {
              first_slice(t)["args"]["node"] = 1e300;
            }).find("field 'args.node' must be an integer, not 1e+300"),
            std::string::npos);
  EXPECT_NE(error([&](json& t) { first_slice(t)["args"]["node"] = plan.graph.node_count(); })
                .find("field 'args.node' = " + std::to_string(plan.graph.node_count()) +
                      ", the plan has nodes 0.." + std::to_string(plan.graph.node_count() - 1) +
                      " (a trace of another plan?)"),
            std::string::npos);
  EXPECT_NE(
      error([](json& t) { first_slice(t)["ts"] = "soon"; }).find("field 'ts' must be a number"),
      std::string::npos);
  EXPECT_NE(error([](json& t) { first_slice(t)["dur"] = -1; }).find("field 'dur' must be"),
            std::string::npos);
  EXPECT_NE(error([](json& t) {
              first_slice(t)["args"]["stage"] = "s";
            }).find("field 'args.stage' must be an integer, not \"s\""),
            std::string::npos);
  EXPECT_NE(error([](json& t) {
              first_slice(t)["args"]["microbatches"] = json::object();
            }).find("field 'args.microbatches' must be an array of integers, not {}"),
            std::string::npos);
  EXPECT_NE(
      error([](json& t) { t["traceEvents"].push_back(first_slice(t)); }).find("a second slice for"),
      std::string::npos);
  // Events that are not slices are skipped, whatever they hold; so are slices that name no node
  // (no args, or args without 'node').
  EXPECT_EQ(error([](json& t) {
              t["traceEvents"].push_back(42);
              t["traceEvents"].push_back({{"ph", 7}});
              t["traceEvents"].push_back({{"ph", "X"}, {"args", json::array()}});
              t["traceEvents"].push_back({{"ph", "X"}, {"name", "x"}, {"pid", 1}, {"tid", 1}});
              t["traceEvents"].push_back(
                  {{"ph", "X"}, {"name", "y"}, {"pid", 1}, {"tid", 1}, {"args", json::object()}});
              t["traceEvents"].push_back({{"ph", "X"}, {"args", {{"note", 1}}}});
            }),
            "<no error>");
  for (const std::string& message : {error([](json& t) { first_slice(t)["args"]["node"] = "x"; }),
                                     error([](json& t) { first_slice(t)["ts"] = "soon"; })}) {
    EXPECT_EQ(message.find("not a pipeplan error"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// A trace says which plan it is of: one of another plan's recomputation, stage cut, schedule,
// backward or parallelism is refused naming the field; a field the trace leaves out (a trace
// written before it was added) is not checked; a metadata that is not an object is refused.
TEST(TraceTimes, ATraceOfAnotherPlanIsRefusedByItsMetadata) {
  const Plan plan = small_plan();
  const json good = perfetto_trace(plan.graph, plan.sim, "t");
  ASSERT_TRUE(good["metadata"].contains("stage_layers"));
  const auto error = [&](const std::function<void(json&)>& change) {
    json trace = good;
    change(trace);
    return error_of([&] { node_times_from_trace(plan.graph, trace, "t.json"); });
  };
  EXPECT_EQ(error([](json& t) {
              t["metadata"]["recompute"] = {{"method", "full"}};
            }),
            "t.json: field 'metadata.recompute' is {\"method\":\"full\"}, the plan's is "
            "{\"method\":\"none\"} (a trace of another plan)");
  EXPECT_EQ(error([](json& t) {
              t["metadata"]["stage_layers"] = {{0, 1}, {1, 1}, {2, 0}};
            }).find("t.json: field 'metadata.stage_layers' is [[0,1],[1,1],[2,0]], the plan's is "),
            0U);
  for (const char* field : {"schedule", "backward", "tensor_parallel", "data_parallel"}) {
    SCOPED_TRACE(field);
    EXPECT_NE(error([&](json& t) {
                t["metadata"][field] = 7;
              }).find(std::string("field 'metadata.") + field + "' is 7"),
              std::string::npos);
  }
  EXPECT_EQ(error([](json& t) { t["metadata"].erase("stage_layers"); }), "<no error>");
  EXPECT_EQ(error([](json& t) { t["metadata"].erase("bpipe"); }), "<no error>");
  EXPECT_EQ(error([](json& t) { t["metadata"] = json::array({1}); }),
            "t.json: field 'metadata' must be an object (the plan the trace is of), not [1]");
}

// A BPipe plan's trace says so in its metadata: read against the same plan without BPipe (the
// same shape, more nodes) it is refused as another plan's, not by a node id out of range.
TEST(TraceTimes, ATraceOfTheSamePlanWithBpipeIsAnotherPlans) {
  // Stashes of 1 GiB beside 24 GiB of parameters a stage: BPipe moves some between stages.
  PlanRequest r;
  r.profile = uniform_profile(parse_uniform("1:1:1:0.1", "1:-0.5:-0.5"), 7, 1);
  r.profile.p2p = P2pLink{10, 5000};
  r.profile.layers["block"][1].param_bytes = std::llround(24.0 * 1024 * 1024 * 1024);
  r.devices = 7;
  r.microbatches = 14;
  const Plan plain = make_plan(r);
  r.bpipe = BpipeMode::on;
  const Plan bpipe = make_plan(r);
  ASSERT_GT(bpipe.graph.node_count(), plain.graph.node_count());  // it moves stashes
  const json trace = perfetto_trace(bpipe.graph, bpipe.sim, "t");
  EXPECT_EQ(trace["metadata"]["bpipe"], true);
  EXPECT_EQ(perfetto_trace(plain.graph, plain.sim, "t")["metadata"]["bpipe"], false);
  EXPECT_EQ(error_of([&] { node_times_from_trace(bpipe.graph, trace, "t.json"); }), "<no error>");
  EXPECT_EQ(error_of([&] { node_times_from_trace(plain.graph, trace, "t.json"); }),
            "t.json: field 'metadata.bpipe' is true, the plan's is false (a trace of another "
            "plan)");
  // A trace written before the field was added is read by its node ids.
  json before = trace;
  before["metadata"].erase("bpipe");
  EXPECT_NE(error_of([&] {
              node_times_from_trace(plain.graph, before, "t.json");
            }).find("(a trace of another plan?)"),
            std::string::npos);
}

// A measured trace's clock may start anywhere, below 0 too: the makespan is last end less first
// start whatever the zero.
TEST(TraceTimes, TheMakespanDoesNotDependOnTheTracesZero) {
  const Plan plan = small_plan();
  json trace = perfetto_trace(plan.graph, plan.sim, "t");
  for (json& event : trace["traceEvents"]) {
    if (event.value("ph", "") == "X") event["ts"] = event["ts"].get<double>() - 1e6;
  }
  const std::vector<NodeTime> times = node_times_from_trace(plan.graph, trace, "t.json");
  EXPECT_NEAR(step_metrics(plan.graph, times).makespan_us, plan.sim.makespan_us, 1e-6);
}

// The slice of node `id`, for editing.
json& slice_of(json& trace, int id) {
  for (json& event : trace["traceEvents"]) {
    if (event.value("ph", "") == "X" && event["args"]["node"] == id) return event;
  }
  throw std::logic_error("no slice");
}

// A node of `kind` on `device` (the first in id order with op `op`).
int node_on(const TaskGraph& g, NodeKind kind, int device, OpType op) {
  for (int id = 0; id < g.node_count(); ++id) {
    const Node& n = g.node(id);
    if (n.kind == kind && n.device == device && n.op == op) return id;
  }
  throw std::logic_error("no node");
}

TEST(TraceTimes, SlicesThatContradictThePlanAreRefused) {
  const Plan plan = small_plan();
  const TaskGraph& g = plan.graph;
  const json good = perfetto_trace(g, plan.sim, "t");
  const auto error = [&](const std::function<void(json&)>& change) {
    json trace = good;
    change(trace);
    return error_of([&] { node_times_from_trace(g, trace, "t.json"); });
  };
  const int f0 = node_on(g, NodeKind::compute, 0, OpType::F);
  const int send = node_on(g, NodeKind::send, 0, OpType::F);
  // A slice on the other device's process.
  EXPECT_NE(
      error([&](json& t) {
        slice_of(t, f0)["pid"] = 2;
      }).find("field 'pid' = 2, but the plan's " + g.node_name(f0) + " runs on device 0 (pid 1)"),
      std::string::npos);
  EXPECT_NE(
      error([&](json& t) { slice_of(t, send)["tid"] = g.node(f0).stream + 1; })
          .find("field 'tid' = " + std::to_string(g.node(f0).stream + 1) + ", but the plan's " +
                g.node_name(send) + " is on tid " + std::to_string(g.node(send).stream + 1)),
      std::string::npos);
  // A slice named after another node than its args.node.
  EXPECT_NE(error([&](json& t) {
              slice_of(t, f0)["name"] = "1B1";
            }).find("('1B1'): field 'name' is not '" + node_label(g.node(f0)) + "'"),
            std::string::npos);
  // Two compute slices of one stream at once.
  const std::vector<int>& order = g.stream_order(g.node(f0).stream);
  ASSERT_GE(order.size(), 2U);
  const std::string overlapping = error([&](json& t) {
    json& later = slice_of(t, order[1]);
    later["ts"] = slice_of(t, order[0])["ts"].get<double>() + 1;
  });
  EXPECT_NE(overlapping.find("ends at"), std::string::npos) << overlapping;
  EXPECT_NE(overlapping.find("on stream compute of device 0 (its slices run one at a time, in "
                             "the plan's order)"),
            std::string::npos)
      << overlapping;
  EXPECT_EQ(overlapping.find('\n'), std::string::npos);
}

// A slice that disagrees with its node names the field, its value and the plan's.
TEST(TraceTimes, AMismatchNamesTheFieldAndBothValues) {
  const Plan plan = small_plan();
  const TaskGraph& g = plan.graph;
  const json good = perfetto_trace(g, plan.sim, "t");
  const auto error = [&](const std::function<void(json&)>& change) {
    json trace = good;
    change(trace);
    return error_of([&] { node_times_from_trace(g, trace, "t.json"); });
  };
  const int f0 = node_on(g, NodeKind::compute, 0, OpType::F);
  const std::string name = node_label(g.node(f0));
  const std::string at = "t.json: traceEvents[";
  const std::string of = "the plan's " + g.node_name(f0);
  const std::string stage = error([&](json& t) { slice_of(t, f0)["args"]["stage"] = 1; });
  EXPECT_EQ(stage.find(at), 0U) << stage;
  EXPECT_NE(stage.find("('" + name + "'): field 'args.stage' = 1, " + of +
                       " has stage 0 (a trace of another plan?)"),
            std::string::npos)
      << stage;
  const std::string mbs = error([&](json& t) { slice_of(t, f0)["args"]["microbatches"] = {1}; });
  EXPECT_NE(mbs.find("field 'args.microbatches' = [1], " + of +
                     " has micro-batches [0] (a trace of another plan?)"),
            std::string::npos)
      << mbs;
  const std::string cat = error([&](json& t) { slice_of(t, f0)["cat"] = "B"; });
  EXPECT_NE(
      cat.find("field 'cat' = \"B\", " + of + " has category \"F\" (a trace of another plan?)"),
      std::string::npos)
      << cat;
  EXPECT_NE(error([&](json& t) {
              slice_of(t, f0)["args"].erase("stage");
            }).find("field 'args.stage' is missing, " + of + " has stage 0"),
            std::string::npos);
}

// An integer field written as a float is refused as such, not as a value out of range.
TEST(TraceTimes, AnIntegerFieldWrittenAsAFloatIsRefusedAsOne) {
  const Plan plan = small_plan();
  const TaskGraph& g = plan.graph;
  const json good = perfetto_trace(g, plan.sim, "t");
  const int f0 = node_on(g, NodeKind::compute, 0, OpType::F);
  const auto error = [&](const std::function<void(json&)>& change) {
    json trace = good;
    change(trace);
    return error_of([&] { node_times_from_trace(g, trace, "t.json"); });
  };
  const std::string prefix = "('" + node_label(g.node(f0)) + "'): field '";
  EXPECT_NE(error([&](json& t) {
              slice_of(t, f0)["args"]["node"] = static_cast<double>(f0);
            }).find(prefix + "args.node' must be an integer, not " + std::to_string(f0) + ".0"),
            std::string::npos);
  EXPECT_NE(error([&](json& t) {
              slice_of(t, f0)["pid"] = 1.0;
            }).find(prefix + "pid' must be an integer, not 1.0"),
            std::string::npos);
  EXPECT_NE(error([&](json& t) {
              slice_of(t, f0)["tid"] = static_cast<double>(g.node(f0).stream + 1);
            }).find(prefix + "tid' must be an integer, not "),
            std::string::npos);
  EXPECT_NE(error([&](json& t) {
              slice_of(t, f0)["args"]["stage"] = 0.0;
            }).find(prefix + "args.stage' must be an integer, not 0.0"),
            std::string::npos);
  EXPECT_NE(error([&](json& t) {
              slice_of(t, f0)["args"]["microbatches"] = {0.0};
            }).find(prefix + "args.microbatches' must be an array of integers, not [0.0]"),
            std::string::npos);
}

// A slice that names no node is another event, with or without args; one that has a node's name
// and track but lost its args.node is named in the error that the node has no slice.
TEST(TraceTimes, ASliceWithoutArgsNodeIsSkippedAndNamedWhenItsNodeIsMissing) {
  const Plan plan = small_plan();
  const TaskGraph& g = plan.graph;
  const json good = perfetto_trace(g, plan.sim, "t");
  const int f0 = node_on(g, NodeKind::compute, 0, OpType::F);
  const auto error = [&](const std::function<void(json&)>& change) {
    json trace = good;
    change(trace);
    std::string message = error_of([&] { node_times_from_trace(g, trace, "t.json"); });
    EXPECT_EQ(file_error(g, trace.dump()), message);
    return message;
  };
  std::size_t index = 0;
  for (const json& event : good["traceEvents"]) {
    if (event.value("ph", "") == "X" && event["args"]["node"] == f0) break;
    ++index;
  }
  const std::string expected = "t.json: no slice for " + g.node_name(f0) + ": the slice named '" +
                               node_label(g.node(f0)) + "' (traceEvents[" + std::to_string(index) +
                               "]) on its track has no 'args.node'";
  EXPECT_EQ(error([&](json& t) { slice_of(t, f0).erase("args"); }), expected);
  EXPECT_EQ(error([&](json& t) { slice_of(t, f0)["args"] = json::object(); }), expected);
  EXPECT_EQ(error([&](json& t) { slice_of(t, f0)["args"].erase("node"); }), expected);
  // On another device's process it is not taken for the node's.
  EXPECT_EQ(error([&](json& t) {
              json& slice = slice_of(t, f0);
              slice.erase("args");
              slice["pid"] = 2;
            }),
            "t.json: no slice for " + g.node_name(f0));
  // Beside the node's own slice, a copy without args is skipped.
  EXPECT_EQ(error([&](json& t) {
              json copy = slice_of(t, f0);
              copy.erase("args");
              t["traceEvents"].push_back(copy);
            }),
            "<no error>");
}

// An overlapped pair's two ops run at once: the second on its device's "compute (overlapped)"
// thread, or (traces written before that thread) on the stream's own.
TEST(TraceTimes, AnOverlappedPairIsReadOnEitherThread) {
  PlanRequest r;
  r.profile = uniform_profile(parse_uniform("1:1:1:0.1", ""), 4, 2);
  r.devices = 2;
  r.chunks = 2;
  r.microbatches = 4;
  r.schedule = "dualpipe-v";
  r.backward = BackwardMode::twobp;
  r.profile.overlap = {0.5, "test"};
  const Plan plan = make_plan(r);
  const std::vector<OverlapPair> pairs = overlap_pairs(plan.graph);
  ASSERT_FALSE(pairs.empty());
  const json trace = perfetto_trace(plan.graph, plan.sim, "t");
  EXPECT_EQ(error_of([&] { node_times_from_trace(plan.graph, trace, "t.json"); }), "<no error>");
  json before = trace;
  for (const OverlapPair& pair : pairs)
    slice_of(before, pair.second)["tid"] = plan.graph.node(pair.second).stream + 1;
  const auto times = node_times_from_trace(plan.graph, before, "t.json");
  for (std::size_t i = 0; i < times.size(); ++i)
    EXPECT_NEAR(times[i].start_us, plan.sim.times[i].start_us, 1e-6);
  // Whichever thread: the node after a pair may not start before the pair ends.
  const OverlapPair& pair = pairs.front();
  const std::vector<int>& order = plan.graph.stream_order(plan.graph.node(pair.second).stream);
  const auto at = std::find(order.begin(), order.end(), pair.second);
  ASSERT_NE(at + 1, order.end());
  json early = trace;
  slice_of(early, *(at + 1))["ts"] = slice_of(early, pair.second)["ts"].get<double>();
  EXPECT_NE(error_of([&] {
              node_times_from_trace(plan.graph, early, "t.json");
            }).find("(its slices run one at a time, in the plan's order)"),
            std::string::npos);
}

TEST(TraceTimes, HostTimesRoundTripAndAreOptional) {
  const Plan plan = small_plan();
  SimResult measured = plan.sim;
  std::vector<NodeTime> none;
  node_times_from_trace(plan.graph, perfetto_trace(plan.graph, measured, "t"), "t.json", &none);
  EXPECT_TRUE(none.empty());  // a prediction's trace has no host clock
  for (const NodeTime& t : measured.times)
    measured.host_times.push_back({t.start_us - 7, t.start_us - 2});
  const json trace = perfetto_trace(plan.graph, measured, "t");
  std::vector<NodeTime> host;
  node_times_from_trace(plan.graph, trace, "t.json", &host);
  ASSERT_EQ(host.size(), measured.times.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    EXPECT_NEAR(host[i].start_us, measured.times[i].start_us - 7, 1e-6);
    EXPECT_NEAR(host[i].end_us, measured.times[i].start_us - 2, 1e-6);
  }
  json bad = trace;
  first_slice(bad)["args"]["host_end_us"] = "late";
  const std::string message =
      error_of([&] { node_times_from_trace(plan.graph, bad, "t.json", &host); });
  EXPECT_NE(message.find("t.json: traceEvents["), std::string::npos) << message;
  EXPECT_NE(message.find("field 'args.host_end_us' must be a number"), std::string::npos)
      << message;
  json partial = trace;
  first_slice(partial)["args"].erase("host_start_us");  // one of the pair: malformed
  EXPECT_NE(error_of([&] {
              node_times_from_trace(plan.graph, partial, "t.json", &host);
            }).find("field 'args.host_start_us' must be a number"),
            std::string::npos);
}

// Host times are on every slice or on none; a slice's host end is not before its start.
TEST(TraceTimes, HostTimesOnSomeSlicesOnlyOrEndingBeforeTheyBeginAreRefused) {
  const Plan plan = small_plan();
  SimResult measured = plan.sim;
  for (const NodeTime& t : measured.times)
    measured.host_times.push_back({t.start_us - 7, t.start_us - 2});
  const json with = perfetto_trace(plan.graph, measured, "t");
  const json without = perfetto_trace(plan.graph, plan.sim, "t");
  const auto error = [&](const json& trace) {
    std::vector<NodeTime> host;
    std::string message =
        error_of([&] { node_times_from_trace(plan.graph, trace, "t.json", &host); });
    EXPECT_EQ(file_error(plan.graph, trace.dump()), message);
    return message;
  };
  // The slices of a node that comes after the first slice in the file.
  std::vector<std::size_t> slices;
  for (std::size_t i = 0; i < with["traceEvents"].size(); ++i) {
    if (with["traceEvents"][i].value("ph", "") == "X") slices.push_back(i);
  }
  ASSERT_GE(slices.size(), 2U);
  const std::size_t first = slices[0], later = slices[1];
  const std::string first_name = with["traceEvents"][first]["name"].get<std::string>();
  const std::string later_name = with["traceEvents"][later]["name"].get<std::string>();

  json some = with;
  some["traceEvents"][later]["args"].erase("host_start_us");
  some["traceEvents"][later]["args"].erase("host_end_us");
  EXPECT_EQ(error(some), "t.json: traceEvents[" + std::to_string(later) + "] ('" + later_name +
                             "'): field 'args.host_start_us' is missing, but traceEvents[" +
                             std::to_string(first) + "] ('" + first_name +
                             "') has host times (a trace has them on every slice or on none)");
  json added = without;
  added["traceEvents"][later]["args"]["host_end_us"] = 5.0;
  EXPECT_EQ(error(added), "t.json: traceEvents[" + std::to_string(later) + "] ('" + later_name +
                              "'): field 'args.host_end_us' is given, but traceEvents[" +
                              std::to_string(first) + "] ('" + first_name +
                              "') has no host times (a trace has them on every slice or on none)");
  json backwards = with;
  backwards["traceEvents"][later]["args"]["host_start_us"] = 20.0;
  backwards["traceEvents"][later]["args"]["host_end_us"] = 10.0;
  EXPECT_EQ(error(backwards), "t.json: traceEvents[" + std::to_string(later) + "] ('" + later_name +
                                  "'): field 'args.host_end_us' = 10.0 is before "
                                  "'args.host_start_us' = 20.0 (the host finished queuing the "
                                  "node before it began)");
  // Equal is allowed; so is a trace with none at all.
  backwards["traceEvents"][later]["args"]["host_end_us"] = 20.0;
  EXPECT_EQ(error(backwards), "<no error>");
  EXPECT_EQ(error(without), "<no error>");
}

// A measured step where one compute op started 500 us after its inputs were ready, its host
// thread having begun queuing it 300 us after that: a 500 us stall, 300 us of it the host's.
TEST(TraceDiff, SplitsAStallIntoHostAndGpuParts) {
  const Plan plan = small_plan();
  int late = -1;  // the last compute op of device 1: every input of it ends before it starts
  for (int id = 0; id < plan.graph.node_count(); ++id) {
    const Node& node = plan.graph.node(id);
    if (node.kind == NodeKind::compute && node.device == 1) late = id;
  }
  ASSERT_GE(late, 0);
  SimResult measured = plan.sim;
  measured.times[static_cast<std::size_t>(late)].start_us += 500;
  measured.times[static_cast<std::size_t>(late)].end_us += 500;
  measured.host_times = plan.sim.times;  // every other op queued as it became ready
  measured.host_times[static_cast<std::size_t>(late)].start_us += 300;

  const TraceDiff diff = diff_trace(plan.graph, plan.sim, measured);
  ASSERT_EQ(diff.devices.size(), 2U);
  EXPECT_NEAR(diff.devices[1].measured_stall_us, 500, 1e-6);
  EXPECT_NEAR(diff.devices[1].measured_host_stall_us, 300, 1e-6);
  EXPECT_NEAR(diff.devices[0].measured_host_stall_us, 0, 1e-6);
  ASSERT_EQ(diff.stalls.size(), 1U);
  EXPECT_EQ(diff.stalls[0].node, late);
  EXPECT_NEAR(diff.stalls[0].stall_us, 500, 1e-6);
  EXPECT_NEAR(diff.stalls[0].host_late_us, 300, 1e-6);
  EXPECT_FALSE(diff.stalls[0].last_input.empty());
  const std::string text = format_diff(diff, 10);
  EXPECT_NE(text.find("of the measured stall, the host queued late: 0.0 300.0 us"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("stalls (1 of 1 of 100 us or more, longest first)"), std::string::npos)
      << text;
  const json j = diff_to_json(diff, 10);
  EXPECT_NEAR(j["stalls"][0]["host_late_us"].get<double>(), 300, 1e-6);
  EXPECT_NEAR(j["devices"][1]["measured_host_stall_us"].get<double>(), 300, 1e-6);
  // --top cuts the lists, not the counts.
  const json one = diff_to_json(diff, 1);
  EXPECT_EQ(one["ops"].size(), 1U);
  EXPECT_EQ(one["overall"]["ops_total"].get<std::size_t>(), diff.ops.size());
  EXPECT_GT(diff.ops.size(), 1U);
  EXPECT_EQ(one["overall"]["stalls_total"].get<std::size_t>(), 1U);

  EXPECT_EQ(text.find("host clock ahead"), std::string::npos) << text;
  EXPECT_EQ(j["devices"][1]["host_clock_shift_us"].get<double>(), 0.0);

  // Device 1's host clock 2 ms ahead of its GPU's (every op seems queued after it started): its
  // host times move back by the largest lead, and the split is the same.
  SimResult ahead = measured;
  for (int id = 0; id < plan.graph.node_count(); ++id) {
    if (plan.graph.node(id).device == 1) {
      ahead.host_times[static_cast<std::size_t>(id)].start_us += 2000;
      ahead.host_times[static_cast<std::size_t>(id)].end_us += 2000;
    }
  }
  const TraceDiff shifted = diff_trace(plan.graph, plan.sim, ahead);
  EXPECT_NEAR(shifted.devices[1].host_clock_shift_us, 2000, 1e-6);
  EXPECT_EQ(shifted.devices[0].host_clock_shift_us, 0.0);
  EXPECT_NEAR(shifted.devices[1].measured_host_stall_us, 300, 1e-6);
  EXPECT_NEAR(shifted.stalls.at(0).host_late_us, 300, 1e-6);
  EXPECT_NE(format_diff(shifted, 10)
                .find("(host clock ahead of the GPU's on 1 of 2 devices, by 2000.0 to 2000.0 us"),
            std::string::npos)
      << format_diff(shifted, 10);

  // Without host times the split is unknown, the stall still listed.
  measured.host_times.clear();
  const TraceDiff unknown = diff_trace(plan.graph, plan.sim, measured);
  EXPECT_LT(unknown.devices[1].measured_host_stall_us, 0);
  ASSERT_EQ(unknown.stalls.size(), 1U);
  EXPECT_LT(unknown.stalls[0].host_late_us, 0);
  EXPECT_EQ(format_diff(unknown, 10).find("host queued late"), std::string::npos);
  EXPECT_TRUE(diff_to_json(unknown, 10)["stalls"][0]["host_late_us"].is_null());
}

// A p2 concatenated over 96 micro-batches has a label of 290 characters: its row keeps its
// columns and its own line.
TEST(TraceDiff, ARowWithALongLabelKeepsItsColumns) {
  PlanRequest r;
  r.profile = uniform_profile(parse_uniform("1:1:1:0", ""), 2, 1);
  r.devices = 2;
  r.microbatches = 96;
  r.backward = BackwardMode::twobp;
  r.p2_concat = 0;
  const Plan plan = make_plan(r);
  const std::string text = format_diff(diff_trace(plan.graph, plan.sim, plan.sim), -1);
  int long_rows = 0;
  std::size_t begin = 0;
  for (std::size_t end = text.find('\n'); end != std::string::npos;
       begin = end + 1, end = text.find('\n', begin)) {
    const std::string line = text.substr(begin, end - begin);
    if (line.find("P2_0+1+2+") == std::string::npos) continue;
    ++long_rows;
    EXPECT_NE(line.find("+94+95 "), std::string::npos) << line;
    EXPECT_EQ(line.substr(line.size() - 5), "+0.0%") << line;
  }
  EXPECT_EQ(long_rows, 2) << text;  // one per device
}

// dualpipe-v on uniform stages (F = P1 = P2 = 10 ms) with a planned overlap efficiency of 0.5.
Plan paired_plan() {
  PlanRequest r;
  r.profile = uniform_profile(parse_uniform("10:10:10:0", ""), 8, 1);
  r.profile.overlap = {0.5, "test"};
  r.devices = 4;
  r.chunks = 2;
  r.microbatches = 8;
  r.schedule = "dualpipe-v";
  r.backward = BackwardMode::twobp;
  r.backward = BackwardMode::twobp;
  return make_plan(r);
}

// The pairs' measured efficiency: as planned when the step ran as predicted; 0 when every pair
// took its two ops' time in sequence.
TEST(TraceDiff, MeasuresThePairsOverlapEfficiencyFromTheirOpsRunAlone) {
  const Plan plan = paired_plan();
  const std::vector<OverlapPair> pairs = overlap_pairs(plan.graph);
  ASSERT_FALSE(pairs.empty());
  const TraceDiff as_planned = diff_trace(plan.graph, plan.sim, plan.sim);
  EXPECT_EQ(as_planned.pairs.pairs, static_cast<int>(pairs.size()));
  EXPECT_NEAR(as_planned.pairs.planned_efficiency, 0.5, 1e-12);
  EXPECT_NEAR(as_planned.pairs.measured_efficiency, 0.5, 1e-9);
  EXPECT_GT(as_planned.pairs.measured_from, 0);
  EXPECT_NEAR(as_planned.pairs.measured_median_us, as_planned.pairs.predicted_median_us, 1e-9);

  // Each pair's second op starts when its first ends: the two in sequence.
  SimResult sequential = plan.sim;
  for (const OverlapPair& pair : pairs) {
    NodeTime& a = sequential.times[static_cast<std::size_t>(pair.first)];
    NodeTime& b = sequential.times[static_cast<std::size_t>(pair.second)];
    const double a_us = plan.graph.node(pair.first).duration_us;
    const double b_us = plan.graph.node(pair.second).duration_us;
    a.end_us = a.start_us + a_us;
    b.start_us = a.end_us;
    b.end_us = b.start_us + b_us;
  }
  const TraceDiff diff = diff_trace(plan.graph, plan.sim, sequential);
  EXPECT_NEAR(diff.pairs.measured_efficiency, 0, 1e-9);
  EXPECT_GT(diff.pairs.measured_median_us, diff.pairs.predicted_median_us);
  const std::string text = format_diff(diff, 5);
  EXPECT_NE(text.find("overlapped pairs: " + std::to_string(pairs.size())), std::string::npos)
      << text;
  EXPECT_NE(text.find("overlap efficiency planned 0.50, measured 0.00"), std::string::npos) << text;
  const json j = diff_to_json(diff, 5);
  EXPECT_NEAR(j["pairs"]["measured_efficiency"].get<double>(), 0, 1e-9);

  // A plan without pairs reports none.
  const Plan plain = small_plan();
  const TraceDiff none = diff_trace(plain.graph, plain.sim, plain.sim);
  EXPECT_EQ(none.pairs.pairs, 0);
  EXPECT_EQ(format_diff(none, 5).find("overlapped pairs"), std::string::npos);
  EXPECT_FALSE(diff_to_json(none, 5).contains("pairs"));
}

}  // namespace
}  // namespace pipeplan
