// Partitioning: balanced partitions with known optima, fixed partitions and their errors, and the
// per-stage cost sums. Profiles are built by hand so the numbers are exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "profiles/partition.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

using pipeplan::testing::error_of;

ModelConfig model_of(const std::string& name, const std::string& family, int blocks) {
  ModelConfig model;
  model.name = name;
  model.family = family;
  model.layers = blocks;
  model.hidden = 64;
  model.heads = 4;
  model.kv_heads = 4;
  model.ffn_hidden = 256;
  model.vocab = 1000;
  model.seq = 128;
  return model;
}

LayerCost cost_of(double forward_us, double p1_us, double p2_us) {
  LayerCost cost;
  cost.forward_us = forward_us;
  cost.p1_us = p1_us;
  cost.p2_us = p2_us;
  cost.p2_concat_us = {{1, p2_us}};
  return cost;
}

Profile profile_of(const ModelConfig& model, LayerCost block, LayerCost embedding = {},
                   LayerCost head = {}) {
  Profile profile;
  profile.model = model;
  profile.seq = model.seq;
  profile.layers["block"][1] = std::move(block);
  if (model.family != "uniform") {
    profile.layers["embedding"][1] = std::move(embedding);
    profile.layers["head"][1] = std::move(head);
  }
  return profile;
}

std::vector<int> layer_counts(const Partition& partition) {
  std::vector<int> counts;
  for (const StageLayers& stage : partition.stages)
    counts.push_back(stage.layer_count);
  return counts;
}

std::vector<int> first_layers(const Partition& partition) {
  std::vector<int> firsts;
  for (const StageLayers& stage : partition.stages)
    firsts.push_back(stage.first_layer);
  return firsts;
}

