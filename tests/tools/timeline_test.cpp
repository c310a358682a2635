#include "tools/timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "planner/base/error.h"

namespace pipeplan {
namespace {

// Two devices, two micro-batches, 2BP; compute streams only (the timeline draws nothing else).
// Device 0: 0F0 0F1 · 0P1_0 · 0P1_1 0P2_0+1; device 1: · 1F0 1P1_0 1F1 1P1_1 1P2_0 1P2_1.
struct Plan {
  TaskGraph graph;
  SimResult sim;
  void op(int device, OpType type, std::vector<int> mbs, double start_us, double end_us) {
    Node node;
    node.op = type;
    node.device = node.stage = device;
    node.stream = graph.stream(device, StreamRole::compute);
    node.microbatches = std::move(mbs);
    node.duration_us = end_us - start_us;
    graph.add_node(std::move(node));
    sim.times.push_back({start_us, end_us});
  }
  // One end of a BPipe move on `device`'s transfer stream to `peer`.
  int transfer(int device, int peer, NodeKind kind, Transfer what, const std::string& label, int mb,
               double start_us, double end_us) {
    Node node;
    node.kind = kind;
    node.transfer = what;
    node.device = device;
    node.stage = 0;
    node.peer = peer;
    node.stream = graph.stream(device, StreamRole::transfer, peer);
    node.microbatches = {mb};
    node.duration_us = end_us - start_us;
    node.bytes = std::int64_t{1} << 30;
    set_label(node, label);
    sim.times.push_back({start_us, end_us});
    return graph.add_node(std::move(node));
  }
};

Plan two_device_plan() {
  Plan p;
  p.graph.meta.devices = 2;
  p.graph.meta.microbatches = 2;
  p.graph.meta.schedule = "1f1b";
  p.graph.meta.backward = BackwardMode::twobp;
  p.graph.meta.stage_layers = {{0, 9}, {9, 9}};
  p.graph.meta.memory_limit_bytes = {80.0 * (1 << 30), 80.0 * (1 << 30)};
  p.graph.schedule.stage_device = {0, 1};
  p.op(0, OpType::F, {0}, 0, 1000);
  p.op(0, OpType::F, {1}, 1000, 2000);
  p.op(0, OpType::P1, {0}, 3200, 4200);
  p.op(0, OpType::P1, {1}, 5200, 6200);
  p.op(0, OpType::P2, {0, 1}, 6200, 7000);
  p.op(1, OpType::F, {0}, 1100, 2100);
  p.op(1, OpType::P1, {0}, 2100, 3100);
  p.op(1, OpType::F, {1}, 3100, 4100);
  p.op(1, OpType::P1, {1}, 4100, 5100);
  p.op(1, OpType::P2, {0}, 5100, 5600);
  p.op(1, OpType::P2, {1}, 5600, 6100);
  p.sim.makespan_us = 7000;
  p.sim.max_stage_span_us = 7000;
  p.sim.bubble_ratio = 1 - 9800.0 / 14000;
  p.sim.span_bubble_ratio = p.sim.bubble_ratio;
  p.sim.tokens_per_s = 1170285.7;
  p.sim.devices.resize(2);
  p.sim.devices[0] = {4800, 0, 0, 7000, 7000, 1 - 4800.0 / 7000, std::int64_t{3} << 30, {}};
  p.sim.devices[1] = {5000, 0, 1100, 6100, 5000, 1 - 5000.0 / 7000, std::int64_t{1} << 29, {}};
  return p;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

// Code points outside ANSI escape sequences (ESC '[' ... final letter).
int visible_width(const std::string& line) {
  int width = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b') {
      while (i < line.size() && !std::isalpha(static_cast<unsigned char>(line[i])))
        ++i;
      continue;
    }
    if ((static_cast<unsigned char>(line[i]) & 0xC0) != 0x80) ++width;
  }
  return width;
}

// The timeline cells of one device row (after "dev N │"), idle dots dropped.
std::string ops_of_row(const std::string& line) {
  const std::string bar = "\u2502";
  std::string ops;
  for (char c : line.substr(line.find(bar) + bar.size())) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-') ops += c;
  }
  return ops;
}

