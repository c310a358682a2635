// Data parallelism applied to a profile: a replica's passes are unchanged; each layer's optimizer
// step gains the gradient reduction across the D replicas (and, sharded, the parameter
// all-gather, with 1/D of the update and of the optimizer state).
#include "profiles/data_parallel.h"

#include <gtest/gtest.h>

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
  options.micro_batch_sizes = {1, 2};
  return analytic_profile(model_preset("llama-7b"), find_gpu("h100"), options);
}

// latency + (D - 1)/D · bytes / bandwidth (GB/s = 1e3 bytes/us).
double ring_us(double bytes, int d, double gbps, double latency_us) {
  return latency_us + (d - 1.0) / d * bytes / (gbps * 1e3);
}

// Nothing but the optimizer step's time and state changes: `changed` with those two fields and
// the provenance notes put back is `whole` to the byte.
void expect_only_the_optimizer_changed(const Profile& whole, Profile changed) {
  for (auto& [kind, by_mbs] : changed.layers) {
    for (auto& [mbs, c] : by_mbs) {
      c.optimizer_us = whole.layers.at(kind).at(mbs).optimizer_us;
      c.optimizer_bytes = whole.layers.at(kind).at(mbs).optimizer_bytes;
    }
  }
  changed.provenance.notes = whole.provenance.notes;
  EXPECT_EQ(profile_to_json(changed), profile_to_json(whole));
}

TEST(DataParallel, ShardedOptimizerDividesTheUpdateAndAddsReduceScatterAndAllGather) {
  const Profile whole = llama_7b();
  const DataParallel dp{8, DataParallelOptimizer::sharded, P2pLink{10.0, 50.0}};
  const Profile replicated = data_parallel_profile(whole, dp);
  int compared = 0;
  for (const auto& [kind, by_mbs] : whole.layers) {
    for (const auto& [mbs, c] : by_mbs) {
      SCOPED_TRACE(kind + " at micro-batch size " + std::to_string(mbs));
      const LayerCost& r = replicated.layers.at(kind).at(mbs);
      ASSERT_GT(c.optimizer_us, 0);
      const double sync = ring_us(static_cast<double>(c.grad_bytes), 8, 50.0, 10.0) +
                          ring_us(static_cast<double>(c.param_bytes), 8, 50.0, 10.0);
      EXPECT_NEAR(r.optimizer_us, c.optimizer_us / 8 + sync, 1e-9 * r.optimizer_us);
      EXPECT_EQ(r.optimizer_bytes, (c.optimizer_bytes + 7) / 8);
      ++compared;
    }
  }
  EXPECT_EQ(compared, 6);  // embedding, block and head at two micro-batch sizes
  expect_only_the_optimizer_changed(whole, replicated);
  // A LLaMA-7B block holds 202,383,360 parameters: 4 bytes of gradient each reduce-scattered and
  // 2 of parameter all-gathered over 50 GB/s, 7/8 of each crossing: 14,176.8 + 7,093.4 us.
  const LayerCost& block = whole.layers.at("block").at(1);
  EXPECT_EQ(block.param_bytes, 2 * 202383360LL);
  EXPECT_NEAR(replicated.layers.at("block").at(1).optimizer_us - block.optimizer_us / 8, 21270.2,
              0.1);
}

TEST(DataParallel, ReplicatedOptimizerAllReducesTheGradientsAndKeepsItsState) {
  const Profile whole = llama_7b();
  const DataParallel dp{4, DataParallelOptimizer::replicated, P2pLink{5.0, 100.0}};
  const Profile replicated = data_parallel_profile(whole, dp);
  for (const auto& [kind, by_mbs] : whole.layers) {
    for (const auto& [mbs, c] : by_mbs) {
      SCOPED_TRACE(kind + " at micro-batch size " + std::to_string(mbs));
      const LayerCost& r = replicated.layers.at(kind).at(mbs);
      EXPECT_NEAR(r.optimizer_us,
                  c.optimizer_us + 2 * ring_us(static_cast<double>(c.grad_bytes), 4, 100.0, 5.0),
                  1e-9 * r.optimizer_us);
      EXPECT_EQ(r.optimizer_bytes, c.optimizer_bytes);
    }
  }
  expect_only_the_optimizer_changed(whole, replicated);
}

