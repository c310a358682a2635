// Tensor parallelism applied to a profile: every per-GPU time and byte count of a layer divides
// by T, the optimizer step and working memory included.
#include "profiles/tensor_parallel.h"

#include <gtest/gtest.h>

#include "planner/base/error.h"
#include "profiles/analytic.h"
#include "profiles/gpu.h"
#include "profiles/model.h"
#include "profiles/profile.h"

namespace pipeplan {
namespace {

TEST(TensorParallel, EveryTimeAndByteCountOfALayerDividesByT) {
  AnalyticOptions options;
  options.micro_batch_sizes = {1, 2};
  const Profile whole = analytic_profile(model_preset("llama-7b"), find_gpu("h100"), options);
  const int t = 4;
  const Profile split = tensor_parallel_profile(whole, t);
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

// A mixture of experts' T GPUs split its experts: T must divide them.
TEST(TensorParallel, TheGpusOfAStageSplitItsExperts) {
  ModelConfig moe = model_preset("llama-7b");
  moe.name = "moe";
  moe.kv_heads = 8;
  moe.experts = 8;
  moe.experts_per_token = 2;
  const Profile whole = analytic_profile(moe, find_gpu("h100"), AnalyticOptions{});
  EXPECT_EQ(tensor_parallel_profile(whole, 8).layers.at("block").at(1).param_bytes,
            whole.layers.at("block").at(1).param_bytes / 8);
  try {
    moe.experts = 12;
    tensor_parallel_profile(analytic_profile(moe, find_gpu("h100"), AnalyticOptions{}), 8);
    ADD_FAILURE() << "12 experts on 8 GPUs accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "tensor_parallel");
    EXPECT_EQ(e.detail(),
              "8 does not divide the 12 experts of moe (the GPUs of a stage split them)");
  }
}

TEST(TensorParallel, OneGpuPerStageLeavesTheProfileAsItIs) {
  const Profile whole =
      analytic_profile(model_preset("llama-7b"), find_gpu("h100"), AnalyticOptions{});
  const Profile same = tensor_parallel_profile(whole, 1);
  EXPECT_EQ(profile_to_json(same), profile_to_json(whole));
}

}  // namespace
}  // namespace pipeplan
