#include "profiles/partition.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "planner/base/error.h"

namespace pipeplan {

namespace {

// Where the transformer blocks sit in ModelConfig::layer_list(), and what rides along with them.
struct BlockSpan {
  int first_block = 0;  // index of the first block in layer_list()
  int block_count = 0;
  bool has_embedding = false;  // layer_list()[0] is the embedding
  bool has_head = false;       // layer_list().back() is the head
};

BlockSpan block_span(const ModelConfig& model) {
  const std::vector<LayerKind> layers = model.layer_list();
  BlockSpan span;
  span.has_embedding = !layers.empty() && layers.front() == LayerKind::embedding;
  span.has_head = !layers.empty() && layers.back() == LayerKind::head;
  span.first_block = span.has_embedding ? 1 : 0;
  span.block_count = static_cast<int>(std::count(layers.begin(), layers.end(), LayerKind::block));
  return span;
}

std::string model_label(const ModelConfig& model) {
  return model.name.empty() ? std::string("the model") : model.name;
}

// Turns per-part block counts into layer ranges: the embedding joins the first part, the head the
// last.
Partition partition_from_counts(const BlockSpan& span, const std::vector<int>& blocks_per_stage) {
  Partition partition;
  int next_block = span.first_block;
  const int parts = static_cast<int>(blocks_per_stage.size());
  for (int p = 0; p < parts; ++p) {
    StageLayers stage{next_block, blocks_per_stage[static_cast<std::size_t>(p)]};
    if (p == 0 && span.has_embedding) {
      stage.first_layer -= 1;
      stage.layer_count += 1;
    }
    if (p == parts - 1 && span.has_head) stage.layer_count += 1;
    next_block += blocks_per_stage[static_cast<std::size_t>(p)];
    partition.stages.push_back(stage);
  }
  return partition;
}

double compute_us(const LayerCost& cost) {
  return cost.forward_us + cost.p1_us + cost.p2_us;
}

// F + p1 + p2 time of contiguous block ranges, with the embedding/head extras on the ends, and
// the recomputation of the range's first blocks (recompute.recomputed_of: a recomputing block's p1
// runs its forward again). Never falls as a range grows at either end, as the search below needs:
// a recomputing block costs at least a plain one.
class RangeCost {
 public:
  RangeCost(const BlockSpan& span, const Profile& profile, int mbs, const Recompute& recompute)
      : recompute_(recompute), blocks_(span.block_count) {
    const LayerCost& block = profile.cost(LayerKind::block, mbs);
    block_us_ = compute_us(block);
    if (recompute.any()) extra_us_ = compute_us(recomputed_block(block)) - block_us_;
    if (span.has_embedding) embedding_us_ = compute_us(profile.cost(LayerKind::embedding, mbs));
    if (span.has_head) head_us_ = compute_us(profile.cost(LayerKind::head, mbs));
  }
  int blocks() const { return blocks_; }
  // A part of `count` blocks, the first part (with the embedding) and/or the last (the head).
  double part(int count, bool first, bool last) const {
    double us = block_us_ * count;
    if (extra_us_ != 0) us += extra_us_ * recompute_.recomputed_of(count);
    if (first) us += embedding_us_;
    if (last) us += head_us_;
    return us;
  }
  // Blocks [begin, end).
  double operator()(int begin, int end) const {
    const int count = end - begin;
    double us = block_us_ * count;
    if (extra_us_ != 0) us += extra_us_ * recompute_.recomputed_of(count);
    if (begin == 0) us += embedding_us_;
    if (end == blocks()) us += head_us_;
    return us;
  }

