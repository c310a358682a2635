#include "planner/graph/pair_overlap.h"

#include <algorithm>
#include <map>
#include <utility>

#include "planner/base/stats.h"
#include "profiles/overlap.h"

namespace pipeplan {

NodeTime pair_time(const OverlapPair& pair, std::span<const NodeTime> times) {
  const NodeTime& a = times[static_cast<std::size_t>(pair.first)];
  const NodeTime& b = times[static_cast<std::size_t>(pair.second)];
  return {std::min(a.start_us, b.start_us), std::max(a.end_us, b.end_us)};
}

std::vector<double> pair_efficiencies(const TaskGraph& graph, std::span<const NodeTime> times) {
  const std::vector<OverlapPair> pairs = overlap_pairs(graph);
  if (pairs.empty()) return {};
  const auto at = [&](int id) -> const NodeTime& { return times[static_cast<std::size_t>(id)]; };
  std::vector<char> paired(static_cast<std::size_t>(graph.node_count()), 0);
  for (const OverlapPair& pair : pairs) {
    paired[static_cast<std::size_t>(pair.first)] = 1;
    paired[static_cast<std::size_t>(pair.second)] = 1;
  }
  std::map<std::pair<int, OpType>, std::vector<double>> alone;
  for (int id = 0; id < graph.node_count(); ++id) {
    const Node& node = graph.node(id);
    if (node.kind != NodeKind::compute || paired[static_cast<std::size_t>(id)] != 0) continue;
    alone[{node.stage, node.op}].push_back(at(id).end_us - at(id).start_us);
  }
  std::map<std::pair<int, OpType>, double> alone_median;
  for (auto& [key, durations] : alone)
    alone_median[key] = median(std::move(durations));
  std::vector<double> out;
  for (const OverlapPair& pair : pairs) {
    const Node& a = graph.node(pair.first);
    const Node& b = graph.node(pair.second);
    const auto a_alone = alone_median.find({a.stage, a.op});
    const auto b_alone = alone_median.find({b.stage, b.op});
    if (a_alone == alone_median.end() || b_alone == alone_median.end()) continue;
    const NodeTime span = pair_time(pair, times);
    out.push_back(
        overlap_efficiency_from(a_alone->second, b_alone->second, span.end_us - span.start_us));
  }
  return out;
}

}  // namespace pipeplan
