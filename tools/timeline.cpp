#include "tools/timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "profiles/data_parallel.h"
#include "profiles/recompute.h"
#include "tools/report.h"
#include "tools/units.h"

namespace pipeplan {
namespace {

constexpr std::string_view kIdle = "\u00b7";    // ·
constexpr std::string_view kBar = "\u2502";     // │
constexpr std::string_view kRule = "\u2500";    // ─
constexpr std::string_view kTick = "\u252c";    // ┬
constexpr std::string_view kArrows = "\u2194";  // ↔
constexpr std::string_view kReset = "\x1b[0m";
constexpr int kMinLanes = 8;
constexpr OpType kOpTypes[] = {OpType::F, OpType::P1, OpType::P2, OpType::B, OpType::O};

char op_letter(OpType op) {
  switch (op) {
    case OpType::F:
      return 'F';
    case OpType::B:
      return 'B';
    case OpType::P1:
      return 'b';
    case OpType::P2:
      return 'w';
    case OpType::O:
      return 'O';
  }
  return '?';
}

std::string_view op_meaning(OpType op) {
  switch (op) {
    case OpType::F:
      return "forward";
    case OpType::B:
      return "fused backward";
    case OpType::P1:
      return "p1 (input grad)";
    case OpType::P2:
      return "p2 (weight grad)";
    case OpType::O:
      return "optimizer step";
  }
  return "";
}

// ANSI 256-colour background and a readable foreground: F blue, B and P1 greens, P2 orange, the
// optimizer step grey.
std::string op_color(OpType op) {
  switch (op) {
    case OpType::F:
      return "\x1b[48;5;27m\x1b[38;5;231m";
    case OpType::B:
      return "\x1b[48;5;28m\x1b[38;5;231m";
    case OpType::P1:
      return "\x1b[48;5;77m\x1b[38;5;16m";
    case OpType::P2:
      return "\x1b[48;5;208m\x1b[38;5;16m";
    case OpType::O:
      return "\x1b[48;5;245m\x1b[38;5;16m";
  }
  return "";
}

char transfer_letter(const Node& node) {
  return node.transfer == Transfer::load ? 'l' : 'e';
}

// Evict violet, load teal.
std::string transfer_color(char letter) {
  return letter == 'e' ? "\x1b[48;5;135m\x1b[38;5;231m" : "\x1b[48;5;37m\x1b[38;5;16m";
}

std::string pad_left(std::string text, std::size_t width) {
  if (text.size() < width) text.insert(0, width - text.size(), ' ');
  return text;
}

// "3", "4-7" for a contiguous concatenated P2, else "1+3+5".
std::string microbatch_text(const std::vector<int>& microbatches) {
  if (microbatches.empty()) return "";
  bool contiguous = microbatches.size() > 2;
  for (std::size_t i = 1; i < microbatches.size(); ++i) {
    contiguous = contiguous && microbatches[i] == microbatches[i - 1] + 1;
  }
  if (contiguous) {
    return std::to_string(microbatches.front()) + "-" + std::to_string(microbatches.back());
  }
  std::string text;
  for (int mb : microbatches)
    text += (text.empty() ? "" : "+") + std::to_string(mb);
  return text;
}

int device_count(const TaskGraph& graph, const SimResult& sim) {
  int count = std::max(graph.meta.devices, static_cast<int>(sim.devices.size()));
  for (const Stream& stream : graph.streams())
    count = std::max(count, stream.device + 1);
  return count;
}

// Digits of the last device's number: the timeline's label column is "dev " + them + " │".
int device_digits(int devices) {
  return static_cast<int>(std::to_string(std::max(0, devices - 1)).size());
}

struct Scale {
  double t0_us = 0;
  double span_us = 1;
  int lanes = 0;
  // Where `t_us` falls, in fractional columns.
  double x(double t_us) const { return (t_us - t0_us) / span_us * lanes; }
  int column(double t_us) const {
    return std::clamp(static_cast<int>(std::lround(x(t_us))), 0, lanes);
  }
};

Scale make_scale(const TaskGraph& graph, const SimResult& sim, int lanes) {
  Scale scale;
  scale.lanes = lanes;
  if (graph.node_count() == 0) return scale;
  double t0 = sim.times.front().start_us, t1 = sim.times.front().end_us;
  for (const NodeTime& time : sim.times) {
    t0 = std::min(t0, time.start_us);
    t1 = std::max(t1, time.end_us);
  }
  scale.t0_us = t0;
  scale.span_us = t1 > t0 ? t1 - t0 : 1;
  return scale;
}

// A 1-2-5 tick step giving roughly one tick per ten columns.
double tick_step_ms(double span_ms, int lanes) {
  const double raw = span_ms / std::max(1, lanes / 10);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double mantissa : {1.0, 2.0, 5.0}) {
    if (mantissa * magnitude >= raw * (1 - 1e-9)) return mantissa * magnitude;
  }
  return 10 * magnitude;
}

std::string header_lines(const Scale& scale, int label_width) {
  const double span_ms = scale.span_us / 1000;
  const double step = tick_step_ms(span_ms, scale.lanes);
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  std::string labels(static_cast<std::size_t>(scale.lanes), ' ');
  std::vector<bool> ticks(static_cast<std::size_t>(scale.lanes), false);
  int free_from = 0;
  for (int k = 0; k * step <= span_ms * (1 + 1e-9); ++k) {
    const int col = scale.column(scale.t0_us + k * step * 1000);
    if (col >= scale.lanes) break;
    ticks[static_cast<std::size_t>(col)] = true;
    char text[32];
    std::snprintf(text, sizeof text, "%.*f", decimals, k * step);
    const int length = static_cast<int>(std::string_view(text).size());
    if (col < free_from || col + length > scale.lanes) continue;
    labels.replace(static_cast<std::size_t>(col), static_cast<std::size_t>(length), text);
    free_from = col + length + 1;
  }
  std::string out = pad_left("ms", static_cast<std::size_t>(label_width - 2)) + " ";
  out += std::string(kBar) + labels + "\n";
  out += std::string(static_cast<std::size_t>(label_width - 1), ' ') + std::string(kBar);
  for (bool tick : ticks)
    out += tick ? kTick : kRule;
  return out + "\n";
}

constexpr int kMixed = -2;  // a cell holding whole ops of several kinds

// Cell owners (node ids, -1 idle, kMixed) of one stream, each op drawn with `letter_of`. Ops
// that round to zero cells take one cell if it is idle, so short ops stay visible where there is
// room. A cell that holds a whole op and ops of another letter is kMixed: at a width where
// several ops share a column, whichever came last would otherwise paint it, and a 1F1B steady
// state (F, B, F, B, ...) would read as long runs of one letter.
template <typename LetterOf>
std::vector<int> raster(const TaskGraph& graph, const SimResult& sim, int stream,
                        const Scale& scale, LetterOf letter_of) {
  const auto lanes = static_cast<std::size_t>(scale.lanes);
  std::vector<int> owners(lanes, -1);
  std::vector<std::pair<int, int>> narrow;  // (cell, node)
  std::vector<char> first_letter(lanes, 0), several(lanes, 0), whole(lanes, 0);
  for (int id : graph.stream_order(stream)) {
    const NodeTime& time = sim.times[static_cast<std::size_t>(id)];
    const int begin = scale.column(time.start_us), end = scale.column(time.end_us);
    if (end > begin) {
      std::fill(owners.begin() + begin, owners.begin() + end, id);
    } else {
      narrow.emplace_back(std::min(begin, scale.lanes - 1), id);
    }
    // The cells the op touches, in fractional columns.
    const double x0 = scale.x(time.start_us), x1 = scale.x(time.end_us);
    const int c0 = std::clamp(static_cast<int>(std::floor(x0)), 0, scale.lanes - 1);
    const int c1 = std::clamp(static_cast<int>(std::ceil(x1)) - 1, c0, scale.lanes - 1);
    if (!(x1 > x0)) continue;  // an op of no time is in no column's mix
    const char letter = letter_of(id);
    for (int c = c0; c <= c1; ++c) {
      const auto cell = static_cast<std::size_t>(c);
      if (first_letter[cell] == 0) {
        first_letter[cell] = letter;
      } else if (first_letter[cell] != letter) {
        several[cell] = 1;
      }
    }
    if (c0 == c1) whole[static_cast<std::size_t>(c0)] = 1;
  }
  for (auto [cell, id] : narrow) {
    if (owners[static_cast<std::size_t>(cell)] == -1) owners[static_cast<std::size_t>(cell)] = id;
  }
  for (std::size_t cell = 0; cell < lanes; ++cell) {
    if (several[cell] && whole[cell]) owners[cell] = kMixed;
  }
  return owners;
}

// Letter, micro-batch number, then letters to the end of the run ("F12FFF").
std::string op_cells(const Node& node, char letter, int length) {
  std::string cells(static_cast<std::size_t>(length), letter);
  const std::string number = microbatch_text(node.microbatches);
  if (length >= 3 && !number.empty() && static_cast<int>(number.size()) < length) {
    cells.replace(1, number.size(), number);
  }
  return cells;
}

// An overlapped pair (DualPipe's F&B) is drawn as one op: '&', the backward's micro-batch.
constexpr char kPairLetter = '&';
constexpr std::string_view kPairColor = "\x1b[48;5;91m\x1b[38;5;231m";  // violet-magenta

// Per node, whether it belongs to an overlapped pair (computed once per drawing: a pass over
// every node).
std::vector<char> pair_members(const TaskGraph& graph) {
  std::vector<char> member(static_cast<std::size_t>(graph.node_count()), 0);
  for (const OverlapPair& p : overlap_pairs(graph)) {
    member[static_cast<std::size_t>(p.first)] = 1;
    member[static_cast<std::size_t>(p.second)] = 1;
  }
  return member;
}

constexpr char kMixedLetter = '*';
constexpr std::string_view kMixedColor = "\x1b[48;5;250m\x1b[38;5;16m";  // light grey

// One stream's cells: compute ops by op letter, BPipe transfers as e (evict) / l (load), '*'
// where a column holds ops of several kinds; `mixed` is set when one does.
std::string stream_row(const TaskGraph& graph, const SimResult& sim, int stream, const Scale& scale,
                       const std::vector<char>& paired, bool color, bool& mixed) {
  const bool transfer = stream >= 0 && is_transfer_stream(graph, stream);
  const auto letter_of = [&](int id) {
    const Node& node = graph.node(id);
    return transfer                               ? transfer_letter(node)
           : paired[static_cast<std::size_t>(id)] ? kPairLetter
                                                  : op_letter(node.op);
  };
  const std::vector<int> owners = stream >= 0
                                      ? raster(graph, sim, stream, scale, letter_of)
                                      : std::vector<int>(static_cast<std::size_t>(scale.lanes), -1);
  std::string row;
  for (int begin = 0; begin < scale.lanes;) {
    const int owner = owners[static_cast<std::size_t>(begin)];
    int end = begin + 1;
    while (end < scale.lanes && owners[static_cast<std::size_t>(end)] == owner)
      ++end;
    if (owner == kMixed) {
      mixed = true;
      const std::string cells(static_cast<std::size_t>(end - begin), kMixedLetter);
      row += color ? std::string(kMixedColor) + cells + std::string(kReset) : cells;
    } else if (owner < 0) {
      for (int i = begin; i < end; ++i)
        row += kIdle;
    } else {
      const Node& node = graph.node(owner);
      const bool pair = paired[static_cast<std::size_t>(owner)] != 0;
      const char letter = letter_of(owner);
      const std::string cells = op_cells(node, letter, end - begin);
      const std::string paint = transfer ? transfer_color(letter)
                                : pair   ? std::string(kPairColor)
                                         : op_color(node.op);
      row += color ? paint + cells + std::string(kReset) : cells;
    }
    begin = end;
  }
  return row;
}

std::string legend(const TaskGraph& graph, const Scale& scale, int width, bool pairs, bool mixed,
                   bool color) {
  std::set<OpType> present;
  for (int id = 0; id < graph.node_count(); ++id) {
    if (graph.node(id).kind == NodeKind::compute) present.insert(graph.node(id).op);
  }
  std::vector<std::pair<int, std::string>> items;  // (visible width, text)
  // A letter in its colours, then what it means.
  const auto swatch = [&](const std::string& paint, char letter, std::string_view meaning) {
    const std::string cell(1, letter);
    items.emplace_back(
        static_cast<int>(2 + meaning.size()),
        (color ? paint + cell + std::string(kReset) : cell) + " " + std::string(meaning));
  };
  for (OpType op : kOpTypes) {
    if (present.count(op)) swatch(op_color(op), op_letter(op), op_meaning(op));
  }
  if (pairs)
    swatch(std::string(kPairColor), kPairLetter, "overlapped F&B (backward's micro-batch)");
  bool evict = false, load = false;
  for (int id = 0; id < graph.node_count(); ++id) {
    const Node& node = graph.node(id);
    if (node.stream < 0 || !is_transfer_stream(graph, node.stream)) continue;
    (transfer_letter(node) == 'e' ? evict : load) = true;
  }
  if (evict) swatch(transfer_color('e'), 'e', "evict (stash to the acceptor)");
  if (load) swatch(transfer_color('l'), 'l', "load (stash back to the evictor)");
  if (evict || load) {
    items.emplace_back(23, std::string(kArrows) + "N transfers with dev N");
  }
  if (mixed) {
    swatch(std::string(kMixedColor), kMixedLetter,
           "ops of several kinds in one column (a larger --width parts them)");
  }
  items.emplace_back(6, std::string(kIdle) + " idle");
  const std::string per_column =
      "1 col = " + printf_text("%.3g", scale.span_us / 1000 / scale.lanes) + " ms";
  items.emplace_back(static_cast<int>(per_column.size()), per_column);
  std::string out, line;
  int line_width = 0;
  for (const auto& [item_width, text] : items) {
    if (line_width > 0 && line_width + 2 + item_width > width) {
      out += line + "\n";
      line.clear();
      line_width = 0;
    }
    if (line_width > 0) {
      line += "  ";
      line_width += 2;
    }
    line += text;
    line_width += item_width;
  }
  return out + line + "\n";
}

// A stage and its layers in Megatron-LM's letters (the layout line below the table): "0 (E,
// t0-7)", "3 (t24-31, L)"; blocks numbered from 0 after the embedding, as torchtitan's names.
std::string stage_layers_text(const PlanMeta& meta, int stage) {
  std::string text = std::to_string(stage);
  if (stage < 0 || stage >= static_cast<int>(meta.stage_layers.size())) return text;
  const StageLayers& layers = meta.stage_layers[static_cast<std::size_t>(stage)];
  if (layers.layer_count <= 0) return text + " (none)";
  const std::vector<LayerKind> kinds = meta.model.layer_list();
  const int last = layers.first_layer + layers.layer_count - 1;
  if (layers.first_layer < 0 || last >= static_cast<int>(kinds.size())) {
    // Not the model's list (a plan read from a file tiles it; a graph built by hand may not).
    return text + " (layers " + std::to_string(layers.first_layer) + "-" + std::to_string(last) +
           ")";
  }
  const int first_block = kinds.front() == LayerKind::embedding ? 1 : 0;
  bool embedding = false, head = false;
  int lo = -1, hi = -1;  // blocks held, by block index
  for (int i = layers.first_layer; i < layers.first_layer + layers.layer_count; ++i) {
    const LayerKind kind = kinds[static_cast<std::size_t>(i)];
    if (kind == LayerKind::embedding) {
      embedding = true;
    } else if (kind == LayerKind::head) {
      head = true;
    } else {
      if (lo < 0) lo = i - first_block;
      hi = i - first_block;
    }
  }
  std::string parts;
  const auto add = [&](const std::string& part) { parts += (parts.empty() ? "" : ", ") + part; };
  if (embedding) add("E");
  if (lo >= 0)
    add(lo == hi ? "t" + std::to_string(lo) : "t" + std::to_string(lo) + "-" + std::to_string(hi));
  if (head) add("L");
  return text + " (" + parts + ")";
}

std::vector<std::string> device_stages(const TaskGraph& graph, int device) {
  std::set<int> stages;
  const auto& stage_device = graph.schedule.stage_device;
  for (int s = 0; s < static_cast<int>(stage_device.size()); ++s) {
    if (stage_device[static_cast<std::size_t>(s)] == device) stages.insert(s);
  }
  if (stages.empty()) {
    for (int id = 0; id < graph.node_count(); ++id) {
      const Node& node = graph.node(id);
      if (node.kind == NodeKind::compute && node.device == device) stages.insert(node.stage);
    }
  }
  std::vector<std::string> entries;
  entries.reserve(stages.size());
  for (int stage : stages)
    entries.push_back(stage_layers_text(graph.meta, stage));
  if (entries.empty()) entries.emplace_back("-");
  return entries;
}

}  // namespace

