#include "planner/graph/trace.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "tests/cli_support.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

using nlohmann::json;

// Two devices, one stage each, two micro-batches, 2BP with a concatenated P2 on device 0.
// Compute costs: F 1000 us, P1 1000 us, P2 500 us per micro-batch; every transfer 100 us.
struct HandBuilt {
  TaskGraph graph;
  SimResult sim;

  int add(Node node, double start_us, double end_us) {
    node.stream = graph.stream(node.device,
                               node.kind == NodeKind::compute ? StreamRole::compute
                               : node.kind == NodeKind::send  ? StreamRole::send
                                                              : StreamRole::recv,
                               node.peer);
    node.duration_us = end_us - start_us;
    const int id = graph.add_node(std::move(node));
    sim.times.resize(static_cast<std::size_t>(id) + 1);
    sim.times[static_cast<std::size_t>(id)] = {start_us, end_us};
    return id;
  }
  int compute(int device, OpType op, const std::vector<int>& mbs, std::string label, double start,
              double end) {
    Node node;
    node.op = op;
    node.device = node.stage = device;
    node.microbatches = mbs;
    set_label(node, std::move(label));
    node.alloc_bytes = op == OpType::F ? 1 << 20 : 0;
    return add(std::move(node), start, end);
  }
  // Adds the send/recv pair that carries `producer`'s output to `consumer` on `to`.
  void transfer(int producer, int to, double start, double end, double recv_start) {
    const Node& p = graph.node(producer);
    Node send;
    send.kind = NodeKind::send;
    send.op = p.op;
    send.transfer = p.op == OpType::F ? Transfer::activation : Transfer::gradient;
    send.device = p.device;
    send.stage = p.stage;
    send.microbatches = p.microbatches;
    send.bytes = 4096;
    send.peer = to;
    set_label(send, node_label(p));
    Node recv = send;
    recv.kind = NodeKind::recv;
    recv.device = to;
    recv.peer = p.device;
    const int s = add(send, start, end);
    const int r = add(recv, recv_start, end);
    graph.node(s).match = r;
    graph.node(r).match = s;
    graph.add_data_edge(producer, s);
    graph.add_data_edge(s, r);
    last_recv = r;
  }
  int last_recv = -1;
};

HandBuilt two_device_plan() {
  HandBuilt b;
  b.graph.meta.devices = 2;
  b.graph.meta.microbatches = 2;
  b.graph.meta.schedule = "1f1b";
  b.graph.meta.backward = BackwardMode::twobp;
  b.graph.schedule.family = "1f1b";
  b.graph.schedule.stage_device = {0, 1};
  const int f00 = b.compute(0, OpType::F, {0}, "0F0", 0, 1000);
  b.transfer(f00, 1, 1000, 1100, 1000);
  const int r0 = b.last_recv;
  const int f01 = b.compute(0, OpType::F, {1}, "0F1", 1000, 2000);
  b.transfer(f01, 1, 2000, 2100, 2000);
  const int r1 = b.last_recv;
  const int f10 = b.compute(1, OpType::F, {0}, "1F0", 1100, 2100);
  b.graph.add_data_edge(r0, f10);
  const int g10 = b.compute(1, OpType::P1, {0}, "1P1_0", 2100, 3100);
  b.transfer(g10, 0, 3100, 3200, 3100);
  const int rg0 = b.last_recv;
  const int f11 = b.compute(1, OpType::F, {1}, "1F1", 3100, 4100);
  b.graph.add_data_edge(r1, f11);
  const int g11 = b.compute(1, OpType::P1, {1}, "1P1_1", 4100, 5100);
  b.transfer(g11, 0, 5100, 5200, 5100);
  const int rg1 = b.last_recv;
  b.compute(1, OpType::P2, {0}, "1P2_0", 5100, 5600);
  b.compute(1, OpType::P2, {1}, "1P2_1", 5600, 6100);
  const int p10 = b.compute(0, OpType::P1, {0}, "0P1_0", 3200, 4200);
  b.graph.add_data_edge(rg0, p10);
  const int p11 = b.compute(0, OpType::P1, {1}, "0P1_1", 5200, 6200);
  b.graph.add_data_edge(rg1, p11);
  b.compute(0, OpType::P2, {0, 1}, "0P2_0+1", 6200, 7000);

  b.sim.makespan_us = 7000;
  b.sim.max_stage_span_us = 7000;
  b.sim.devices.resize(2);
  b.sim.devices[0].busy_us = 4800;
  b.sim.devices[1].busy_us = 5000;
  b.sim.devices[0].memory_timeline = {{0, 1 << 30}, {1000, (1 << 30) + (1 << 20)}, {7000, 1 << 30}};
  b.sim.devices[1].memory_timeline = {{0, 1 << 29}, {6100, 1 << 29}};
  return b;
}