 private:
  Recompute recompute_;
  int blocks_ = 0;
  double block_us_ = 0, extra_us_ = 0;
  double embedding_us_ = 0, head_us_ = 0;
};

// suffix[j][a]: the smallest achievable maximum part time when blocks [a, L) form j parts.
std::vector<std::vector<double>> suffix_bottlenecks(const RangeCost& cost, int parts) {
  const int blocks = cost.blocks();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> suffix(
      static_cast<std::size_t>(parts) + 1,
      std::vector<double>(static_cast<std::size_t>(blocks) + 1, kInf));
  for (int a = 0; a < blocks; ++a)
    suffix[1][static_cast<std::size_t>(a)] = cost(a, blocks);
  // min over b of max(cost(a, b), rest(b)): cost(a, b) never falls as b grows (times are not
  // negative) and rest(b) = suffix[j - 1][b] never rises (fewer blocks for as many parts), so the
  // minimum lies where the first overtakes the second: at the first such b or the one before;
  // every other b gives a maximum at least as large. cost(a, b) never rises as a grows, so that
  // first b never moves back: one pointer walks it across all a (blocks steps per part count,
  // where a binary search per a took log(blocks) cost evaluations each).
  for (int j = 2; j <= parts; ++j) {
    const std::vector<double>& rest = suffix[static_cast<std::size_t>(j) - 1];
    const int last = blocks - j + 1;  // b in [a + 1, last]; last + 1: none overtakes
    int lo = 1;
    for (int a = 0; a + j <= blocks; ++a) {
      lo = std::max(lo, a + 1);
      while (lo <= last && cost(a, lo) < rest[static_cast<std::size_t>(lo)])
        ++lo;
      double best = kInf;
      for (const int b : {lo - 1, lo}) {
        if (b < a + 1 || b > last) continue;
        best = std::min(best, std::max(cost(a, b), rest[static_cast<std::size_t>(b)]));
      }
      suffix[static_cast<std::size_t>(j)][static_cast<std::size_t>(a)] = best;
    }
  }
  return suffix;
}

// Among the partitions reaching the optimal bottleneck, the one whose boundaries come earliest
// (lexicographically smallest), so ties resolve the same way everywhere.
std::vector<int> earliest_optimal_counts(const RangeCost& cost, int parts) {
  const std::vector<std::vector<double>> suffix = suffix_bottlenecks(cost, parts);
  const double optimum = suffix[static_cast<std::size_t>(parts)][0];
  const double limit = optimum + 1e-9 * std::max(1.0, optimum);  // absorb prefix-sum rounding
  std::vector<int> counts;
  int begin = 0;
  for (int remaining = parts; remaining > 1; --remaining) {
    int end = begin + 1;
    while (cost(begin, end) > limit ||
           suffix[static_cast<std::size_t>(remaining) - 1][static_cast<std::size_t>(end)] > limit)
      ++end;
    counts.push_back(end - begin);
    begin = end;
  }
  counts.push_back(cost.blocks() - begin);
  return counts;
}

// Block counts of the parts when parts share devices (`groups`: each device's parts). Each
// device's blocks go one at a time to its part that is then the smallest (ties: the earlier), so
// its largest part is as small as it can be for its total; loads[g][m] is device g's sum holding
// m blocks. The least bound T whose largest totals (loads at most T) cover the blocks is the
// smallest largest device sum; devices then give back the surplus from the heaviest down.
std::vector<int> device_balanced_counts(const RangeCost& cost, int parts,
                                        const std::vector<std::vector<int>>& groups) {
  const int blocks = cost.blocks();
  struct Fill {
    std::vector<int> counts;   // per part of the group, after `total` blocks
    std::vector<double> load;  // [m - size]: the group's sum holding m blocks
  };
  const auto part_us = [&](int part, int count) {
    return cost.part(count, part == 0, part == parts - 1);
  };
  // The fill of group g up to `upto` blocks; its counts are those at `upto`.
  const auto fill = [&](const std::vector<int>& group, int upto) {
    Fill f;
    const int size = static_cast<int>(group.size());
    f.counts.assign(group.size(), 1);
    double load = 0;
    for (const int part : group)
      load += part_us(part, 1);
    f.load.push_back(load);
    for (int m = size + 1; m <= upto; ++m) {
      std::size_t best = 0;
      double best_us = std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < group.size(); ++i) {
        const double us = part_us(group[i], f.counts[i] + 1);
        if (us < best_us) {
          best_us = us;
          best = i;
        }
      }
      load += best_us - part_us(group[best], f.counts[best]);
      ++f.counts[best];
      f.load.push_back(load);
    }
    return f;
  };
  std::vector<Fill> fills;
  fills.reserve(groups.size());
  std::vector<double> candidates;
  for (const std::vector<int>& group : groups) {
    const int size = static_cast<int>(group.size());
    fills.push_back(fill(group, blocks - (parts - size)));
    candidates.insert(candidates.end(), fills.back().load.begin(), fills.back().load.end());
  }
  // The most blocks group g holds within `bound` (its size - 1: none fit).
  const auto most = [&](std::size_t g, double bound) {
    const std::vector<double>& load = fills[g].load;
    const auto fits = std::upper_bound(load.begin(), load.end(), bound) - load.begin();
    return static_cast<int>(groups[g].size()) - 1 + static_cast<int>(fits);
  };
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  const auto covers = [&](double bound) {
    long long total = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const int m = most(g, bound);
      if (m < static_cast<int>(groups[g].size())) return false;
      total += m;
    }
    return total >= blocks;
  };
  // Loads never fall as a group takes more blocks, so coverage never falls as the bound grows.
  const double bound = *std::partition_point(candidates.begin(), candidates.end() - 1,
                                             [&](double b) { return !covers(b); });
  std::vector<int> totals(groups.size());
  int surplus = -blocks;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    totals[g] = most(g, bound);
    surplus += totals[g];
  }
  for (; surplus > 0; --surplus) {
    std::size_t heaviest = groups.size();
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (totals[g] == static_cast<int>(groups[g].size())) continue;
      const auto load = [&](std::size_t i) {
        return fills[i].load[static_cast<std::size_t>(totals[i]) - groups[i].size()];
      };
      if (heaviest == groups.size() || load(g) > load(heaviest)) heaviest = g;
    }
    --totals[heaviest];
  }
  std::vector<int> counts(static_cast<std::size_t>(parts), 0);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const Fill f = fill(groups[g], totals[g]);
    for (std::size_t i = 0; i < groups[g].size(); ++i)
      counts[static_cast<std::size_t>(groups[g][i])] = f.counts[i];
  }
  return counts;
}

