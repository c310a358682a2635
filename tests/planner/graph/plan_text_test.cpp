// The plan file, version 3 (docs/reference/plan-format.md): nodes as columns, written and read
// without a JSON value per node. Every plan round-trips exactly, versions 1 and 2 are still read,
// and every bad column is one line naming the field (and node).
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/graph/taskgraph.h"
#include "planner/graph/validator.h"
#include "profiles/gpu.h"
#include "profiles/model.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

using nlohmann::json;

std::string fixture(const std::string& name) {
  const std::string path =
      std::string(PIPEPLAN_SOURCE_DIR) + "/tests/planner/graph/fixtures/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Every shape lowering makes: 2bp with concatenated P2 (several micro-batches in one node),
// interleaved stages, a V, overlapped pairs (dualpipe-v), and BPipe's evict/load transfers.
std::vector<TaskGraph> sample_graphs() {
  std::vector<TaskGraph> graphs;
  graphs.push_back(testing::uniform_plan({.devices = 2, .microbatches = 2}).graph);
  graphs.push_back(
      testing::uniform_plan(
          {.devices = 4, .microbatches = 8, .backward = BackwardMode::twobp, .p2_concat = 3})
          .graph);
  graphs.push_back(testing::uniform_plan(
                       {.devices = 4, .microbatches = 8, .chunks = 2, .schedule = "interleaved"})
                       .graph);
  graphs.push_back(testing::uniform_plan({.devices = 4,
                                          .microbatches = 8,
                                          .chunks = 2,
                                          .schedule = "zb-v",
                                          .backward = BackwardMode::twobp})
                       .graph);
  graphs.push_back(testing::uniform_plan({.devices = 4,
                                          .microbatches = 8,
                                          .chunks = 2,
                                          .schedule = "dualpipe-v",
                                          .backward = BackwardMode::twobp})
                       .graph);
  graphs.push_back(testing::uniform_bpipe_plan().graph);
  return graphs;
}

TEST(PlanText, EveryPlanRoundTripsExactly) {
  for (const TaskGraph& g : sample_graphs()) {
    const std::string text = plan_to_text(g);
    const TaskGraph back = plan_from_text(text, "p.json");
    EXPECT_EQ(plan_to_json(back), plan_to_json(g)) << g.meta.schedule;
    EXPECT_EQ(plan_to_text(back), text) << g.meta.schedule;  // bit for bit
    EXPECT_FALSE(find_violation(back).has_value()) << g.meta.schedule;
  }
}

// save_plan streams the text to its file in pieces of about 1 MiB; the file is plan_to_text's
// bytes, also across many pieces.
TEST(PlanText, SavedFileIsTheTextAcrossPieces) {
  const Plan plan = make_plan(testing::uniform_request(
      {.devices = 16, .microbatches = 1024, .backward = BackwardMode::twobp, .comm = 0.1}));
  const std::string text = plan_to_text(plan.graph);
  ASSERT_GT(text.size(), std::size_t{3} << 20) << "several pieces";
  const std::string path = ::testing::TempDir() + "/pipeplan-saved-plan.json";
  save_plan(plan.graph, path);
  std::ifstream in(path, std::ios::binary);
  const std::string saved{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::remove(path.c_str());
  EXPECT_EQ(saved.size(), text.size());
  EXPECT_TRUE(saved == text);
}

TEST(PlanText, SamplesHoldEveryTransferKind) {
  const std::string transfers =
      json::parse(plan_to_text(testing::uniform_bpipe_plan().graph))["nodes"]["transfer"];
  for (const char kind : std::string("-agel"))
    EXPECT_NE(transfers.find(kind), std::string::npos) << kind;
}

// A committed version 3 file (BPipe, 2bp, P2 over two micro-batches) and the version 2 file
// tools/calibrate/plan_json.py made from it: this reader reads both as one plan, and this writer
// writes the version 3 file byte for byte (the format does not drift unnoticed).
TEST(PlanText, TheCommittedFilesOfBothVersionsAreOnePlan) {
  const std::string v3 = fixture("bpipe-2bp.v3.json");
  const TaskGraph from_v3 = plan_from_text(v3, "bpipe-2bp.v3.json");
  const TaskGraph from_v2 = plan_from_text(fixture("bpipe-2bp.v2.json"), "bpipe-2bp.v2.json");
  EXPECT_EQ(plan_to_json(from_v3), plan_to_json(from_v2));
  EXPECT_EQ(plan_to_text(from_v3), v3);
  EXPECT_FALSE(find_violation(from_v3).has_value());
}

TEST(PlanText, ConcatenatedP2KeepsEveryMicroBatch) {
  const TaskGraph g = sample_graphs()[1];
  const TaskGraph back = plan_from_text(plan_to_text(g), "p.json");
  int concatenated = 0;
  for (int id = 0; id < g.node_count(); ++id) {
    EXPECT_EQ(back.node(id).microbatches, g.node(id).microbatches) << g.node_name(id);
    concatenated += g.node(id).microbatches.size() > 1 ? 1 : 0;
  }
  EXPECT_GT(concatenated, 0);
  EXPECT_FALSE(json::parse(plan_to_text(g))["nodes"]["more_microbatches"].empty());
}

TEST(PlanText, CustomLabelsWorkBytesAndStreamOrdersOutOfIdOrderSurvive) {
  TaskGraph g = testing::uniform_plan({.devices = 2, .microbatches = 4}).graph;
  set_label(g.node(3), "my label");
  g.node(5).work_bytes = 123456789;
  // A stream whose order is not its nodes' id order is written out in full.
  std::vector<int> order = g.stream_order(0);
  ASSERT_GE(order.size(), 2U);
  std::swap(order[0], order[1]);
  g.set_stream_order(0, order);
  const std::string text = plan_to_text(g);
  const json j = json::parse(text);
  EXPECT_TRUE(j["streams"][0].contains("order"));
  EXPECT_FALSE(j["streams"][1].contains("order"));
  EXPECT_EQ(j["nodes"]["labels"], json::parse(R"([[3, "my label"]])"));
  const TaskGraph back = plan_from_text(text, "p.json");
  EXPECT_EQ(node_label(back.node(3)), "my label");
  EXPECT_EQ(back.node(5).work_bytes, 123456789);
  EXPECT_EQ(back.stream_order(0), order);
  EXPECT_EQ(plan_to_json(back), plan_to_json(g));
}

TEST(PlanText, Versions1And2AreStillRead) {
  const TaskGraph g = testing::uniform_bpipe_plan().graph;
  json v2 = plan_to_json(g);
  EXPECT_EQ(v2["version"], 2);
  EXPECT_EQ(plan_to_json(plan_from_text(v2.dump(1), "v2.json")), v2);
  json v1 = v2;
  v1["version"] = 1;
  for (auto& node : v1["nodes"])
    node.erase("transfer");
  EXPECT_EQ(plan_to_json(plan_from_text(v1.dump(), "v1.json")), v2);
}

TEST(PlanText, ColumnsAreSmallerThanRows) {
  const TaskGraph g = testing::uniform_plan({.devices = 8, .microbatches = 32}).graph;
  const std::size_t columns = plan_to_text(g).size();
  const std::size_t rows = plan_to_json(g).dump(1).size();
  EXPECT_LT(columns * 4, rows) << columns << " bytes as columns, " << rows << " as rows";
}

// plan_from_text's error for the version 3 file after `change`.
std::string load_error(const std::function<void(json&)>& change) {
  json plan = json::parse(plan_to_text(testing::uniform_bpipe_plan().graph));
  change(plan);
  try {
    plan_from_text(plan.dump(), "p.json");
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a pipeplan error: ") + e.what();
  }
  return "<no error>";
}

// The first node whose kind code is `kind`.
std::size_t first(const json& plan, char kind) {
  return plan["nodes"]["kind"].get<std::string>().find(kind);
}

TEST(PlanText, BadColumnsAreOneLineNamingFieldAndNode) {
  EXPECT_EQ(load_error([](json& p) { p["nodes"]["stream"].push_back(0); }),
            "p.json: field 'nodes.stream' must be an array of " +
                std::to_string(testing::uniform_bpipe_plan().graph.node_count()) +
                " integers (one per node)");
  EXPECT_EQ(load_error([](json& p) { p["nodes"]["stage"][2] = 1.5; }),
            "p.json: field 'nodes.stage' must hold integers only");
  EXPECT_EQ(load_error([](json& p) { p["nodes"]["match"][0] = "x"; }),
            "p.json: field 'nodes.match' must hold integers only");
  EXPECT_EQ(load_error([](json& p) { p["nodes"]["bytes"][0] = json::array({1}); }),
            "p.json: field 'nodes.bytes' must hold integers only");
  EXPECT_EQ(load_error([](json& p) { p["nodes"]["alloc_bytes"][0] = 18446744073709551615ULL; }),
            "p.json: field 'nodes.alloc_bytes' holds an integer outside the range of int64");
  EXPECT_EQ(load_error([](json& p) { p["nodes"]["stream"][4] = 100000; }),
            "p.json: node 4: field 'stream' = 100000 is out of range [0, " +
                std::to_string(testing::uniform_bpipe_plan().graph.streams().size() - 1) + "]");
  EXPECT_EQ(load_error([](json& p) { p["nodes"]["microbatch"][1] = 8; }),
            "p.json: node 1: field 'microbatch' = 8 is out of range [0, 7]");
  EXPECT_EQ(load_error([](json& p) { p["nodes"]["duration"][0] = 99; }).substr(0, 47),
            "p.json: node 0: field 'duration' = 99 is out of");
  EXPECT_EQ(load_error([](json& p) { p["nodes"]["duration_values"][0] = -1; }),
            "p.json: field 'nodes.duration_values' holds -1: durations are numbers from 0 to "
            "1e18 us (docs/reference/limits.md)");
  EXPECT_EQ(load_error([](json& p) { p["nodes"]["kind"] = "c"; }),
            "p.json: field 'nodes.kind' must be a string of " +
                std::to_string(testing::uniform_bpipe_plan().graph.node_count()) +
                " characters (one per node)");
  EXPECT_EQ(load_error([](json& p) {
              std::string ops = p["nodes"]["op"];
              ops[6] = 'X';
              p["nodes"]["op"] = ops;
            }),
            "p.json: node 6: field 'op' must be one of the characters 'FB12O'");
  EXPECT_EQ(load_error([](json& p) {
              std::string transfers = p["nodes"]["transfer"];
              transfers[0] = 'a';
              p["nodes"]["transfer"] = transfers;
            }),
            "p.json: node 0: field 'transfer' must be '-' for a compute node and one of 'agelw' "
            "for a send or recv");
  EXPECT_EQ(load_error([](json& p) { p["nodes"]["bytes"][0] = 4; }),
            "p.json: node 0: field 'bytes' = 4 is out of range [0, 0]");
  EXPECT_EQ(load_error([](json& p) { p["nodes"]["match"][first(p, 's')] = -2; }),
            "p.json: node " +
                std::to_string(
                    first(json::parse(plan_to_text(testing::uniform_bpipe_plan().graph)), 's')) +
                ": field 'match' = -2 is out of range [-1, " +
                std::to_string(testing::uniform_bpipe_plan().graph.node_count() - 1) + "]");
  EXPECT_EQ(load_error([](json& p) { p["nodes"] = json::array(); }),
            "p.json: field 'nodes' must be an object of columns (version 3)");
  EXPECT_EQ(load_error([](json& p) { p["nodes"].erase("work_bytes"); }).substr(0, 35),
            "p.json: field 'nodes.work_bytes' mu");
  EXPECT_EQ(load_error([](json& p) { p["data_edges"].push_back(1); }),
            "p.json: field 'data_edges' must be an array of node ids, two per edge");
  EXPECT_NE(load_error([](json& p) {
              p["data_edges"].push_back(0);
              p["data_edges"].push_back(1 << 30);
            }).find("] must be [from, to] node ids"),
            std::string::npos);
  EXPECT_EQ(
      load_error([](json& p) {
        p["nodes"]["more_microbatches"] = {{3, 1}, {2, 1}};
      }),
      "p.json: field 'nodes.more_microbatches' must hold increasing node ids (entry 1: node 2 "
      "after node 3)");
  EXPECT_EQ(load_error([](json& p) {
              p["nodes"]["more_microbatches"] = {{3, 9}};
            }),
            "p.json: node 3: field 'more_microbatches' must hold integers from 0 to 7");
  EXPECT_EQ(load_error([](json& p) {
              p["nodes"]["labels"] = {{3, 4}};
            }),
            "p.json: field 'nodes.labels' must hold rows [node id, \"label\"]");
  EXPECT_EQ(load_error([](json& p) { p["nodes"]["count"] = -1; }),
            "p.json: nodes: field 'count' = -1 is out of range [0, 4194304]");
}

TEST(PlanText, ControlCharactersInNamesLabelsAndTheScheduleAreRefused) {
  const std::string why =
      "holds control character U+001B at byte 4 (names and labels are "
      "printable text)";
  EXPECT_EQ(load_error([](json& p) {
              p["nodes"]["labels"] = {{3, "0F3_\x1b[31m"}};
            }),
            "p.json: node 3: field 'nodes.labels' " + why);
  EXPECT_EQ(load_error([](json& p) { p["meta"]["schedule"] = "1f1b\x1b[2J"; }),
            "p.json: meta: field 'schedule' " + why);
  EXPECT_EQ(load_error([](json& p) { p["meta"]["gpu"] = "h100\x1b"; }),
            "p.json: meta: field 'gpu' " + why);
  EXPECT_EQ(load_error([](json& p) { p["meta"]["profile_source"] = "anal\x1b"; }),
            "p.json: meta: field 'profile_source' " + why);
  EXPECT_EQ(load_error([](json& p) { p["meta"]["model"]["name"] = "unif\x1b"; }),
            "p.json: meta.model: field 'name' " + why);
  EXPECT_EQ(load_error([](json& p) { p["meta"]["model"]["name"] = "unif\n"; }),
            "p.json: meta.model: field 'name' holds control character U+000A at byte 4 (names "
            "and labels are printable text)");
  EXPECT_EQ(load_error([](json& p) {
              std::string text = p["schedule"];
              text.replace(text.find("family=") + 7, 0, "\x1b");
              p["schedule"] = text;
            }).substr(0, 61),
            "p.json: field 'schedule': holds control character U+001B at b");
  // Quotes, braces and backslashes are printable: kept as given.
  EXPECT_EQ(load_error([](json& p) {
              p["nodes"]["labels"] = {{3, "a\"}{\\"}};
              p["meta"]["profile_source"] = "analytic \"x\" }";
            }),
            "<no error>");
  // Version 2 names the node's label field.
  json rows = plan_to_json(testing::uniform_bpipe_plan().graph);
  rows["nodes"][0]["label"] = "0F0\x1b";
  try {
    plan_from_json(rows, "p.json");
    ADD_FAILURE() << "a label with a control character was read";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "p.json: nodes[0]: field 'label' holds control character U+001B at "
                 "byte 3 (names and labels are printable text)");
  }
}

TEST(PlanText, AColumnGivenTwiceIsRefused) {
  std::string text = plan_to_text(testing::uniform_bpipe_plan().graph);
  const std::string key = "\"stage\": [";
  const std::size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  text.insert(at, "\"stage\": [0], ");
  try {
    plan_from_text(text, "p.json");
    ADD_FAILURE() << "a column given twice was read";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "p.json: field 'nodes.stage' appears twice in one object");
  }
}