int timeline_min_width(const TaskGraph& graph, const SimResult& sim) {
  return 4 + device_digits(device_count(graph, sim)) + 2 + kMinLanes;
}

std::string render_timeline(const TaskGraph& graph, const SimResult& sim, int width, bool color) {
  if (sim.times.size() != static_cast<std::size_t>(graph.node_count())) {
    throw Error("timeline: simulation has " + std::to_string(sim.times.size()) +
                " node times but the task graph has " + std::to_string(graph.node_count()) +
                " nodes");
  }
  const int devices = device_count(graph, sim);
  const int digits = device_digits(devices);
  const int label_width = 4 + digits + 2;  // "dev " + number + " │"
  if (width - label_width < kMinLanes) {
    throw Error("timeline: width " + std::to_string(width) + " is too small (need at least " +
                std::to_string(label_width + kMinLanes) + " columns)");
  }
  const Scale scale = make_scale(graph, sim, width - label_width);
  const std::vector<char> paired = pair_members(graph);
  std::string out = header_lines(scale, label_width);
  bool mixed = false;
  const auto& streams = graph.streams();
  for (int device = 0; device < devices; ++device) {
    std::string label = std::to_string(device);
    label.insert(0, static_cast<std::size_t>(digits) - label.size(), ' ');
    int compute = -1;
    std::vector<int> transfers;  // this device's BPipe transfer streams that carry nodes
    for (int s = 0; s < static_cast<int>(streams.size()); ++s) {
      const Stream& stream = streams[static_cast<std::size_t>(s)];
      if (stream.device != device) continue;
      if (stream.role == StreamRole::compute) compute = s;
      if (stream.role == StreamRole::transfer && !graph.stream_order(s).empty())
        transfers.push_back(s);
    }
    out += "dev " + label + " " + std::string(kBar) +
           stream_row(graph, sim, compute, scale, paired, color, mixed) + "\n";
    // "   ↔7 │": the transfer stream to device 7, under its device's compute row.
    for (const int s : transfers) {
      const std::string peer = std::to_string(streams[static_cast<std::size_t>(s)].peer);
      const std::size_t pad = static_cast<std::size_t>(label_width - 2) - 1 - peer.size();
      out += std::string(pad, ' ') + std::string(kArrows) + peer + " " + std::string(kBar) +
             stream_row(graph, sim, s, scale, paired, color, mixed) + "\n";
    }
  }
  const bool pairs = std::find(paired.begin(), paired.end(), 1) != paired.end();
  return out + legend(graph, scale, width, pairs, mixed, color);
}