// Whether `groups` puts more than one part on some device, checking that it groups 0..parts-1.
bool shares_devices(const std::vector<std::vector<int>>& groups, int parts) {
  if (groups.empty()) return false;
  std::vector<int> seen(static_cast<std::size_t>(parts), 0);
  bool shared = false;
  for (const std::vector<int>& group : groups) {
    if (group.empty()) throw InternalError("partition_balanced: a device with no stage");
    shared = shared || group.size() > 1;
    for (const int part : group) {
      if (part < 0 || part >= parts || seen[static_cast<std::size_t>(part)]++ != 0)
        throw InternalError("partition_balanced: device_stages is not a grouping of the stages");
    }
  }
  if (std::count(seen.begin(), seen.end(), 0) != 0)
    throw InternalError("partition_balanced: a stage on no device");
  return shared;
}

}  // namespace

Partition partition_balanced(const ModelConfig& model, const Profile& profile, int mbs,
                             int stage_count, const Recompute& recompute,
                             const std::vector<std::vector<int>>& device_stages) {
  if (recompute.method == Recompute::Method::automatic)
    throw InternalError("partition_balanced: resolve --recompute auto first");
  const BlockSpan span = block_span(model);
  if (stage_count < 1)
    throw FieldError("devices", "need at least 1 stage, got " + std::to_string(stage_count));
  if (stage_count > span.block_count)
    throw FieldError("devices", std::to_string(stage_count) + " stages but " + model_label(model) +
                                    " has " + std::to_string(span.block_count) + " blocks");
  const RangeCost cost(span, profile, mbs, recompute);
  if (shares_devices(device_stages, stage_count))
    return partition_from_counts(span, device_balanced_counts(cost, stage_count, device_stages));
  return partition_from_counts(span, earliest_optimal_counts(cost, stage_count));
}

Partition partition_fixed(const ModelConfig& model, const std::vector<int>& blocks_per_stage) {
  const BlockSpan span = block_span(model);
  if (blocks_per_stage.empty()) throw FieldError("layers_per_stage", "no block counts given");
  int sum = 0;
  for (std::size_t p = 0; p < blocks_per_stage.size(); ++p) {
    if (blocks_per_stage[p] < 1)
      throw FieldError("layers_per_stage", "stage " + std::to_string(p) + " has " +
                                               std::to_string(blocks_per_stage[p]) +
                                               " blocks; every stage needs at least 1");
    sum += blocks_per_stage[p];
  }
  if (sum != span.block_count)
    throw FieldError("layers_per_stage", "counts sum to " + std::to_string(sum) + " but " +
                                             model_label(model) + " has " +
                                             std::to_string(span.block_count) + " blocks");
  return partition_from_counts(span, blocks_per_stage);
}

std::vector<int> blocks_per_stage(const ModelConfig& model, const Partition& partition) {
  const std::vector<LayerKind> layers = model.layer_list();
  std::vector<int> blocks;
  blocks.reserve(partition.stages.size());
  for (const StageLayers& s : partition.stages) {
    const auto first = layers.begin() + s.first_layer;
    blocks.push_back(static_cast<int>(std::count(first, first + s.layer_count, LayerKind::block)));
  }
  return blocks;
}