std::vector<json> events_of(const json& trace, std::string_view phase) {
  std::vector<json> out;
  for (const json& event : trace.at("traceEvents")) {
    if (event.at("ph") == phase) out.push_back(event);
  }
  return out;
}

TEST(Trace, IsValidJsonWithOneSlicePerNode) {
  const HandBuilt b = two_device_plan();
  const json trace = perfetto_trace(b.graph, b.sim, "unit");
  const json reparsed = json::parse(trace.dump());
  ASSERT_TRUE(reparsed.at("traceEvents").is_array());
  EXPECT_EQ(events_of(reparsed, "X").size(), static_cast<std::size_t>(b.graph.node_count()));
  EXPECT_EQ(reparsed.at("metadata").at("title"), "unit");
  EXPECT_EQ(reparsed.at("metadata").at("schedule"), "1f1b");
  EXPECT_EQ(reparsed.at("metadata").at("backward"), "2bp");
  EXPECT_EQ(reparsed.at("metadata").at("bpipe"), false);  // no transfer streams
  EXPECT_DOUBLE_EQ(reparsed.at("metadata").at("makespan_us").get<double>(), 7000);
}

TEST(Trace, NamesEveryDeviceAndStreamOnce) {
  const HandBuilt b = two_device_plan();
  const json trace = perfetto_trace(b.graph, b.sim, "unit");
  std::set<std::string> processes;
  for (const json& e : events_of(trace, "M")) {
    if (e.at("name") == "process_name") processes.insert(e.at("args").at("name"));
  }
  EXPECT_EQ(processes, (std::set<std::string>{"device 0", "device 1"}));
  std::map<std::pair<int, int>, std::string> threads;
  std::map<std::pair<int, int>, int> sort_index;
  for (const json& e : events_of(trace, "M")) {
    const auto key = std::make_pair(e.at("pid").get<int>(), e.value("tid", -1));
    if (e.at("name") == "thread_name") {
      EXPECT_TRUE(threads.emplace(key, e.at("args").at("name")).second);
    }
    if (e.at("name") == "thread_sort_index") sort_index[key] = e.at("args").at("sort_index");
  }
  ASSERT_EQ(threads.size(), b.graph.streams().size());  // compute, send>peer, recv<peer × 2
  std::set<std::string> names;
  for (const auto& [key, name] : threads)
    names.insert(name);
  for (const Stream& stream : b.graph.streams())
    EXPECT_TRUE(names.count(stream.name()));
  // Compute sorts before sends (1 is a device's overlapped ops: none here), sends before
  // receives.
  for (const auto& [key, name] : threads) {
    const int index = sort_index.at(key);
    if (name == "compute") {
      EXPECT_EQ(index, 0);
    } else if (name.rfind("send", 0) == 0) {
      EXPECT_GT(index, 1);
      EXPECT_LE(index, 3);
    } else {
      EXPECT_GT(index, 3) << name;
    }
  }
}

