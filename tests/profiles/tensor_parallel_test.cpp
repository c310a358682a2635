// Tensor parallelism applied to a profile: every per-GPU time and byte count of a layer divides
// by T, the optimizer step and working memory included, and each pass adds Megatron-LM's
// sequence-parallel collectives over the GPUs' link.
#include "profiles/tensor_parallel.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "planner/base/error.h"
#include "profiles/analytic.h"
#include "profiles/gpu.h"
#include "profiles/model.h"
#include "profiles/profile.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

using testing::error_of;

TEST(TensorParallel, EveryTimeAndByteCountOfALayerDividesByT) {
  AnalyticOptions options;
  options.micro_batch_sizes = {1, 2};
  const Profile whole = analytic_profile(model_preset("llama-7b"), find_gpu("h100"), options);
  const int t = 4;
  // Without a link (infinite bandwidth, no latency) the collectives take no time.
  const Profile split = tensor_parallel_profile(whole, t, P2pLink{});
  int compared = 0;
  for (const auto& [kind, by_mbs] : whole.layers) {
    for (const auto& [mbs, c] : by_mbs) {
      const LayerCost& s = split.layers.at(kind).at(mbs);
      SCOPED_TRACE(kind + " at micro-batch size " + std::to_string(mbs));
      EXPECT_DOUBLE_EQ(s.forward_us, c.forward_us / t);
      EXPECT_DOUBLE_EQ(s.p1_us, c.p1_us / t);
      EXPECT_DOUBLE_EQ(s.p2_us, c.p2_us / t);
      for (const auto& [k, us] : c.p2_concat_us)
        EXPECT_DOUBLE_EQ(s.p2_concat_us.at(k), us / t) << "p2 over " << k;
      EXPECT_GT(c.optimizer_us, 0);
      EXPECT_DOUBLE_EQ(s.optimizer_us, c.optimizer_us / t);
      EXPECT_EQ(s.stash_bytes, c.stash_bytes / t);
      EXPECT_EQ(s.retained_bytes, c.retained_bytes / t);
      EXPECT_EQ(s.param_bytes, c.param_bytes / t);
      EXPECT_EQ(s.grad_bytes, c.grad_bytes / t);
      EXPECT_EQ(s.optimizer_bytes, c.optimizer_bytes / t);
      EXPECT_EQ(s.send_bytes, c.send_bytes / t);
      EXPECT_EQ(s.forward_work_bytes, c.forward_work_bytes / t);
      EXPECT_EQ(s.p1_work_bytes, c.p1_work_bytes / t);
      for (const auto& [k, bytes] : c.p2_work_bytes)
        EXPECT_EQ(s.p2_work_bytes.at(k), bytes / t) << "p2 over " << k;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 6);  // embedding, block and head at two micro-batch sizes
}

// Over a link, each pass adds its all-gathers and reduce-scatters of the (mbs, seq, hidden) bf16
// activation: latency + (T - 1)/T · bytes / bandwidth each; 4, 4 and 2 for a block's F, p1 and
// p2, 1, 0 and 1 for the embedding, 1, 1 and 1 for the head.
TEST(TensorParallel, EachPassAddsItsCollectivesOverTheLink) {
  AnalyticOptions options;
  options.micro_batch_sizes = {1, 2};
  options.max_p2_concat = 2;
  const GpuSpec h100 = find_gpu("h100");
  const Profile whole = analytic_profile(model_preset("llama-7b"), h100, options);
  const P2pLink link{10.0, 450.0};
  EXPECT_EQ(node_link(h100).bandwidth_GBps, link.bandwidth_GBps);
  EXPECT_EQ(node_link(h100).latency_us, link.latency_us);
  const int t = 8;
  const Profile split = tensor_parallel_profile(whole, t, link);
  const Profile free = tensor_parallel_profile(whole, t, P2pLink{});
  struct Counts {
    int forward, p1, p2;
  };
  const std::map<std::string, Counts> counts = {
      {"embedding", {1, 0, 1}}, {"block", {4, 4, 2}}, {"head", {1, 1, 1}}};
  for (const auto& [kind, n] : counts) {
    for (const int mbs : {1, 2}) {
      SCOPED_TRACE(kind + " at micro-batch size " + std::to_string(mbs));
      // LLaMA-7B at seq 2048: 2 · mbs · 2048 · 4096 bytes; 7/8 of them cross at 450 GB/s.
      const double bytes = 2.0 * mbs * 2048 * 4096;
      const double one = 10.0 + 7.0 / 8.0 * bytes / 450e3;
      const LayerCost& s = split.layers.at(kind).at(mbs);
      const LayerCost& f = free.layers.at(kind).at(mbs);
      EXPECT_NEAR(s.forward_us, f.forward_us + n.forward * one, 1e-9 * s.forward_us);
      EXPECT_NEAR(s.p1_us, f.p1_us + n.p1 * one, 1e-9 * s.p1_us);
      EXPECT_NEAR(s.p2_us, f.p2_us + n.p2 * one, 1e-9 * s.p2_us);
      // Two micro-batches' p2 in one call gather both.
      const double two = 10.0 + 7.0 / 8.0 * 2 * bytes / 450e3;
      EXPECT_NEAR(s.p2_concat_us.at(2), f.p2_concat_us.at(2) + n.p2 * two,
                  1e-9 * s.p2_concat_us.at(2));
      EXPECT_EQ(s.stash_bytes, f.stash_bytes);  // memory is the same either way
    }
  }
  // A block's forward at T = 8: 1514.6 / 8 = 189.3 us of compute and 4 x 42.6 us of collectives.
  EXPECT_GT(split.layers.at("block").at(1).forward_us,
            1.8 * free.layers.at("block").at(1).forward_us);
}

// A mixture of experts' T GPUs split its experts: T must divide them.
TEST(TensorParallel, TheGpusOfAStageSplitItsExperts) {
  ModelConfig moe = model_preset("llama-7b");
  moe.name = "moe";
  moe.kv_heads = 8;
  moe.experts = 8;
  moe.experts_per_token = 2;
  const Profile whole = analytic_profile(moe, find_gpu("h100"), AnalyticOptions{});
  EXPECT_EQ(tensor_parallel_profile(whole, 8, P2pLink{}).layers.at("block").at(1).param_bytes,
            whole.layers.at("block").at(1).param_bytes / 8);
  try {
    moe.experts = 12;
    tensor_parallel_profile(analytic_profile(moe, find_gpu("h100"), AnalyticOptions{}), 8,
                            P2pLink{});
    ADD_FAILURE() << "12 experts on 8 GPUs accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "tensor_parallel");
    EXPECT_EQ(e.detail(),
              "8 does not divide the 12 experts of moe (the GPUs of a stage split them)");
  }
}

// Where the heads divide and the key/value heads do not, the message names the key/value heads.
TEST(TensorParallel, TheHeadCountThatDoesNotDivideIsNamed) {
  ModelConfig gqa = model_preset("llama-7b");
  gqa.name = "gqa";
  gqa.kv_heads = 4;
  const Profile whole = analytic_profile(gqa, find_gpu("h100"), AnalyticOptions{});
  try {
    tensor_parallel_profile(whole, 8, P2pLink{});
    ADD_FAILURE() << "4 key/value heads on 8 GPUs accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.detail(),
              "8 does not divide the 4 key/value heads of gqa (its 32 attention heads share them)");
  }
}