TEST(DataParallel, OneReplicaLeavesTheProfileAsItIs) {
  const Profile whole = llama_7b();
  EXPECT_EQ(profile_to_json(data_parallel_profile(whole, DataParallel{})), profile_to_json(whole));
  EXPECT_EQ(profile_to_json(data_parallel_profile(
                whole, {1, DataParallelOptimizer::replicated, P2pLink{10.0, 50.0}})),
            profile_to_json(whole));
}

// Synthetic layers hold no bytes: nothing to send, so no latency is added either.
TEST(DataParallel, LayersWithoutBytesAddNoTraffic) {
  UniformCosts costs;
  costs.forward_ms = costs.p1_ms = costs.p2_ms = 1;
  const Profile whole = uniform_profile(costs, 4, 1);
  const DataParallel dp{4, DataParallelOptimizer::replicated, P2pLink{10.0, 50.0}};
  const Profile replicated = data_parallel_profile(whole, dp);
  for (const auto& [kind, by_mbs] : whole.layers) {
    for (const auto& [mbs, c] : by_mbs) {
      EXPECT_EQ(replicated.layers.at(kind).at(mbs).optimizer_us, c.optimizer_us) << kind;
    }
  }
}

// A profile that does not time the optimizer step gives plans without one: the reduction, which
// would sit in it, is left out with it rather than stand alone.
TEST(DataParallel, NoOptimizerStepNoReduction) {
  Profile whole = llama_7b();
  for (auto& [kind, by_mbs] : whole.layers) {
    for (auto& [mbs, c] : by_mbs)
      c.optimizer_us = 0;
  }
  for (const DataParallelOptimizer optimizer :
       {DataParallelOptimizer::sharded, DataParallelOptimizer::replicated}) {
    const Profile replicated = data_parallel_profile(whole, {4, optimizer, P2pLink{10.0, 50.0}});
    for (const auto& [kind, by_mbs] : replicated.layers) {
      for (const auto& [mbs, c] : by_mbs)
        EXPECT_EQ(c.optimizer_us, 0) << kind << " " << to_string(optimizer);
    }
  }
}

TEST(DataParallel, BadReplicasLinkAndOptimizerAreNamed) {
  const Profile whole = llama_7b();
  const auto field_of = [&](const DataParallel& dp) -> std::string {
    try {
      data_parallel_profile(whole, dp);
    } catch (const FieldError& e) {
      return e.field() + ": " + e.detail();
    }
    return "accepted";
  };
  EXPECT_EQ(field_of({0, DataParallelOptimizer::sharded, {}}),
            "data_parallel: must be at least 1, got 0");
  EXPECT_EQ(field_of({(1 << 20) + 1, DataParallelOptimizer::sharded, {}}).substr(0, 39),
            "data_parallel: 1048577 is above the lim");
  EXPECT_EQ(field_of({2, DataParallelOptimizer::sharded, P2pLink{0.0, 1e-9}}).substr(0, 29),
            "data_parallel_link: bandwidth");
  EXPECT_EQ(field_of({2, DataParallelOptimizer::sharded, P2pLink{-1.0, 50.0}}),
            "data_parallel_link: latency must be in [0, 1e+09] us, got -1");
  EXPECT_EQ(data_parallel_optimizer_from_string("replicated"), DataParallelOptimizer::replicated);
  try {
    data_parallel_optimizer_from_string("zero3");
    ADD_FAILURE() << "zero3 accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "data_parallel_optimizer");
    EXPECT_EQ(e.detail(), "must be 'sharded' or 'replicated', got 'zero3'");
  }
}

TEST(DataParallel, TextNamesReplicasOptimizerAndLink) {
  EXPECT_EQ(data_parallel_text({4, DataParallelOptimizer::sharded, P2pLink{10.0, 50.0}}),
            "4 replicas, sharded optimizer, 50 GB/s per direction, 10 us latency");
  EXPECT_EQ(data_parallel_text({2, DataParallelOptimizer::replicated, P2pLink{}}),
            "2 replicas, replicated optimizer, no bandwidth limit, 0 us latency");
}

}  // namespace
}  // namespace pipeplan