TEST(Trace, SlicesCarryNamesCategoriesAndArgs) {
  const HandBuilt b = two_device_plan();
  std::map<std::string, json> by_name;
  for (const json& e : events_of(perfetto_trace(b.graph, b.sim, "t"), "X"))
    by_name[e["name"]] = e;
  ASSERT_TRUE(by_name.count("0P1_1"));
  EXPECT_EQ(by_name["0P1_1"]["cat"], "P1");
  EXPECT_DOUBLE_EQ(by_name["0P1_1"]["ts"].get<double>(), 5200);
  EXPECT_DOUBLE_EQ(by_name["0P1_1"]["dur"].get<double>(), 1000);
  EXPECT_EQ(by_name["0P2_0+1"]["args"]["microbatches"], json({0, 1}));
  EXPECT_EQ(by_name["0F0"]["args"]["alloc_bytes"], 1 << 20);
  ASSERT_TRUE(by_name.count("send 0F1\u21921"));
  ASSERT_TRUE(by_name.count("recv 1P1_0\u21901"));
  EXPECT_EQ(by_name["send 0F1\u21921"]["cat"], "send");
  EXPECT_EQ(by_name["recv 1P1_0\u21901"]["cat"], "recv");
  EXPECT_EQ(by_name["recv 1P1_0\u21901"]["args"]["bytes"], 4096);
  EXPECT_EQ(by_name["recv 1P1_0\u21901"]["args"]["stage"], 1);
  EXPECT_EQ(by_name["recv 1P1_0\u21901"]["args"]["transfer"], "gradient");
  EXPECT_EQ(by_name["send 0F1\u21921"]["args"]["transfer"], "activation");
}

