// Full activation recomputation applied to a profile: blocks keep only their input between the
// forward and the backward, and p1 re-runs the forward first; nothing else changes.
#include "profiles/recompute.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "planner/base/error.h"
#include "profiles/analytic.h"
#include "profiles/gpu.h"
#include "profiles/model.h"
#include "profiles/profile.h"

namespace pipeplan {
namespace {

Profile llama_7b() {
  AnalyticOptions options;
  options.seq = 2048;
  options.micro_batch_sizes = {1, 2};
  return analytic_profile(model_preset("llama-7b"), find_gpu("h100"), options);
}

// One block with round numbers: every field that recomputation changes, by hand.
TEST(Recompute, FullKeepsTheInputAndRerunsTheForwardBeforeP1) {
  Profile profile;
  LayerCost c;
  c.forward_us = 100;
  c.p1_us = 150;
  c.p2_us = 120;
  c.stash_bytes = 1000;
  c.retained_bytes = 400;
  c.send_bytes = 50;
  c.forward_work_bytes = 30;
  c.p1_work_bytes = 80;
  c.p2_work_bytes = {{1, 20}};
  c.param_bytes = 7;
  c.grad_bytes = 14;
  c.optimizer_bytes = 28;
  c.optimizer_us = 9;
  profile.layers["block"][1] = c;
  profile.layers["head"][1] = c;

  const Profile r = recompute_profile(profile, Recompute::full);
  const LayerCost& b = r.layers.at("block").at(1);
  EXPECT_EQ(b.stash_bytes, 50);  // the input only
  EXPECT_DOUBLE_EQ(b.p1_us, 250);
  // Peak during p1: max(1000 + 30, max(1000, 400) + 80) = 1080; above the larger of before (50)
  // and after (400): 680.
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
  // The head keeps its activations.
  const LayerCost& h = r.layers.at("head").at(1);
  EXPECT_EQ(h.stash_bytes, 1000);
  EXPECT_DOUBLE_EQ(h.p1_us, 150);
  EXPECT_EQ(h.p1_work_bytes, 80);
  EXPECT_EQ(h.forward_work_bytes, 30);
}

TEST(Recompute, NoneLeavesTheProfileAsItWas) {
  const Profile whole = llama_7b();
  EXPECT_EQ(profile_to_json(recompute_profile(whole, Recompute::none)), profile_to_json(whole));
}

TEST(Recompute, AnalyticBlocksKeepTheirInputAndEmbeddingAndHeadAreUnchanged) {
  const Profile whole = llama_7b();
  const Profile r = recompute_profile(whole, Recompute::full);
  for (const int mbs : {1, 2}) {
    SCOPED_TRACE("micro-batch size " + std::to_string(mbs));
    const LayerCost& before = whole.layers.at("block").at(mbs);
    const LayerCost& after = r.layers.at("block").at(mbs);
    // A block's input: mbs x 2048 tokens x 4096 hidden in bf16.
    const std::int64_t input = std::int64_t{2} * mbs * 2048 * 4096;
    EXPECT_EQ(after.stash_bytes, input);
    EXPECT_LT(after.stash_bytes * 10, before.stash_bytes);  // Korthikanti: ~34·s·b·h vs 2·s·b·h
    EXPECT_DOUBLE_EQ(after.p1_us, before.p1_us + before.forward_us);
    for (const char* kind : {"embedding", "head"}) {
      const LayerCost& a = r.layers.at(kind).at(mbs);
      const LayerCost& w = whole.layers.at(kind).at(mbs);
      EXPECT_EQ(a.stash_bytes, w.stash_bytes) << kind;
      EXPECT_DOUBLE_EQ(a.p1_us, w.p1_us) << kind;
    }
  }
  EXPECT_NE(r.provenance.notes.find("recomputation"), std::string::npos);
}

TEST(Recompute, NamesAreNoneAndFull) {
  EXPECT_EQ(recompute_from_string("none"), Recompute::none);
  EXPECT_EQ(recompute_from_string("full"), Recompute::full);
  EXPECT_EQ(to_string(Recompute::full), "full");
  EXPECT_EQ(to_string(Recompute::none), "none");
  try {
    static_cast<void>(recompute_from_string("selective"));
    FAIL() << "selective accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "recompute");
    EXPECT_NE(std::string(e.what()).find("'selective'"), std::string::npos);
  }
}

}  // namespace
}  // namespace pipeplan