// Megatron's column-parallel MLP splits its width: LLaMA-13B's 13824 on 5 GPUs (heads 40 divide)
// is refused, as is a mixture of experts' shared expert whose width does not divide.
TEST(TensorParallel, AnMlpWidthThatDoesNotDivideIsNamed) {
  const ModelConfig llama13b = model_preset("llama-13b");
  EXPECT_EQ(error_of([&] { check_tensor_parallel(llama13b, 5); }),
            "tensor_parallel: 5 does not divide the 13824-wide MLP of llama-13b (the GPUs of a "
            "stage split its columns)");
  EXPECT_NO_THROW(check_tensor_parallel(llama13b, 8));
  ModelConfig moe = model_preset("llama-7b");
  moe.name = "moe";
  moe.experts = 8;
  moe.experts_per_token = 2;
  moe.shared_ffn_hidden = 1000;
  EXPECT_EQ(error_of([&] { check_tensor_parallel(moe, 16); }),
            "tensor_parallel: 16 does not divide the 1000-wide shared-expert MLP of moe (the GPUs "
            "of a stage split its columns)");
  moe.shared_ffn_hidden = 0;  // no shared expert: the routed experts' width is not split
  moe.ffn_hidden = 1000;
  moe.experts = 16;
  EXPECT_NO_THROW(check_tensor_parallel(moe, 16));
}

TEST(TensorParallel, OneGpuPerStageLeavesTheProfileAsItIs) {
  const Profile whole =
      analytic_profile(model_preset("llama-7b"), find_gpu("h100"), AnalyticOptions{});
  const Profile same = tensor_parallel_profile(whole, 1, node_link(find_gpu("h100")));
  EXPECT_EQ(profile_to_json(same), profile_to_json(whole));
}

}  // namespace
}  // namespace pipeplan