namespace {

// `text`'s lines cut at spaces to at most `width` columns, a cut line's rest indented by
// `hanging` spaces (a word longer than the line stays whole).
std::string wrapped(std::string_view text, std::size_t width, std::size_t hanging = 2) {
  const std::string hang(hanging, ' ');
  std::string out;
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    std::string_view indent;
    while (line.size() + indent.size() > width) {
      const std::size_t room = width - indent.size();
      std::size_t cut = line.rfind(' ', room);
      if (cut == std::string_view::npos || cut == 0) cut = line.find(' ', room);
      if (cut == std::string_view::npos) break;
      out += std::string(indent) + std::string(line.substr(0, cut)) + "\n";
      line.remove_prefix(cut + 1);
      indent = hang;
    }
    out += std::string(indent) + std::string(line) + "\n";
  }
  return out;
}

}  // namespace

std::string render_summary(const TaskGraph& graph, const SimResult& sim) {
  const PlanMeta& meta = graph.meta;
  const std::string family = meta.schedule.empty() ? graph.schedule.family : meta.schedule;
  std::string out = wrapped(
      "plan: " + (family.empty() ? std::string("?") : family) + ", backward " +
          std::string(to_string(meta.backward)) + ", " + std::to_string(device_count(graph, sim)) +
          " devices, " + std::to_string(meta.microbatches) + " micro-batches" +
          (meta.data_parallel.replicas > 1
               ? " (each of " + data_parallel_text(meta.data_parallel) + ")"
               : std::string()) +
          (meta.recompute.any() ? ", recompute " + recompute_text(meta.recompute) : std::string()),
      80);
  // Each memory column in GiB, or in MiB or KiB where all its values are below one of the larger
  // unit (a CPU plan's peaks would all read 0.00 GiB).
  const auto unit_of = [](double largest) {
    return largest >= kBytesPerGiB      ? std::pair{"GiB", kBytesPerGiB}
           : largest >= 1024.0 * 1024.0 ? std::pair{"MiB", 1024.0 * 1024.0}
                                        : std::pair{"KiB", 1024.0};
  };
  double largest_peak = 0;
  for (const DeviceMetrics& metrics : sim.devices)
    largest_peak = std::max(largest_peak, static_cast<double>(metrics.peak_memory_bytes));
  double largest_limit = 0;
  for (const double limit : meta.memory_limit_bytes)
    largest_limit = std::max(largest_limit, limit);
  const auto [peak_unit, peak_bytes] = unit_of(largest_peak);
  const auto [limit_unit, limit_bytes] =
      largest_limit > 0 ? unit_of(largest_limit) : std::pair{"GiB", kBytesPerGiB};
  // Work: the pipeline's F, B and W (the bubble is the rest of the step, the optimizer's too).
  // The first column as wide as "dev N" of the last device (6 up to dev 99).
  const auto name_width = static_cast<std::size_t>(
      std::max(6, 4 + device_digits(static_cast<int>(sim.devices.size()))));
  std::string header = "device";
  header.resize(name_width, ' ');
  out += header + std::string("    work ms  bubble %  peak ") + peak_unit + "  limit " +
         limit_unit + "  stages (E, t blocks, L)\n";
  for (int device = 0; device < static_cast<int>(sim.devices.size()); ++device) {
    const DeviceMetrics& metrics = sim.devices[static_cast<std::size_t>(device)];
    const double limit = device < static_cast<int>(meta.memory_limit_bytes.size())
                             ? meta.memory_limit_bytes[static_cast<std::size_t>(device)]
                             : 0;
    const double peak = static_cast<double>(metrics.peak_memory_bytes) / peak_bytes;
    const std::size_t row_start = out.size();
    std::string name = "dev " + std::to_string(device);
    name.resize(name_width, ' ');
    out += name;
    out += pad_left(printf_text("%.3f", metrics.work_us() / 1000), 11);
    out += pad_left(printf_text("%.1f", metrics.bubble_ratio * 100), 8) + " %";
    out += pad_left(printf_text("%.2f", peak), 10);
    out += pad_left(limit > 0 ? printf_text("%.2f", limit / limit_bytes) : "-", 11);
    // '!' marks a device whose peak exceeds its memory limit.
    out += (limit > 0 && static_cast<double>(metrics.peak_memory_bytes) > limit) ? "! " : "  ";
    // The stages column starts where the row has got to; a device's list goes on under itself.
    const std::size_t column = out.size() - row_start;
    const std::size_t room = std::max<std::size_t>(column < 80 ? 80 - column : 0, 20);
    std::size_t line_start = out.size();
    const std::vector<std::string> entries = device_stages(graph, device);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const std::string entry = entries[i] + (i + 1 < entries.size() ? "," : "");
      if (i > 0 && out.size() - line_start + 1 + entry.size() > room) {
        out += "\n" + std::string(column, ' ');
        line_start = out.size();
      } else if (i > 0) {
        out += ' ';
      }
      out += entry;
    }
    out += "\n";
  }
  // A value too long for the line goes on under itself.
  auto total = [&out](std::string_view name, const std::string& value) {
    out += wrapped(std::string(name) + std::string(24 - name.size(), ' ') + value, 80, 24);
  };
  out += wrapped(transfer_summary(graph), 80);
  total("step time (makespan)", printf_text("%.3f ms", sim.makespan_us / 1000));
  total("largest stage span", printf_text("%.3f ms", sim.max_stage_span_us / 1000));
  total("bubble ratio", printf_text("%.1f %%", sim.bubble_ratio * 100) + " (of stage span: " +
                            printf_text("%.1f %%", sim.span_bubble_ratio * 100) + ")");
  total("tokens/s", printf_text("%.0f", sim.tokens_per_s));
  total("MFU (PaLM model FLOPs)", sim.mfu > 0 ? printf_text("%.1f %%", sim.mfu * 100) + " (" +
                                                    mfu_basis(graph.meta, sim.mfu) + ")"
                                              : "n/a");
  if (const std::string note = mfu_above_peak_note(meta, sim); !note.empty())
    out += wrapped("note: " + note, 80, 6);
  if (const std::string held = shared_gpu_memory_text(meta, sim); !held.empty())
    total("one GPU holds", held + " (the stages' peaks added)");
  if (const std::string over = one_gpu_overflow_text(meta, sim); !over.empty())
    total("peak memory", printf_text("%.2f GiB, ", largest_peak / kBytesPerGiB) + over);
  out += layout_summary(graph);
  // The notes `plan` prints beside the same figures, cut to the summary's 80 columns.
  out += wrapped(step_notes(graph) + model_notes(graph), 80);
  return out;
}

}  // namespace pipeplan