std::vector<double> device_optimizer_us(const std::vector<StageCost>& costs,
                                        const std::vector<int>& stage_device, int devices) {
  std::vector<double> out(static_cast<std::size_t>(std::max(devices, 0)), 0.0);
  for (std::size_t s = 0; s < stage_device.size() && s < costs.size(); ++s) {
    const int d = stage_device[s];
    if (d >= 0 && d < devices) out[static_cast<std::size_t>(d)] += costs[s].optimizer_us;
  }
  return out;
}

double StageCost::p2_time_us(int k) const {
  if (k < 1) return 0;
  return p2_table_at(p2_concat_us, k).value_or(p2_us * k);
}

std::int64_t StageCost::p2_work(int k) const {
  return std::llround(p2_table_at(p2_work_bytes, k).value_or(0));
}

std::int64_t StageCost::max_work_bytes() const {
  std::int64_t most = std::max({forward_work_bytes, p1_work_bytes, fused_work_bytes});
  for (const std::int64_t bytes : p2_work_bytes)
    most = std::max(most, bytes);
  return most;
}

namespace {

// A layer kind's costs at one micro-batch size, with its p2 time over k = 1 .. max_concat
// micro-batches: looked up once per kind, not per layer (the profile lookup spells the kind's name
// and searches two maps, and each p2 time searches the concatenation table: a P = 32 cut into 64
// stages with m = 96 made 12k such searches per stage_costs call).
struct KindCost {
  const LayerCost* layer = nullptr;
  std::vector<double> p2_us;          // [k - 1]
  std::vector<std::int64_t> p2_work;  // [k - 1]
};

// One layer's memory as a backward pass meets it, for stages that recompute (whose backward the
// plan follows layer by layer, as the runtime accounts it): the stash it holds before, the
// retained X/dY its p1 leaves, and its own top over the other layers' levels during its p1
// (`p1_top`) or during a fused backward's p1 and p2 (`fused_top`).
struct LayerLevels {
  std::int64_t stash = 0;
  std::int64_t retained = 0;
  std::int64_t p1_top = 0;
  std::int64_t fused_top = 0;
};

// `forward_peak`: where the stage's forward working memory peaks so far, the largest over its
// layers l of the stash of layers up to l plus l's F work (the plan charges the whole stash at
// F's start). `levels`, where the stage recomputes: the layer's LayerLevels, appended.
void add_layer(StageCost& stage, const KindCost& kind, std::int64_t& forward_peak,
               std::vector<LayerLevels>* levels) {
  const LayerCost& layer = *kind.layer;
  forward_peak =
      std::max(forward_peak, stage.stash_bytes + layer.stash_bytes + layer.forward_work_bytes);
  // p1, B and p2 run layer by layer too; each layer's excess over its own level is its work, and
  // the stage's the largest of them (the plan's stage-level accounting is kept as it is).
  const std::int64_t p2_one = kind.p2_work.empty() ? 0 : kind.p2_work.front();
  if (levels != nullptr) {
    const std::int64_t level = std::max(layer.stash_bytes, layer.retained_bytes);
    levels->push_back({layer.stash_bytes, layer.retained_bytes, level + layer.p1_work_bytes,
                       level + std::max(layer.p1_work_bytes, p2_one)});
  }
  stage.p1_work_bytes = std::max(stage.p1_work_bytes, layer.p1_work_bytes);
  stage.fused_work_bytes = std::max({stage.fused_work_bytes, layer.p1_work_bytes, p2_one});
  for (std::size_t i = 0; i < kind.p2_work.size(); ++i)
    stage.p2_work_bytes[i] = std::max(stage.p2_work_bytes[i], kind.p2_work[i]);
  stage.forward_us += layer.forward_us;
  stage.p1_us += layer.p1_us;
  stage.p2_us += layer.p2_us;
  stage.optimizer_us += layer.optimizer_us;
  for (std::size_t i = 0; i < kind.p2_us.size(); ++i)
    stage.p2_concat_us[i] += kind.p2_us[i];
  stage.stash_bytes += layer.stash_bytes;
  stage.retained_bytes += layer.retained_bytes;
  stage.static_bytes += layer.param_bytes + layer.grad_bytes + layer.optimizer_bytes;
  stage.grad_bytes += layer.grad_bytes;
  stage.send_bytes = layer.send_bytes;  // the last layer's output crosses to the next stage
}

// A recomputing block's stash is its checkpoint until its p1 rebuilds the rest, so such a stage's
// backward is charged as it runs, from its last layer: layer l holds the stashes of the layers
// before it, the retained sets of those after it (none in a fused backward, whose p2 frees each
// at once) and its own top. The largest over l, less the levels the node starts from and ends at,
// is the p1's and the fused backward's working memory (replacing the per-layer rule of add_layer).
void backward_layer_by_layer(StageCost& stage, const std::vector<LayerLevels>& levels) {
  std::int64_t before = stage.stash_bytes;
  std::int64_t after = 0;
  std::int64_t p1_peak = 0;
  std::int64_t fused_peak = 0;
  for (std::size_t l = levels.size(); l-- > 0;) {
    const LayerLevels& layer = levels[l];
    before -= layer.stash;
    p1_peak = std::max(p1_peak, before + after + layer.p1_top);
    fused_peak = std::max(fused_peak, before + layer.fused_top);
    after += layer.retained;
  }
  stage.p1_work_bytes =
      std::max<std::int64_t>(0, p1_peak - std::max(stage.stash_bytes, stage.retained_bytes));
  stage.fused_work_bytes = std::max<std::int64_t>(0, fused_peak - stage.stash_bytes);
}

}  // namespace