TEST(Partition, UniformBlocksSplitEvenlyWithEarlierBoundariesOnTies) {
  const ModelConfig model = model_of("u8", "uniform", 8);
  const Profile profile = profile_of(model, cost_of(1, 1, 1));
  // Optimum 3 blocks (9 us) per part; [2,3,3] is the tie with the earliest boundaries.
  const Partition three = partition_balanced(model, profile, 1, 3);
  EXPECT_EQ(layer_counts(three), (std::vector<int>{2, 3, 3}));
  EXPECT_EQ(first_layers(three), (std::vector<int>{0, 2, 5}));
  EXPECT_EQ(layer_counts(partition_balanced(model, profile, 1, 4)), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(layer_counts(partition_balanced(model, profile, 1, 8)), std::vector<int>(8, 1));
  EXPECT_EQ(layer_counts(partition_balanced(model, profile, 1, 1)), (std::vector<int>{8}));
}

TEST(Partition, HeavyEmbeddingShrinksTheFirstStage) {
  const ModelConfig model = model_of("tiny", "llama", 4);
  // Blocks 3 us each, embedding 6 us, head 0.3 us: [1,3] gives max(9, 9.3) against [2,2]'s 12.
  const Profile profile =
      profile_of(model, cost_of(1, 1, 1), cost_of(2, 2, 2), cost_of(0.1, 0.1, 0.1));
  const Partition two = partition_balanced(model, profile, 1, 2);
  EXPECT_EQ(first_layers(two), (std::vector<int>{0, 2}));
  EXPECT_EQ(layer_counts(two), (std::vector<int>{2, 4}));  // embedding+1 block, 3 blocks+head
}

TEST(Partition, LlamaSevenBLikeHeadMakesTheLastStageLighter) {
  const ModelConfig model = model_of("llama-7b", "llama", 32);
  // Blocks 3 us, head 6 us (two blocks' worth: LM head and loss), embedding 0.1 us. The optimum
  // bottleneck is 27 us: at most 8 blocks with the embedding, 9 in the middle, 7 with the head.
  const Profile profile =
      profile_of(model, cost_of(1, 1, 1), cost_of(0.05, 0.05, 0), cost_of(2, 2, 2));
  const Partition four = partition_balanced(model, profile, 1, 4);
  ASSERT_EQ(four.stages.size(), 4u);
  // Blocks per stage: layer counts less the embedding (first) and the head (last).
  const std::vector<int> blocks = {four.stages[0].layer_count - 1, four.stages[1].layer_count,
                                   four.stages[2].layer_count, four.stages[3].layer_count - 1};
  EXPECT_EQ(blocks[0] + blocks[1] + blocks[2] + blocks[3], 32);
  EXPECT_EQ(blocks, (std::vector<int>{7, 9, 9, 7}));
  EXPECT_LT(blocks[3], blocks[1]);
  EXPECT_EQ(first_layers(four), (std::vector<int>{0, 8, 17, 26}));
  double worst_us = 0;
  for (const StageCost& stage : stage_costs(model, profile, 1, four, 1))
    worst_us = std::max(worst_us, stage.forward_us + stage.p1_us + stage.p2_us);
  EXPECT_NEAR(worst_us, 27.0, 1e-9);
}

// The balanced partition against an exhaustive search over every cut into contiguous parts (the
// search walks the split points with one pointer per part count): the same bottleneck, and
// among the partitions that reach it the one with the earliest boundaries, over embedding and
// head weights from none to several blocks' worth, and with the blocks recomputing (every one,
// or the first one or two of each part: their p1 runs the forward again, 1 us more each).
TEST(Partition, BalancedMatchesExhaustiveSearch) {
  struct Best {
    double bottleneck;
    std::vector<int> counts;
  };
  const Recompute full{Recompute::Method::full, 0};
  const Recompute first_one{Recompute::Method::block, 1};
  const Recompute first_two{Recompute::Method::block, 2};
  for (const int blocks : {5, 9, 12}) {
    const ModelConfig model = model_of("m", "llama", blocks);
    for (const Recompute& recompute : {Recompute{}, full, first_one, first_two}) {
      for (const double embedding : {0.0, 0.4, 2.5, 7.0}) {
        for (const double head : {0.0, 1.3, 4.0, 11.0}) {
          const Profile profile =
              profile_of(model, cost_of(1, 1, 1), cost_of(embedding, 0, 0), cost_of(head, 0, 0));
          const auto part_us = [&](int begin, int end) {
            return 3.0 * (end - begin) + recompute.recomputed_of(end - begin) +
                   (begin == 0 ? embedding : 0) + (end == blocks ? head : 0);
          };
          for (int parts = 1; parts <= blocks; ++parts) {
            // Enumerates the cuts in lexicographic order of their block counts, so the first one
            // reaching the minimum is the one with the earliest boundaries.
            Best best{1e300, {}};
            std::vector<int> counts;
            const std::function<void(int, int, double)> walk = [&](int begin, int left,
                                                                   double worst) {
              if (left == 1) {
                const double bottleneck = std::max(worst, part_us(begin, blocks));
                counts.push_back(blocks - begin);
                if (bottleneck < best.bottleneck * (1 - 1e-12)) best = {bottleneck, counts};
                counts.pop_back();
                return;
              }
              for (int end = begin + 1; end + left - 1 <= blocks; ++end) {
                counts.push_back(end - begin);
                walk(end, left - 1, std::max(worst, part_us(begin, end)));
                counts.pop_back();
              }
            };
            walk(0, parts, 0);
            const Partition got = partition_balanced(model, profile, 1, parts, recompute);
            std::vector<int> got_blocks = layer_counts(got);
            got_blocks.front() -= 1;  // the embedding
            got_blocks.back() -= 1;   // the head
            EXPECT_EQ(got_blocks, best.counts)
                << blocks << " blocks, " << parts << " parts, embedding " << embedding << ", head "
                << head << ", recompute " << to_string(recompute);
          }
        }
      }
    }
  }
  EXPECT_THROW(partition_balanced(model_of("m", "llama", 4),
                                  profile_of(model_of("m", "llama", 4), cost_of(1, 1, 1)), 1, 2,
                                  Recompute{Recompute::Method::automatic, 0}),
               InternalError);
}

// Each device's stages (partition_balanced's device_stages): folded (s and n - 1 - s, the V) or
// s mod devices (interleaved).
std::vector<std::vector<int>> groups_of(int parts, int devices, bool folded) {
  std::vector<std::vector<int>> groups(static_cast<std::size_t>(devices));
  for (int s = 0; s < parts; ++s) {
    const int d = folded ? std::min(s, parts - 1 - s) : s % devices;
    groups[static_cast<std::size_t>(d)].push_back(s);
  }
  return groups;
}

// Where stages share a device, the largest device's sum is the least any cut reaches (an
// exhaustive search over every cut), and each device's largest stage the least for its blocks.
TEST(Partition, SharedDevicesBalanceTheirSumsFirst) {
  for (const int blocks : {6, 9, 13}) {
    const ModelConfig model = model_of("m", "llama", blocks);
    for (const Recompute& recompute : {Recompute{}, Recompute{Recompute::Method::full, 0}}) {
      for (const double embedding : {0.0, 0.4, 2.5}) {
        for (const double head : {0.0, 1.3, 4.0, 11.0}) {
          const Profile profile =
              profile_of(model, cost_of(1, 1, 1), cost_of(embedding, 0, 0), cost_of(head, 0, 0));
          const auto part_us = [&](int part, int parts, int count) {
            return 3.0 * count + recompute.recomputed_of(count) + (part == 0 ? embedding : 0) +
                   (part == parts - 1 ? head : 0);
          };
          for (const auto& [devices, chunks, folded] :
               {std::tuple{2, 2, true}, std::tuple{3, 2, true}, std::tuple{2, 2, false},
                std::tuple{2, 3, false}}) {
            const int parts = devices * chunks;
            if (parts > blocks) continue;
            const auto groups = groups_of(parts, devices, folded);
            const auto worst_device = [&](const std::vector<int>& counts) {
              double worst = 0;
              for (const auto& group : groups) {
                double sum = 0;
                for (const int part : group)
                  sum += part_us(part, parts, counts[static_cast<std::size_t>(part)]);
                worst = std::max(worst, sum);
              }
              return worst;
            };
            double best = 1e300;
            std::vector<int> counts;
            const std::function<void(int)> walk = [&](int left) {
              if (static_cast<int>(counts.size()) == parts - 1) {
                if (left < 1) return;
                counts.push_back(left);
                best = std::min(best, worst_device(counts));
                counts.pop_back();
                return;
              }
              for (int n = 1; n + (parts - 1 - static_cast<int>(counts.size())) <= left; ++n) {
                counts.push_back(n);
                walk(left - n);
                counts.pop_back();
              }
            };
            walk(blocks);
            std::vector<int> got =
                layer_counts(partition_balanced(model, profile, 1, parts, recompute, groups));
            got.front() -= 1;  // the embedding
            got.back() -= 1;   // the head
            const std::string label = std::to_string(blocks) + " blocks, " +
                                      std::to_string(devices) + "x" + std::to_string(chunks) +
                                      (folded ? " folded" : " mod P") + ", embedding " +
                                      std::to_string(embedding) + ", head " + std::to_string(head) +
                                      ", " + to_string(recompute);
            EXPECT_NEAR(worst_device(got), best, 1e-9) << label;
            EXPECT_EQ(std::accumulate(got.begin(), got.end(), 0), blocks) << label;
            EXPECT_GE(*std::min_element(got.begin(), got.end()), 1) << label;
          }
        }
      }
    }
  }
}

// LLaMA-13B-like, 40 blocks on 8 devices in a V (16 stages), the head half a block: the cut
// that only balanced the stages gave device 0 one block and the head beside a later device's
// six (1548 against 2652 ms in a plan); device 0 now holds 5.5 blocks' time, the others 5.
TEST(Partition, AVDeviceHoldsTheHeadAndFewerBlocks) {
  const ModelConfig model = model_of("m", "llama", 40);
  const Profile profile =
      profile_of(model, cost_of(1, 1, 1), cost_of(0, 0, 0), cost_of(0.5, 0.5, 0.5));
  std::vector<int> got =
      layer_counts(partition_balanced(model, profile, 1, 16, {}, groups_of(16, 8, true)));
  got.front() -= 1;
  got.back() -= 1;
  for (int d = 0; d < 8; ++d) {
    const int blocks = got[static_cast<std::size_t>(d)] + got[static_cast<std::size_t>(15 - d)];
    EXPECT_EQ(blocks, 5) << "device " << d;
  }
  // Within a device, as even as its blocks allow: 3 beside the embedding and 2 beside the head.
  EXPECT_EQ(got.front(), 3);
  EXPECT_EQ(got.back(), 2);
  // A grouping that is not one of the stages is a programming error.
  EXPECT_THROW(partition_balanced(model, profile, 1, 4, {}, {{0, 1}, {1, 2}}), InternalError);
}

// Recomputation moves the cut: 6 blocks of 3 us and a 10 us head on 2 stages split 5 | 1 (15 us
// and 13 against 4 | 2's 12 and 16); with every block recomputing (4 us each) 4 | 2 (16 and 18
// against 5 | 1's 20 and 14). The head, which never recomputes, weighs less beside them.
TEST(Partition, RecomputationIsInTheBalance) {
  const ModelConfig model = model_of("m", "llama", 6);
  const Profile profile = profile_of(model, cost_of(1, 1, 1), {}, cost_of(4, 3, 3));
  const auto blocks = [&](const Recompute& recompute) {
    std::vector<int> counts = layer_counts(partition_balanced(model, profile, 1, 2, recompute));
    counts.front() -= 1;
    counts.back() -= 1;
    return counts;
  };
  EXPECT_EQ(blocks(Recompute{}), (std::vector<int>{5, 1}));
  EXPECT_EQ(blocks(Recompute{Recompute::Method::full, 0}), (std::vector<int>{4, 2}));
}

TEST(Partition, MoreStagesThanBlocksNamesTheField) {
  const ModelConfig model = model_of("llama-7b", "llama", 32);
  const Profile profile = profile_of(model, cost_of(1, 1, 1));
  EXPECT_EQ(error_of([&] { partition_balanced(model, profile, 1, 40); }),
            "devices: 40 stages but llama-7b has 32 blocks");
  EXPECT_EQ(error_of([&] { partition_balanced(model, profile, 1, 0); }),
            "devices: need at least 1 stage, got 0");
}

TEST(Partition, FixedPartitionPlacesEmbeddingAndHead) {
  const ModelConfig model = model_of("llama-7b", "llama", 32);
  const Partition fixed = partition_fixed(model, {10, 10, 12});
  EXPECT_EQ(first_layers(fixed), (std::vector<int>{0, 11, 21}));
  EXPECT_EQ(layer_counts(fixed), (std::vector<int>{11, 10, 13}));
  const Partition uniform = partition_fixed(model_of("u", "uniform", 4), {1, 3});
  EXPECT_EQ(first_layers(uniform), (std::vector<int>{0, 1}));
  EXPECT_EQ(layer_counts(uniform), (std::vector<int>{1, 3}));
  // And back: the blocks of each stage, without the embedding and head riding along.
  EXPECT_EQ(blocks_per_stage(model, fixed), (std::vector<int>{10, 10, 12}));
  EXPECT_EQ(blocks_per_stage(model_of("u", "uniform", 4), uniform), (std::vector<int>{1, 3}));
}

TEST(Partition, FixedPartitionErrorsNameTheOption) {
  const ModelConfig model = model_of("llama-7b", "llama", 32);
  EXPECT_EQ(error_of([&] {
              partition_fixed(model, {8, 8, 8});
            }),
            "layers_per_stage: counts sum to 24 but llama-7b has 32 blocks");
  EXPECT_EQ(error_of([&] {
              partition_fixed(model, {0, 32});
            }),
            "layers_per_stage: stage 0 has 0 blocks; every stage needs at least 1");
  EXPECT_EQ(error_of([&] { partition_fixed(model, {}); }),
            "layers_per_stage: no block counts given");
}

TEST(Partition, StageCostsSumTheirLayers) {
  const ModelConfig model = model_of("tiny", "llama", 3);
  LayerCost block = cost_of(10, 20, 30);
  block.p2_concat_us = {{1, 30}, {2, 50}, {3, 70}};
  block.stash_bytes = 100;
  block.retained_bytes = 40;
  block.param_bytes = 2;
  block.grad_bytes = 4;
  block.optimizer_bytes = 12;
  block.send_bytes = 64;
  LayerCost embedding = cost_of(1, 2, 3);
  embedding.p2_concat_us = {{1, 3}, {2, 5}, {3, 7}};
  embedding.param_bytes = 1000;
  embedding.send_bytes = 64;
  LayerCost head = cost_of(5, 6, 7);
  head.p2_concat_us = {{1, 7}, {2, 13}, {3, 19}};
  head.stash_bytes = 500;
  head.send_bytes = 0;
  const Profile profile = profile_of(model, block, embedding, head);

  const std::vector<StageCost> costs =
      stage_costs(model, profile, 1, partition_fixed(model, {1, 2}), 3);
  ASSERT_EQ(costs.size(), 2u);
  const StageCost& first = costs[0];  // embedding + block
  EXPECT_DOUBLE_EQ(first.forward_us, 11);
  EXPECT_DOUBLE_EQ(first.p1_us, 22);
  EXPECT_DOUBLE_EQ(first.p2_us, 33);
  EXPECT_EQ(first.p2_concat_us, (std::vector<double>{33, 55, 77}));
  EXPECT_EQ(first.stash_bytes, 100);
  EXPECT_EQ(first.retained_bytes, 40);
  EXPECT_EQ(first.static_bytes, 1000 + 18);
  EXPECT_EQ(first.send_bytes, 64);
  const StageCost& last = costs[1];  // block, block, head
  EXPECT_DOUBLE_EQ(last.forward_us, 25);
  EXPECT_EQ(last.p2_concat_us, (std::vector<double>{67, 113, 159}));
  EXPECT_EQ(last.stash_bytes, 700);
  EXPECT_EQ(last.retained_bytes, 80);
  EXPECT_EQ(last.static_bytes, 36);
  EXPECT_EQ(last.send_bytes, 0);  // the head sends nothing onward

  EXPECT_DOUBLE_EQ(last.p2_time_us(2), 113);
  EXPECT_DOUBLE_EQ(last.p2_time_us(6), 318);  // linear beyond the table: 159 · 6 / 3
}

// A stage's working memory is what its ops hold above the plan's level while they run: F charges
// the whole stash at its start, so layer l's F work counts above the stashes up to l only; the
// backward passes and p2 take their layers' largest.
TEST(Partition, StageCostsCarryTheirLayersWorkingMemory) {
  const ModelConfig model = model_of("tiny", "llama", 3);
  LayerCost block = cost_of(10, 20, 30);
  block.stash_bytes = 100;
  block.retained_bytes = 40;
  block.forward_work_bytes = 30;
  block.p1_work_bytes = 20;
  block.p2_work_bytes = {{1, 5}, {2, 9}};
  LayerCost embedding = cost_of(1, 2, 3);
  embedding.forward_work_bytes = 10;
  LayerCost head = cost_of(5, 6, 7);
  head.stash_bytes = 500;
  head.forward_work_bytes = 1000;  // the logits
  head.p1_work_bytes = 700;
  head.p2_work_bytes = {{1, 40}};
  const Profile profile = profile_of(model, block, embedding, head);
  const std::vector<StageCost> costs =
      stage_costs(model, profile, 1, partition_fixed(model, {1, 2}), 3);
  ASSERT_EQ(costs.size(), 2u);
  const StageCost& first = costs[0];        // embedding + block
  EXPECT_EQ(first.forward_work_bytes, 30);  // max(0 + 10, 100 + 30) - 100
  EXPECT_EQ(first.p1_work_bytes, 20);
  EXPECT_EQ(first.fused_work_bytes, 20);
  EXPECT_EQ(first.p2_work_bytes, (std::vector<std::int64_t>{5, 9, 14}));  // 9 / 2 * 3, rounded
  const StageCost& last = costs[1];                                       // block, block, head
  EXPECT_EQ(last.forward_work_bytes, 1000);  // the head's, above every stash
  EXPECT_EQ(last.p1_work_bytes, 700);
  EXPECT_EQ(last.fused_work_bytes, 700);
  EXPECT_EQ(last.p2_work_bytes, (std::vector<std::int64_t>{40, 80, 120}));
  EXPECT_EQ(last.p2_work(6), 240);  // linear beyond the table
  EXPECT_EQ(last.max_work_bytes(), 1000);
  // A heavy first layer: its F work sits below the later stashes.
  LayerCost light_head = head;
  light_head.forward_work_bytes = 0;
  embedding.forward_work_bytes = 650;
  const std::vector<StageCost> other = stage_costs(
      model, profile_of(model, block, embedding, light_head), 1, partition_fixed(model, {1, 2}), 1);
  EXPECT_EQ(other[0].forward_work_bytes, 550);  // 0 + 650 - 100
}

TEST(Partition, StageCostsRejectRangesOutsideTheModel) {
  const ModelConfig model = model_of("tiny", "llama", 3);
  const Profile profile = profile_of(model, cost_of(1, 1, 1));
  Partition bad;
  bad.stages = {{0, 3}, {3, 3}};
  EXPECT_EQ(error_of([&] { stage_costs(model, profile, 1, bad, 1); }),
            "partition: stage 1 covers layers 3..5 but the model has 5 layers");
}

}  // namespace
}  // namespace pipeplan