std::string row_of(const std::string& text, std::string_view prefix) {
  for (const std::string& line : lines_of(text)) {
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

TEST(Timeline, FitsWidthWithoutColor) {
  const Plan p = two_device_plan();
  for (int width : {80, 200}) {
    const std::string text = render_timeline(p.graph, p.sim, width, false);
    EXPECT_EQ(text.find('\x1b'), std::string::npos);
    const auto lines = lines_of(text);
    ASSERT_GE(lines.size(), 5u);  // two header lines, two devices, legend
    for (const std::string& line : lines)
      EXPECT_LE(visible_width(line), width) << line;
    EXPECT_EQ(visible_width(row_of(text, "dev 0")), width);
  }
}

TEST(Timeline, FitsWidthWithColor) {
  const Plan p = two_device_plan();
  for (int width : {80, 200}) {
    const std::string text = render_timeline(p.graph, p.sim, width, true);
    EXPECT_NE(text.find("\x1b[48;5;"), std::string::npos);
    EXPECT_NE(text.find("\x1b[0m"), std::string::npos);
    for (const std::string& line : lines_of(text))
      EXPECT_LE(visible_width(line), width) << line;
  }
}

TEST(Timeline, DrawsOpsInOrderWithMicrobatchNumbers) {
  const Plan p = two_device_plan();
  const std::string text = render_timeline(p.graph, p.sim, 80, false);
  // 73 columns over 7 ms: every op spans at least 5 columns, so each carries its number.
  EXPECT_EQ(ops_of_row(row_of(text, "dev 0")).substr(0, 2), "F0");
  const std::string dev0 = ops_of_row(row_of(text, "dev 0"));
  const std::string dev1 = ops_of_row(row_of(text, "dev 1"));
  auto in_order = [](const std::string& row, std::vector<std::string> marks) {
    std::size_t at = 0;
    for (const std::string& mark : marks) {
      at = row.find(mark, at);
      if (at == std::string::npos) return false;
      at += mark.size();
    }
    return true;
  };
  EXPECT_TRUE(in_order(dev0, {"F0", "F1", "b0", "b1", "w0+1"})) << dev0;
  EXPECT_TRUE(in_order(dev1, {"F0", "b0", "F1", "b1", "w0", "w1"})) << dev1;
  // Device 1 idles for its first 1.1 ms.
  const std::string row1 = row_of(text, "dev 1");
  EXPECT_NE(row1.find("\u2502\u00b7"), std::string::npos);
  EXPECT_NE(text.find("p2 (weight grad)"), std::string::npos);
  EXPECT_EQ(text.find("fused backward"), std::string::npos);  // no B in this plan
}

// F and B alternating faster than a column: the columns that hold whole ops of both kinds show
// '*' (and the legend says so) instead of whichever op came last; wide enough, none does.
TEST(Timeline, ColumnsHoldingSeveralKindsOfOpSayIt) {
  Plan p;
  p.graph.meta.devices = 1;
  p.graph.meta.microbatches = 40;
  p.graph.meta.schedule = "1f1b";
  p.graph.meta.stage_layers = {{0, 9}};
  p.graph.schedule.stage_device = {0};
  // 0..40 ms: F then B, 0.4 ms and 0.6 ms, 40 times; then 20 ms of F alone.
  double t = 0;
  for (int mb = 0; mb < 40; ++mb) {
    p.op(0, OpType::F, {mb}, t, t + 400);
    p.op(0, OpType::B, {mb}, t + 400, t + 1000);
    t += 1000;
  }
  p.op(0, OpType::F, {40}, t, t + 20000);
  p.graph.meta.microbatches = 41;
  const std::string narrow = render_timeline(p.graph, p.sim, 80, false);
  const std::string bar = "\u2502";
  const std::string line = row_of(narrow, "dev 0");
  const std::string cells = line.substr(line.find(bar) + bar.size());
  // 73 columns over 60 ms, 0.82 ms each: most of the first 48 hold a whole F or B beside the
  // other kind. (ASCII cells: the idle dot is the only wider character, and there is none.)
  ASSERT_GE(cells.size(), 48U) << line;
  const auto stars = std::count(cells.begin(), cells.begin() + 48, '*');
  EXPECT_GE(stars, 24) << line;
  EXPECT_NE(ops_of_row(line).find("F40"), std::string::npos) << line;  // the long F's label
  EXPECT_NE(narrow.find("* ops of several kinds in one column"), std::string::npos) << narrow;
  const std::string wide = render_timeline(p.graph, p.sim, 400, false);
  EXPECT_EQ(row_of(wide, "dev 0").find('*'), std::string::npos);
  EXPECT_EQ(wide.find("several kinds"), std::string::npos);
}

TEST(Timeline, HeaderShowsMillisecondTicks) {
  const Plan p = two_device_plan();
  const auto lines = lines_of(render_timeline(p.graph, p.sim, 80, false));
  EXPECT_NE(lines[0].find("ms"), std::string::npos);
  EXPECT_NE(lines[0].find("\u25020 "), std::string::npos);
  EXPECT_NE(lines[0].find(" 5 "), std::string::npos);
  EXPECT_NE(lines[1].find("\u252c"), std::string::npos);
}

TEST(Timeline, RejectsTooNarrowWidth) {
  const Plan p = two_device_plan();
  EXPECT_THROW(render_timeline(p.graph, p.sim, 10, false), Error);
}

// The two-device plan with device 0 evicting micro-batch 0's stash to device 1 after its forward
// and loading it back before its p1.
Plan bpipe_plan() {
  Plan p = two_device_plan();
  for (const auto& [what, label, first] :
       {std::tuple{Transfer::evict, "evict 0F0", 0}, std::tuple{Transfer::load, "load 0F0", 1}}) {
    const double start = first == 0 ? 1000 : 2200;
    const int from = first, to = 1 - first;
    const int send = p.transfer(from, to, NodeKind::send, what, label, 0, start, start + 800);
    const int recv = p.transfer(to, from, NodeKind::recv, what, label, 0, start, start + 800);
    p.graph.node(send).match = recv;
    p.graph.node(recv).match = send;
  }
  return p;
}

TEST(Timeline, DrawsBpipeTransferRowsUnderBothEnds) {
  const Plan p = bpipe_plan();
  for (const bool color : {false, true}) {
    const std::string text = render_timeline(p.graph, p.sim, 80, color);
    for (const std::string& line : lines_of(text))
      EXPECT_LE(visible_width(line), 80) << line;
    if (color) {
      EXPECT_NE(text.find("\x1b[48;5;135m"), std::string::npos);  // evict
      continue;
    }
    const auto lines = lines_of(text);
    // dev 0, its transfer row to 1, dev 1, its transfer row to 0.
    std::size_t dev0 = 0;
    while (dev0 < lines.size() && lines[dev0].rfind("dev 0", 0) != 0)
      ++dev0;
    ASSERT_LT(dev0 + 3, lines.size()) << text;
    EXPECT_EQ(lines[dev0 + 1].rfind("   \u21941 \u2502", 0), 0u) << lines[dev0 + 1];
    EXPECT_EQ(lines[dev0 + 2].rfind("dev 1", 0), 0u) << lines[dev0 + 2];
    EXPECT_EQ(lines[dev0 + 3].rfind("   \u21940 \u2502", 0), 0u) << lines[dev0 + 3];
    // 0.8 ms of 7 ms over 73 columns: runs of 8-9 cells carrying the micro-batch number, the
    // evict before the load on both ends.
    for (const std::size_t row : {dev0 + 1, dev0 + 3}) {
      const std::string ops = ops_of_row(lines[row]);
      EXPECT_EQ(ops.substr(0, 3), "e0e") << ops;
      EXPECT_NE(ops.find("l0l"), std::string::npos) << ops;
      EXPECT_EQ(ops.find_first_not_of("e0l"), std::string::npos) << ops;
    }
    // The transfer row lines up with the compute rows: same width.
    EXPECT_EQ(visible_width(lines[dev0 + 1]), visible_width(lines[dev0]));
    EXPECT_NE(text.find("e evict (stash to the acceptor)"), std::string::npos) << text;
    EXPECT_NE(text.find("l load (stash back to the evictor)"), std::string::npos) << text;
    EXPECT_NE(text.find("\u2194N transfers with dev N"), std::string::npos) << text;
  }
  // Without transfers, no transfer rows and no transfer legend.
  const std::string plain =
      render_timeline(two_device_plan().graph, two_device_plan().sim, 80, false);
  EXPECT_EQ(plain.find("\u2194"), std::string::npos);
  EXPECT_EQ(plain.find("evict"), std::string::npos);
}

// The rows, legend and summary come from the transfer kind: labels that say nothing (the
// same on both halves) draw the same picture.
TEST(Timeline, BpipeRowsFollowTheTransferKindNotTheLabel) {
  const Plan p = bpipe_plan();
  Plan renamed = p;
  for (int id = 0; id < renamed.graph.node_count(); ++id) {
    Node& n = renamed.graph.node(id);
    if (n.kind != NodeKind::compute) set_label(n, "m" + std::to_string(std::min(id, n.match)));
  }
  for (const bool color : {false, true}) {
    EXPECT_EQ(render_timeline(renamed.graph, renamed.sim, 80, color),
              render_timeline(p.graph, p.sim, 80, color));
  }
  EXPECT_EQ(render_summary(renamed.graph, renamed.sim), render_summary(p.graph, p.sim));
}

TEST(Timeline, SummaryListsBpipePairs) {
  const Plan p = bpipe_plan();
  const std::string text = render_summary(p.graph, p.sim);
  EXPECT_NE(text.find("BPipe dev 0 -> dev 1: evicts 1 stash, 2.00 GiB both ways, link 1.6 ms"),
            std::string::npos)
      << text;
  for (const std::string& line : lines_of(text))
    EXPECT_LE(visible_width(line), 80) << line;
  EXPECT_EQ(render_summary(two_device_plan().graph, two_device_plan().sim).find("BPipe"),
            std::string::npos);
}

// Peaks below a GiB (a CPU plan's) read in MiB or KiB, not as 0.00 GiB; the limit column keeps
// its own unit.
TEST(Timeline, SmallPeaksReadInMiBOrKiB) {
  Plan p = two_device_plan();
  p.sim.devices[0].peak_memory_bytes = 3 * 1024 * 1024 + 512 * 1024;
  p.sim.devices[1].peak_memory_bytes = 1024 * 1024;
  std::string text = render_summary(p.graph, p.sim);
  EXPECT_NE(text.find("peak MiB  limit GiB"), std::string::npos) << text;
  EXPECT_NE(text.find("3.50      80.00"), std::string::npos) << text;
  p.graph.meta.memory_limit_bytes.assign(p.graph.meta.memory_limit_bytes.size(), 4096.0);
  p.sim.devices[0].peak_memory_bytes = 2048;
  p.sim.devices[1].peak_memory_bytes = 512;
  text = render_summary(p.graph, p.sim);
  EXPECT_NE(text.find("peak KiB  limit KiB"), std::string::npos) << text;
  EXPECT_NE(text.find("2.00       4.00"), std::string::npos) << text;
}

TEST(Timeline, SummaryReportsDevicesAndTotals) {
  Plan p = two_device_plan();
  std::string text = render_summary(p.graph, p.sim);
  for (const std::string& line : lines_of(text))
    EXPECT_LE(visible_width(line), 80) << line;
  EXPECT_NE(text.find("4.800"), std::string::npos);  // dev 0 busy ms
  EXPECT_NE(text.find("31.4"), std::string::npos);   // dev 0 bubble %
  EXPECT_NE(text.find("3.00"), std::string::npos);   // dev 0 peak GiB
  EXPECT_NE(text.find("80.00"), std::string::npos);  // limit GiB
  EXPECT_NE(text.find("peak GiB  limit GiB"), std::string::npos);
  // This graph has no model: the stages' layer indices as they are.
  EXPECT_NE(text.find("0 (layers 0-8)"), std::string::npos);
  EXPECT_NE(text.find("1 (layers 9-17)"), std::string::npos);
  EXPECT_NE(text.find("7.000 ms"), std::string::npos);  // makespan
  EXPECT_NE(text.find("30.0 %"), std::string::npos);    // bubble ratio
  EXPECT_NE(text.find("1170286"), std::string::npos);   // tokens/s
  EXPECT_NE(text.find("MFU (PaLM model FLOPs)"), std::string::npos);
  EXPECT_NE(text.find("n/a"), std::string::npos);
  p.sim.mfu = 0.412;
  text = render_summary(p.graph, p.sim);
  EXPECT_NE(text.find("41.2 %"), std::string::npos);
  EXPECT_EQ(text.find("n/a"), std::string::npos);
}

}  // namespace
}  // namespace pipeplan