TEST(Trace, NoOverlappingSlicesOnOneThread) {
  const HandBuilt b = two_device_plan();
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> per_thread;
  for (const json& e : events_of(perfetto_trace(b.graph, b.sim, "t"), "X")) {
    const double ts = e["ts"].get<double>();
    per_thread[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(
        ts, ts + e["dur"].get<double>());
  }
  EXPECT_EQ(per_thread.size(), b.graph.streams().size());
  for (auto& [thread, slices] : per_thread) {
    std::sort(slices.begin(), slices.end());
    for (std::size_t i = 1; i < slices.size(); ++i) {
      EXPECT_LE(slices[i - 1].second, slices[i].first) << "pid " << thread.first;
    }
  }
}

// DualPipe-V's overlapped pairs: the two ops run at once, so the second is drawn on its device's
// "compute (overlapped)" thread and no thread has two slices at once.
TEST(Trace, TheSecondOpOfAnOverlappedPairHasAThreadOfItsOwn) {
  PlanRequest r = testing::uniform_request({.devices = 4,
                                            .microbatches = 8,
                                            .chunks = 2,
                                            .schedule = "dualpipe-v",
                                            .backward = BackwardMode::twobp,
                                            .comm = 0.1});
  r.profile.overlap = {0.5, "test"};
  const Plan plan = make_plan(r);
  const std::vector<OverlapPair> pairs = overlap_pairs(plan.graph);
  ASSERT_FALSE(pairs.empty());
  const json trace = perfetto_trace(plan.graph, plan.sim, "t");
  std::map<int, json> slice_of;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> per_thread;
  for (const json& e : events_of(trace, "X")) {
    slice_of[e["args"]["node"].get<int>()] = e;
    const double ts = e["ts"].get<double>();
    per_thread[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(
        ts, ts + e["dur"].get<double>());
  }
  for (auto& [thread, slices] : per_thread) {
    std::sort(slices.begin(), slices.end());
    for (std::size_t i = 1; i < slices.size(); ++i) {
      EXPECT_LE(slices[i - 1].second, slices[i].first)
          << "pid " << thread.first << " tid " << thread.second;
    }
  }
  const int streams = static_cast<int>(plan.graph.streams().size());
  for (const OverlapPair& pair : pairs) {
    const Node& second = plan.graph.node(pair.second);
    EXPECT_EQ(slice_of[pair.first]["tid"], plan.graph.node(pair.first).stream + 1);
    EXPECT_EQ(slice_of[pair.second]["tid"], streams + 1 + second.device);
    EXPECT_EQ(slice_of[pair.second]["pid"], second.device + 1);
  }
  std::map<std::pair<int, int>, std::string> thread_names;
  std::map<std::pair<int, int>, int> sort_index;
  for (const json& e : events_of(trace, "M")) {
    if (!e.contains("tid")) continue;
    const auto key = std::make_pair(e["pid"].get<int>(), e["tid"].get<int>());
    if (e["name"] == "thread_name") thread_names[key] = e["args"]["name"];
    if (e["name"] == "thread_sort_index") sort_index[key] = e["args"]["sort_index"];
  }
  for (int device = 0; device < 4; ++device) {
    const auto key = std::make_pair(device + 1, streams + 1 + device);
    EXPECT_EQ(thread_names[key], "compute (overlapped)");
    EXPECT_EQ(sort_index[key], 1);
  }
  // Every flow arrow ends on a thread that has a slice there.
  for (const char* phase : {"s", "f"}) {
    for (const json& e : events_of(trace, phase)) {
      EXPECT_TRUE(per_thread.count({e["pid"].get<int>(), e["tid"].get<int>()})) << e.dump();
    }
  }
}

TEST(Trace, FlowArrowsPairEverySendWithItsRecv) {
  const HandBuilt b = two_device_plan();
  const json trace = perfetto_trace(b.graph, b.sim, "t");
  const auto starts = events_of(trace, "s");
  const auto finishes = events_of(trace, "f");
  // Four transfers; the send→recv data edges are not drawn twice.
  ASSERT_EQ(starts.size(), 4u);
  ASSERT_EQ(finishes.size(), 4u);
  std::set<int> ids;
  for (const json& s : starts)
    EXPECT_TRUE(ids.insert(s["id"].get<int>()).second);
  for (const json& f : finishes) {
    EXPECT_EQ(f["bp"], "e");
    EXPECT_TRUE(ids.count(f["id"].get<int>()));
    const auto start = std::find_if(starts.begin(), starts.end(),
                                    [&](const json& s) { return s["id"] == f["id"]; });
    EXPECT_NE(start->at("pid"), f["pid"]);  // every transfer crosses devices
    EXPECT_LE(start->at("ts").get<double>(), f["ts"].get<double>());
  }
}

TEST(Trace, DrawsCrossDeviceDataEdgesWithoutSendRecv) {
  HandBuilt b;
  b.graph.meta.devices = 2;
  const int f0 = b.compute(0, OpType::F, {0}, "0F0", 0, 1000);
  const int f1 = b.compute(1, OpType::F, {0}, "1F0", 1000, 2000);
  b.graph.add_data_edge(f0, f1);
  b.sim.devices.resize(2);
  const json trace = perfetto_trace(b.graph, b.sim, "t");
  ASSERT_EQ(events_of(trace, "s").size(), 1u);
  EXPECT_EQ(events_of(trace, "s")[0]["cat"], "data");
  EXPECT_EQ(events_of(trace, "f")[0]["pid"], events_of(trace, "X")[1]["pid"]);
}

TEST(Trace, MemoryCounterPerDevice) {
  const HandBuilt b = two_device_plan();
  const auto counters = events_of(perfetto_trace(b.graph, b.sim, "t"), "C");
  ASSERT_EQ(counters.size(), 5u);
  for (const json& c : counters)
    EXPECT_EQ(c["name"], "memory (GiB)");
  EXPECT_DOUBLE_EQ(counters[0]["args"]["GiB"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(counters[1]["ts"].get<double>(), 1000);
  EXPECT_DOUBLE_EQ(counters[3]["args"]["GiB"].get<double>(), 0.5);
  EXPECT_NE(counters[0]["pid"], counters[3]["pid"]);
}

TEST(Trace, RejectsMismatchedSimulation) {
  HandBuilt b = two_device_plan();
  b.sim.times.pop_back();
  EXPECT_THROW(perfetto_trace(b.graph, b.sim, "t"), Error);
}

// Written through a temporary renamed over the target (tests/cli_support.h).
class TraceFile : public testing::TempDirTest {};

TEST_F(TraceFile, WritesFileAtomically) {
  const HandBuilt b = two_device_plan();
  int written = 0;
  testing::expect_written_atomically(dir_, "trace.json", [&](const std::filesystem::path& path) {
    const std::string title = "file " + std::to_string(++written);
    write_perfetto_trace(b.graph, b.sim, path, title);
    EXPECT_EQ(read_json_file(path).at("metadata").at("title"), title);
  });
}

}  // namespace
}  // namespace pipeplan