// `max_concat` < 1 is read as 1: every stage gets at least the single-micro-batch p2 entry.
std::vector<StageCost> stage_costs(const ModelConfig& model, const Profile& profile, int mbs,
                                   const Partition& partition, int max_concat,
                                   const Recompute& recompute) {
  const std::vector<LayerKind> layers = model.layer_list();
  const int concat = std::max(1, max_concat);
  static_assert(static_cast<int>(LayerKind::head) == 2, "one entry per LayerKind");
  // One entry per LayerKind, then a recomputing block.
  std::array<KindCost, 4> kinds;
  std::optional<LayerCost> recomputed;
  constexpr std::size_t kRecomputedBlock = 3;
  const auto kind_cost = [&](LayerKind kind, bool recomputes) -> const KindCost& {
    KindCost& k = kinds[recomputes ? kRecomputedBlock : static_cast<std::size_t>(kind)];
    if (k.layer == nullptr) {
      if (recomputes) recomputed = recomputed_block(profile.cost(kind, mbs));
      k.layer = recomputes ? &*recomputed : &profile.cost(kind, mbs);
      k.p2_us.resize(static_cast<std::size_t>(concat));
      k.p2_work.resize(static_cast<std::size_t>(concat));
      for (int n = 1; n <= concat; ++n) {
        k.p2_us[static_cast<std::size_t>(n) - 1] = k.layer->p2_time_us(n);
        k.p2_work[static_cast<std::size_t>(n) - 1] = k.layer->p2_work(n);
      }
    }
    return k;
  };
  std::vector<StageCost> costs;
  costs.reserve(partition.stages.size());
  for (std::size_t s = 0; s < partition.stages.size(); ++s) {
    const StageLayers& range = partition.stages[s];
    const int end = range.first_layer + range.layer_count;
    if (range.first_layer < 0 || range.layer_count < 1 || end > static_cast<int>(layers.size()))
      throw Error("partition: stage " + std::to_string(s) + " covers layers " +
                  std::to_string(range.first_layer) + ".." + std::to_string(end - 1) +
                  " but the model has " + std::to_string(layers.size()) + " layers");
    StageCost stage;
    stage.p2_concat_us.assign(static_cast<std::size_t>(concat), 0.0);
    stage.p2_work_bytes.assign(static_cast<std::size_t>(concat), 0);
    std::int64_t forward_peak = 0;
    std::vector<LayerLevels> levels;
    const std::span<const LayerKind> stage_kinds(layers.begin() + range.first_layer,
                                                 static_cast<std::size_t>(range.layer_count));
    const std::vector<bool> recomputes = recomputed_layers(recompute, stage_kinds);
    const bool layer_by_layer =
        std::find(recomputes.begin(), recomputes.end(), true) != recomputes.end();
    for (std::size_t l = 0; l < stage_kinds.size(); ++l)
      add_layer(stage, kind_cost(stage_kinds[l], recomputes[l]), forward_peak,
                layer_by_layer ? &levels : nullptr);
    stage.forward_work_bytes = std::max<std::int64_t>(forward_peak - stage.stash_bytes, 0);
    if (layer_by_layer) backward_layer_by_layer(stage, levels);
    costs.push_back(std::move(stage));
  }
  return costs;
}

}  // namespace pipeplan