TEST(PlanText, AnEmptyPlanReadsAsNoNodes) {
  json p =
      json::parse(plan_to_text(testing::uniform_plan({.devices = 2, .microbatches = 2}).graph));
  for (auto& [name, column] : p["nodes"].items()) {
    if (column.is_array()) column = json::array();
    if (column.is_string()) column = "";
  }
  p["nodes"]["count"] = 0;
  p["data_edges"] = json::array();
  const TaskGraph g = plan_from_text(p.dump(), "p.json");
  EXPECT_EQ(g.node_count(), 0);
  ASSERT_TRUE(find_violation(g).has_value());  // a plan without its schedule's nodes is invalid
}

}  // namespace
}  // namespace pipeplan

namespace pipeplan {
namespace {

// A key the format does not have is refused, at the top and in the node table where the parser
// meets it (before its value is read: a megabyte of junk under it costs nothing), in meta and in a
// stream; a compute stream has no peer.
TEST(PlanText, AKeyTheFormatDoesNotHaveIsRefusedWithTheNearestName) {
  const std::string text =
      plan_to_text(testing::uniform_plan({.devices = 2, .microbatches = 4}).graph);
  const auto refused = [&](const std::function<void(json&)>& edit) {
    json j = json::parse(text);
    edit(j);
    try {
      plan_from_text(j.dump(), "p.json");
      return std::string("accepted");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(refused([](json& j) {
              j["zzz"] = json::array({0, 0, 0});
            }),
            "p.json: field 'zzz' is not a field of a plan");
  EXPECT_EQ(refused([](json& j) {
              j["meta"]["recomputes"] = {{"method", "full"}};
            }),
            "p.json: field 'meta.recomputes' is not a field of a plan's meta (did you mean "
            "'recompute'?)");
  EXPECT_EQ(refused([](json& j) { j["nodes"]["overlaped"] = json::array({1}); }),
            "p.json: field 'nodes.overlaped' is not a field of a plan's node table (did you mean "
            "'overlapped'?)");
  EXPECT_EQ(refused([](json& j) { j["streams"][0]["ordr"] = json::array({0}); }),
            "p.json: field 'streams[0].ordr' is not a field of a stream (did you mean 'order'?)");
  EXPECT_EQ(refused([](json& j) { j["streams"][0]["peer"] = 1; }),
            "p.json: streams[0]: field 'peer' is 1 on a compute stream (it has none: -1)");
}

}  // namespace
}  // namespace pipeplan

namespace pipeplan {
namespace {

// `plan` as text with its "format" last (the JSON dump puts it between data_edges and meta).
std::string format_last(json plan) {
  const json format = plan["format"];
  plan.erase("format");
  std::string text = plan.dump();
  text.insert(text.size() - 1, ",\"format\":" + format.dump());
  return text;
}

std::string text_error(const std::string& text) {
  try {
    plan_from_text(text, "p.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// Where "format" is makes no difference: an unknown key in meta (its link, recompute) or the node
// table is refused as it is when "format" comes first, in either version; a file of another kind
// is named as such.
TEST(PlanText, AnUnknownKeyIsRefusedWhereverFormatIs) {
  const json plan = json::parse(plan_to_text(testing::uniform_bpipe_plan().graph));
  ASSERT_EQ(text_error(format_last(plan)), "<no error>");
  const auto refused = [&](const std::function<void(json&)>& edit) {
    json p = plan;
    edit(p);
    std::string last = text_error(format_last(p));
    EXPECT_EQ(last, text_error(p.dump())) << "format first and last disagree";
    return last;
  };
  EXPECT_EQ(refused([](json& p) { p["meta"]["tensor_paralel"] = 4; }),
            "p.json: field 'meta.tensor_paralel' is not a field of a plan's meta (did you mean "
            "'tensor_parallel'?)");
  EXPECT_EQ(refused([](json& p) {
              p["meta"]["recompute"] = {{"method", "block"}, {"blocks", 1}, {"blcks", 2}};
            }),
            "p.json: field 'meta.recompute.blcks' is not a field of a plan's recomputation (did "
            "you mean 'blocks'?)");
  EXPECT_EQ(refused([](json& p) { p["meta"]["link"]["jitter_us"] = 1; }),
            "p.json: field 'meta.link.jitter_us' is not a field of a link");
  EXPECT_EQ(refused([](json& p) { p["nodes"]["stages"] = json::array(); }),
            "p.json: field 'nodes.stages' is not a field of a plan's node table (did you mean "
            "'stage'?)");
  // Version 2: meta, and a node (checked by its reader).
  json rows = plan_to_json(testing::uniform_bpipe_plan().graph);
  rows["meta"]["tensor_paralel"] = 4;
  EXPECT_EQ(text_error(format_last(rows)),
            "p.json: field 'meta.tensor_paralel' is not a field of a plan's meta (did you mean "
            "'tensor_parallel'?)");
  rows["meta"].erase("tensor_paralel");
  rows["nodes"][1]["work_byte"] = 1;
  EXPECT_EQ(text_error(format_last(rows)),
            "p.json: field 'nodes[1].work_byte' is not a field of a plan's node (did you mean "
            "'work_bytes'?)");
  // Another kind of file: its format is named, not its keys.
  json other = plan;
  other["format"] = "pipeplan-profile";
  other["meta"]["tensor_paralel"] = 4;
  EXPECT_EQ(text_error(format_last(other)),
            "p.json: field 'format' is 'pipeplan-profile', expected 'pipeplan-plan'");
}

// Each version's reader reads its own edges: the other version's key would be dropped silently.
TEST(PlanText, TheOtherVersionsEdgesAreRefused) {
  const TaskGraph g = testing::uniform_bpipe_plan().graph;
  json columns = json::parse(plan_to_text(g));
  columns["edges"] = json::array({json::array({0, 1})});
  EXPECT_EQ(text_error(columns.dump()),
            "p.json: field 'edges' is a version 1 and 2 field; version 3 plans give 'data_edges'");
  json rows = plan_to_json(g);
  rows["data_edges"] = json::array({0, 1});
  EXPECT_EQ(text_error(rows.dump()),
            "p.json: field 'data_edges' is a version 3 field; version 2 plans give 'edges'");
  try {
    plan_from_json(rows, "p.json");
    ADD_FAILURE() << "a version 2 plan's data_edges was read";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "p.json: field 'data_edges' is a version 3 field; version 2 plans give 'edges'");
  }
}

// A forward, backward or P1 takes time (the planner's come from a profile's positive forward_us
// and p1_us): 0 is refused (show would print an MFU above 100 %). A P2 (p2_us may be 0), an
// optimizer step and a transfer may take none.
TEST(PlanText, ComputeNodesThatTakeTimeCannotTakeNone) {
  json p = json::parse(plan_to_text(testing::uniform_bpipe_plan().graph));
  for (json& v : p["nodes"]["duration_values"])
    v = 0;
  EXPECT_EQ(text_error(p.dump()),
            "p.json: node 0: field 'duration' is 0 us for a compute F (forwards, backwards and "
            "P1s take time; only P2s, optimizer steps and transfers may take 0)");
  json rows = plan_to_json(testing::uniform_bpipe_plan().graph);
  rows["nodes"][0]["duration_us"] = 0;
  EXPECT_EQ(text_error(rows.dump()),
            "p.json: nodes[0]: field 'duration_us' is 0 us for a compute F (forwards, backwards "
            "and P1s take time; only P2s, optimizer steps and transfers may take 0)");
  // What the planner writes with W = 0 and free transfers: P2s and messages of 0 us.
  const TaskGraph zero_w =
      testing::uniform_plan(
          {.devices = 2, .microbatches = 4, .backward = BackwardMode::twobp, .w = 0, .comm = 0})
          .graph;
  bool zero_p2 = false, zero_message = false;
  for (const Node& n : zero_w.nodes()) {
    zero_p2 = zero_p2 || (n.op == OpType::P2 && n.duration_us == 0);
    zero_message = zero_message || (n.kind != NodeKind::compute && n.duration_us == 0);
  }
  ASSERT_TRUE(zero_p2 && zero_message);
  EXPECT_EQ(text_error(plan_to_text(zero_w)), "<no error>");
  EXPECT_EQ(text_error(plan_to_json(zero_w).dump()), "<no error>");
  // An optimizer step of 0 us reads too.
  PlanRequest r = testing::uniform_request({.devices = 2, .microbatches = 2});
  r.profile = analytic_profile(model_preset("tiny"), find_gpu("h100-sxm"),
                               {.seq = 32, .micro_batch_sizes = {1}});
  json with_o = plan_to_json(make_plan(r).graph);
  bool has_o = false;
  for (json& n : with_o["nodes"]) {
    if (n["op"] == "O") {
      n["duration_us"] = 0;
      has_o = true;
    }
  }
  EXPECT_TRUE(has_o);
  EXPECT_EQ(text_error(with_o.dump()), "<no error>");
}

// Messages that say what is wrong: a number past int64 is out of range (not "not an integer"),
// a row or overlapped id no node has is out of range (not out of order), and a plan without
// streams says so (not "out of range [0, -1]").
TEST(PlanText, OutOfRangeIdsAndCountsSayWhatIsWrong) {
  const std::string text = plan_to_text(testing::uniform_bpipe_plan().graph);
  const int last = testing::uniform_bpipe_plan().graph.node_count() - 1;
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const std::size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? t : t.replace(at, from.size(), to);
  };
  EXPECT_EQ(text_error(replaced("\"count\": " + std::to_string(last + 1),
                                "\"count\": 99999999999999999999")),
            "p.json: nodes: field 'count' = 1e+20 is out of range [0, 4194304]");
  EXPECT_EQ(text_error(replaced("\"stage\": [0", "\"stage\": [99999999999999999999")),
            "p.json: field 'nodes.stage' holds an integer outside the range of int64");
  EXPECT_EQ(text_error(replaced("\"version\": 3", "\"version\": 99999999999999999999")),
            "p.json: field 'version' is 1e+20, above the largest integer read "
            "(9223372036854775807)");
  EXPECT_EQ(load_error([](json& p) {
              p["nodes"]["labels"] = {{99999, "a"}};
            }),
            "p.json: field 'nodes.labels[0]' names node 99999, out of range [0, " +
                std::to_string(last) + "]");
  EXPECT_EQ(
      load_error([](json& p) {
        p["nodes"]["labels"] = {{5, "a"}, {5, "b"}};
      }),
      "p.json: field 'nodes.labels' must hold increasing node ids (entry 1: node 5 after node "
      "5)");
  EXPECT_EQ(load_error([](json& p) { p["nodes"]["overlapped"] = {99999}; }),
            "p.json: field 'nodes.overlapped[0]' names node 99999, out of range [0, " +
                std::to_string(last) + "]");
  EXPECT_EQ(load_error([](json& p) { p["streams"] = json::array(); }),
            "p.json: field 'streams' is empty, but the plan has " + std::to_string(last + 1) +
                " nodes, each on a stream");
  json rows = plan_to_json(testing::uniform_bpipe_plan().graph);
  rows["streams"] = json::array();
  EXPECT_EQ(text_error(rows.dump()), "p.json: field 'streams' is empty, but the plan has " +
                                         std::to_string(last + 1) + " nodes, each on a stream");
}

}  // namespace
}  // namespace pipeplan
