// Activation recomputation: a recomputing block keeps only its input between its forward and its
// backward, and p1 re-runs the forward first; nothing else changes. Which blocks recompute, and
// the forms that choice takes (the flag, the plan file, Megatron-LM's arguments).
#include "profiles/recompute.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "profiles/analytic.h"
#include "profiles/gpu.h"
#include "profiles/model.h"
#include "profiles/partition.h"
#include "profiles/profile.h"

namespace pipeplan {
namespace {

// One block with round numbers: every field that recomputation changes, by hand.
TEST(Recompute, ABlockKeepsItsInputAndRerunsItsForwardBeforeP1) {
  LayerCost c;
  c.forward_us = 100;
  c.p1_us = 150;
  c.p2_us = 120;
  c.stash_bytes = 1000;
  c.retained_bytes = 400;
  c.send_bytes = 50;
  c.forward_work_bytes = 30;
  c.p1_work_bytes = 60;
  c.p2_work_bytes = {{1, 20}};
  c.param_bytes = 7;
  c.grad_bytes = 14;
  c.optimizer_bytes = 28;
  c.optimizer_us = 9;
  const LayerCost b = recomputed_block(c);
  EXPECT_EQ(b.stash_bytes, 50);  // the input only
  EXPECT_DOUBLE_EQ(b.p1_us, 250);
  // Peak during p1: the rebuild holds checkpoint, stash and forward work, 50 + 1000 + 30 = 1080,
  // more than p1 from the whole stash, max(1000, 400) + 60; above the larger of before (50) and
  // after (400): 680.
  EXPECT_EQ(b.p1_work_bytes, 680);
  // The forward rises to 1000 + 30 and leaves the checkpoint: 980 above it.
  EXPECT_EQ(b.forward_work_bytes, 980);
  // Unchanged: p2, its retained bytes, the weights and the optimizer step.
  EXPECT_DOUBLE_EQ(b.forward_us, 100);
  EXPECT_DOUBLE_EQ(b.p2_us, 120);
  EXPECT_EQ(b.retained_bytes, 400);
  EXPECT_EQ(b.p2_work_bytes, c.p2_work_bytes);
  EXPECT_EQ(b.send_bytes, 50);
  EXPECT_EQ(b.param_bytes, 7);
  EXPECT_EQ(b.grad_bytes, 14);
  EXPECT_EQ(b.optimizer_bytes, 28);
  EXPECT_DOUBLE_EQ(b.optimizer_us, 9);
}

TEST(Recompute, AnAnalyticBlockKeepsMbsTimesSeqTimesHiddenBf16) {
  AnalyticOptions options;
  options.seq = 2048;
  options.micro_batch_sizes = {1, 2};
  const Profile p = analytic_profile(model_preset("llama-7b"), find_gpu("h100"), options);
  for (const int mbs : {1, 2}) {
    SCOPED_TRACE("micro-batch size " + std::to_string(mbs));
    const LayerCost& before = p.layers.at("block").at(mbs);
    const LayerCost after = recomputed_block(before);
    EXPECT_EQ(after.stash_bytes, std::int64_t{2} * mbs * 2048 * 4096);
    EXPECT_LT(after.stash_bytes * 10, before.stash_bytes);  // Korthikanti: ~34·s·b·h vs 2·s·b·h
    EXPECT_DOUBLE_EQ(after.p1_us, before.p1_us + before.forward_us);
  }
}

// The first N blocks of each stage take the recomputed costs; the embedding and head never do.
TEST(Recompute, StageCostsRecomputeTheFirstBlocksOfEachStage) {
  AnalyticOptions options;
  options.seq = 2048;
  options.micro_batch_sizes = {1};
  const Profile p = analytic_profile(model_preset("llama-7b"), find_gpu("h100"), options);
  const Partition cut = partition_fixed(p.model, {6, 10, 8, 8});
  const LayerCost& block = p.layers.at("block").at(1);
  const LayerCost recomputed = recomputed_block(block);
  const auto kept = stage_costs(p.model, p, 1, cut, 1);
  for (const Recompute& r : {Recompute{Recompute::Method::block, 7},
                             Recompute{Recompute::Method::full, 0}, Recompute{}}) {
    SCOPED_TRACE(to_string(r));
    const auto costs = stage_costs(p.model, p, 1, cut, 1, r);
    for (std::size_t s = 0; s < 4; ++s) {
      const int blocks = std::vector<int>{6, 10, 8, 8}[s];
      const int n = r.recomputed_of(blocks);
      EXPECT_EQ(n, r.method == Recompute::Method::full    ? blocks
                   : r.method == Recompute::Method::block ? std::min(7, blocks)
                                                          : 0);
      EXPECT_EQ(costs[s].stash_bytes,
                kept[s].stash_bytes - n * (block.stash_bytes - recomputed.stash_bytes))
          << "stage " << s;
      EXPECT_NEAR(costs[s].p1_us, kept[s].p1_us + n * block.forward_us, 1e-6) << "stage " << s;
      EXPECT_DOUBLE_EQ(costs[s].forward_us, kept[s].forward_us);
      EXPECT_EQ(costs[s].retained_bytes, kept[s].retained_bytes);
    }
  }
  // A fused backward rebuilds a recomputing block's stash while it runs: stage 1 (ten blocks,
  // all recomputing) peaks at its last block, the nine checkpoints before it, then that block's
  // larger of checkpoint and retained bytes and its larger p1 or p2 work, above the ten
  // checkpoints the plan charges B with.
  const auto every = stage_costs(p.model, p, 1, cut, 1, {Recompute::Method::full, 0});
  EXPECT_EQ(every[1].fused_work_bytes,
            std::max(recomputed.stash_bytes, recomputed.retained_bytes) - recomputed.stash_bytes +
                std::max(recomputed.p1_work_bytes, recomputed.p2_work(1)));
  EXPECT_GT(every[1].fused_work_bytes, std::max(recomputed.p1_work_bytes, recomputed.p2_work(1)));
  EXPECT_THROW(static_cast<void>(
                   stage_costs(p.model, p, 1, cut, 1, Recompute{Recompute::Method::automatic, 0})),
               InternalError);
}

// A stage that recomputes is charged layer by layer, as the runtime holds it: going back from its
// last layer, layer l holds the stashes of the layers before it, the retained sets of those after
// it (a split p1; none with a fused backward) and its own top. Round numbers by hand: the tiny
// model cut 2 | 2, recomputing the first block of each stage, so stage 0 is the embedding, a
// recomputing block and a block that keeps its stash.
TEST(Recompute, ARecomputingStagesBackwardIsChargedLayerByLayer) {
  AnalyticOptions options;
  options.seq = 32;
  options.micro_batch_sizes = {1};
  Profile p = analytic_profile(model_preset("tiny"), find_gpu("h100"), options);
  LayerCost& embedding = p.layers.at("embedding").at(1);
  embedding.stash_bytes = 10;
  embedding.retained_bytes = 300;
  embedding.forward_work_bytes = 0;
  embedding.p1_work_bytes = 5;
  embedding.p2_work_bytes = {{1, 0}};
  embedding.send_bytes = 100;
  LayerCost& block = p.layers.at("block").at(1);
  block.stash_bytes = 1000;
  block.retained_bytes = 400;
  block.send_bytes = 100;  // the checkpoint
  block.forward_work_bytes = 30;
  block.p1_work_bytes = 60;
  block.p2_work_bytes = {{1, 20}};
  const Partition cut = partition_fixed(p.model, {2, 2});
  const StageCost stage =
      stage_costs(p.model, p, 1, cut, 1, Recompute{Recompute::Method::block, 1}).at(0);
  // Stash: 10 + 100 (checkpoint) + 1000; retained: 300 + 2 x 400.
  EXPECT_EQ(stage.stash_bytes, 1110);
  EXPECT_EQ(stage.retained_bytes, 1100);
  // Forward: the keeping block peaks at 10 + 100 + 1000 + 30 = 1140, 30 above the stash.
  EXPECT_EQ(stage.forward_work_bytes, 30);
  // p1, from the last layer:
  //   keeping block:      10 + 100 before it, max(1000, 400) + 60             = 1170
  //   recomputing block:  10 before, 400 after, rebuild 100 + 1000 + 30        = 1540
  //   embedding:          800 after, max(10, 300) + 5                          = 1105
  // 1540 above the larger of the levels it starts from and ends at (1110, 1100): 430. (Each
  // layer's own excess, the rule of a stage that does not recompute, would give 730.)
  EXPECT_EQ(stage.p1_work_bytes, 430);
  // Fused, each p2 right after its p1:
  //   keeping block:      110 before, max(1000, 400) + max(60, 20)             = 1170
  //   recomputing block:  10 before, 1130 (its rebuild)                        = 1140
  //   embedding:          max(10, 300) + max(5, 0)                             = 305
  // 1170 above the 1110 it starts from: 60.
  EXPECT_EQ(stage.fused_work_bytes, 60);
}

// The one rule the planner's costs and the runtime's passes share: the first blocks of a stage,
// skipping the embedding and the head, never more than the stage has.
TEST(Recompute, TheFirstBlocksOfAStageRecomputeNeverItsEmbeddingOrHead) {
  using K = LayerKind;
  const std::vector<K> first = {K::embedding, K::block, K::block, K::block};
  const std::vector<K> last = {K::block, K::block, K::head};
  const Recompute two{Recompute::Method::block, 2};
  EXPECT_EQ(recomputed_layers(two, first), (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ(recomputed_layers(two, last), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(recomputed_layers({Recompute::Method::block, 5}, last),
            (std::vector<bool>{true, true, false}));
  EXPECT_EQ(recomputed_layers({Recompute::Method::full, 0}, first),
            (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(recomputed_layers({}, first), (std::vector<bool>(4, false)));
  EXPECT_EQ(recomputed_layers(two, std::vector<K>{K::embedding}), (std::vector<bool>{false}));
  EXPECT_THROW(static_cast<void>(recomputed_layers({Recompute::Method::automatic, 0}, last)),
               InternalError);
}

TEST(Recompute, FlagFileAndMegatronForms) {
  EXPECT_EQ(recompute_from_string("none"), Recompute{});
  EXPECT_EQ(recompute_from_string("full"), (Recompute{Recompute::Method::full, 0}));
  EXPECT_EQ(recompute_from_string("auto"), (Recompute{Recompute::Method::automatic, 0}));
  EXPECT_EQ(recompute_from_string("3"), (Recompute{Recompute::Method::block, 3}));
  for (const char* bad : {"selective", "0", "-1", "3x", "", "1025"}) {
    try {
      static_cast<void>(recompute_from_string(bad));
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const FieldError& e) {
      EXPECT_EQ(e.field(), "recompute");
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos);
    }
  }
  const Recompute three{Recompute::Method::block, 3};
  EXPECT_EQ(to_string(three), "3");
  EXPECT_EQ(recompute_text(three), "the first 3 blocks of each stage");
  EXPECT_EQ(megatron_recompute_args(three),
            "--recompute-granularity full --recompute-method block --recompute-num-layers 3");
  EXPECT_EQ(megatron_recompute_args({Recompute::Method::full, 0}),
            "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1");
  EXPECT_EQ(megatron_recompute_args({}), "");
  for (const Recompute& r : {Recompute{}, Recompute{Recompute::Method::full, 0}, three}) {
    EXPECT_EQ(recompute_from_json(recompute_to_json(r), "meta.recompute"), r);
  }
  EXPECT_EQ(recompute_to_json(three), nlohmann::json({{"method", "block"}, {"blocks", 3}}));
  const auto error = [](const nlohmann::json& j) {
    try {
      static_cast<void>(recompute_from_json(j, "p.json: meta.recompute"));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error({{"method", "auto"}}),
            "p.json: meta.recompute: field 'method' must be \"none\", \"full\" or \"block\", got "
            "'auto'");
  EXPECT_EQ(error({{"method", "block"}, {"blocks", 0}}),
            "p.json: meta.recompute: field 'blocks' must be an integer from 1 to 1024");
  EXPECT_EQ(error({{"method", "block"}}),
            "p.json: meta.recompute: field 'blocks' must be an integer from 1 to 1024");
  EXPECT_EQ(error("full"), "p.json: meta.recompute: must be an object");
  EXPECT_EQ(error({{"method", "full"}, {"blocks", 3}}),
            "p.json: meta.recompute: field 'blocks' belongs to method \"block\" only");
}

}  // namespace
}  // namespace pipeplan
