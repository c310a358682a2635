// The caching allocator's byte accounting, the stash bytes it measures, and the profiler's
// output going through the planner's profile loader.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/cuda/allocator.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/profiler.h"
#include "runtime/random.h"
#include "tests/runtime/cuda/gpu_test_support.h"
#include "tests/runtime/models.h"

namespace pipeplan {
namespace {

TEST(CudaAllocator, CountsRequestedBytesAndReusesBlocks) {
  PIPEPLAN_REQUIRE_GPU();
  cuda::DeviceAllocator allocator;
  {
    const auto a = allocator.allocate(1000);  // rounded to 1024 in the cache, counted as 1000
    const auto b = allocator.allocate(4096);
    EXPECT_EQ(allocator.stats().current_bytes, 5096);
    EXPECT_EQ(allocator.stats().reserved_bytes, 1024 + 4096);
  }
  EXPECT_EQ(allocator.stats().current_bytes, 0);
  EXPECT_EQ(allocator.stats().peak_bytes, 5096);
  const std::int64_t mallocs = allocator.stats().malloc_calls;
  const auto again = allocator.allocate(1000);  // served from the cache
  EXPECT_EQ(allocator.stats().malloc_calls, mallocs);
  EXPECT_EQ(allocator.stats().current_bytes, 1000);
  allocator.reset_peak();
  EXPECT_EQ(allocator.stats().peak_bytes, 1000);
}

// A block the cache hands out again carries the fence count of its free: a copy from another
// stream waits for the first fence recorded after it; a fresh block needs no wait.
TEST(CudaAllocator, ACachedBlockCarriesTheFenceCountOfItsFree) {
  PIPEPLAN_REQUIRE_GPU();
  cuda::DeviceAllocator allocator;
  cuda::FenceClock& clock = *allocator.fence_clock();
  auto first = allocator.allocate_fenced(2048);
  EXPECT_EQ(first.freed_at, cuda::DeviceAllocator::kNeverUsed);
  clock.advance();
  clock.advance();
  auto second = allocator.allocate_fenced(2048);
  first.data.reset();  // freed after two fences
  clock.advance();
  second.data.reset();  // after three
  EXPECT_EQ(allocator.stats().current_bytes, 0);
  // Oldest free first, and the blocks are reused, not malloc'd again.
  const std::int64_t mallocs = allocator.stats().malloc_calls;
  const auto again = allocator.allocate_fenced(2000);  // rounds to the same 2048
  const auto again2 = allocator.allocate_fenced(2048);
  EXPECT_EQ(again.freed_at, 2);
  EXPECT_EQ(again2.freed_at, 3);
  EXPECT_EQ(allocator.stats().malloc_calls, mallocs);
  EXPECT_EQ(allocator.allocate_fenced(4096).freed_at, cuda::DeviceAllocator::kNeverUsed);
}

// An overlapped pair's lanes: while a pair is open, the side lane takes only blocks freed before
// the fork or freed by itself, and everyone else skips what the side lane freed; after the join
// every block is for anyone again. Blocks are told apart by address.
TEST(CudaAllocator, AnOpenPairKeepsEachLaneToTheBlocksItMayReuse) {
  PIPEPLAN_REQUIRE_GPU();
  cuda::DeviceAllocator allocator;
  // Frees a block of `bytes` on the given lane and says where it was.
  const auto freed = [&](std::int64_t bytes, bool side) {
    allocator.set_side_lane(side);
    auto block = allocator.allocate(bytes);
    const void* where = block.get();
    block.reset();
    allocator.set_side_lane(false);
    return where;
  };
  // Takes a block of `bytes` on the given lane, keeps it out of the cache until the test ends.
  std::vector<std::shared_ptr<void>> held;
  const auto take = [&](std::int64_t bytes, bool side) {
    allocator.set_side_lane(side);
    held.push_back(allocator.allocate(bytes));
    allocator.set_side_lane(false);
    return held.back().get();
  };
  const void* before_fork = freed(1024, false);
  allocator.begin_pair();
  const void* first_op = freed(2048, false);  // the pair's first op may still read it
  EXPECT_EQ(take(1024, true), before_fork) << "the fork covers a block freed before it";
  EXPECT_NE(take(2048, true), first_op) << "the stage's stream may still read it";
  EXPECT_EQ(take(2048, false), first_op) << "the stage's stream reuses it in stream order";
  const void* side_op = freed(4096, true);
  EXPECT_NE(take(4096, false), side_op) << "the stage's stream has not joined the side yet";
  held.push_back(allocator.allocate_fenced(4096).data);
  EXPECT_NE(held.back().get(), side_op) << "a copy from another stream must not take it either";
  EXPECT_EQ(take(4096, true), side_op) << "the side lane reuses its own in stream order";
  const void* side_again = freed(8192, true);
  allocator.end_pair();
  EXPECT_EQ(take(8192, false), side_again) << "after the join the side lane's blocks are anyone's";
  const void* no_pair = freed(16384, false);
  EXPECT_EQ(take(16384, true), no_pair) << "no pair open: no lanes";
}

// Block stash in bf16 (2 bytes) with fp32 rstd, N = B·T: 2N(5C + W + 3F) + 2·4N, plus the
// probabilities 2·B·H·T² in materialized mode only, or the fp32 logsumexp 4·B·H·T in flash (where
// this build has fused attention; elsewhere flash is refused). The allocator's count must equal
// it.
TEST(CudaAllocator, BlockStashBytesMatchTheTensorSizes) {
  PIPEPLAN_REQUIRE_GPU();
  const ModelConfig m = pipeplan::testing::tiny_model();
  const std::int64_t b = 2, n = b * m.seq, c = m.hidden, f = m.ffn_hidden;
  const std::int64_t w = (m.heads + 2 * m.kv_heads) * (m.hidden / m.heads);
  std::vector<Attention> modes = {Attention::materialized, Attention::recompute};
  if (cuda::fused_attention_built()) modes.push_back(Attention::flash);
  for (const Attention mode : modes) {
    cuda::CudaBackend backend({mode, nullptr});
    const LayerParams layer = backend.init_layer(m, LayerKind::block, 1, 1);
    std::vector<double> values(static_cast<std::size_t>(n * c));
    fill_normal(values, 1.0, 3);
    const Tensor x = backend.upload(values, {b, m.seq, c});
    backend.synchronize();
    const std::int64_t before = backend.context().allocator().stats().current_bytes;
    ForwardResult fwd = backend.forward(layer, x, {});
    backend.synchronize();
    const std::int64_t probs =
        mode == Attention::materialized ? 2 * b * m.heads * std::int64_t{m.seq} * m.seq : 0;
    const std::int64_t lse = mode == Attention::flash ? 4 * b * m.heads * std::int64_t{m.seq} : 0;
    const std::int64_t expected = 2 * n * (5 * c + w + 3 * f) + 2 * 4 * n + probs + lse;
    EXPECT_EQ(fwd.stash.bytes(), expected) << to_string(mode);
    EXPECT_EQ(backend.context().allocator().stats().current_bytes - before,
              expected + fwd.output.bytes())
        << to_string(mode);
    // Weights bf16, grads fp32, optimizer = fp32 master + two fp32 moments.
    const std::int64_t count = 2 * c + w * c + c * c + 3 * c * f;
    EXPECT_EQ(layer.param_bytes(), 2 * count);
    EXPECT_EQ(layer.grad_bytes(), 4 * count);
    EXPECT_EQ(backend.optimizer_bytes(layer), 12 * count);
  }
}

TEST(CudaProfiler, WritesAProfileThePlannerLoads) {
  PIPEPLAN_REQUIRE_GPU();
  GpuProfileOptions options = pipeplan::testing::quick_profile_options(Attention::recompute, 1, 3);
  options.micro_batch_sizes = {1, 2};
  options.max_concat = 2;
  options.command = "tests/cuda";
  const Profile profile = cuda::measure_profile(options);
  // Named after the process: the same test runs in more than one test binary, and ctest may run
  // them at once.
  const auto path = std::filesystem::temp_directory_path() /
                    ("pipeplan-cuda-profile-test-" + std::to_string(getpid()) + ".json");
  save_profile(profile, path);
  const Profile loaded = load_profile(path);
  std::filesystem::remove(path);
  EXPECT_EQ(loaded.provenance.source, "measured");
  EXPECT_FALSE(loaded.provenance.gpu.empty());
  EXPECT_EQ(loaded.micro_batch_sizes(), (std::vector<int>{1, 2}));
  for (const LayerKind kind : {LayerKind::embedding, LayerKind::block, LayerKind::head}) {
    for (const int mbs : {1, 2}) {
      const LayerCost& cost = loaded.cost(kind, mbs);
      EXPECT_GT(cost.forward_us, 0) << to_string(kind);
      EXPECT_GT(cost.p2_us, 0) << to_string(kind);
      EXPECT_EQ(cost.p2_concat_us.size(), 2u) << to_string(kind);
      EXPECT_GT(cost.stash_bytes, 0) << to_string(kind);
      EXPECT_GT(cost.retained_bytes, 0) << to_string(kind);
      EXPECT_GT(cost.param_bytes, 0) << to_string(kind);
      EXPECT_GT(cost.optimizer_us, 0) << to_string(kind);
      // Working memory is measured for every pass and read back; the head's forward holds its
      // logits, the block's p2 joins its micro-batches' inputs, so joining two holds more.
      EXPECT_EQ(cost.p2_work_bytes.size(), 2u) << to_string(kind);
    }
  }
  EXPECT_GT(loaded.cost(LayerKind::head, 1).forward_work_bytes, 0);
  EXPECT_GT(loaded.cost(LayerKind::block, 1).p1_work_bytes, 0);
  EXPECT_GT(loaded.cost(LayerKind::block, 1).p2_work(2),
            loaded.cost(LayerKind::block, 1).p2_work(1));
  EXPECT_GT(loaded.cost(LayerKind::block, 2).forward_work_bytes,
            loaded.cost(LayerKind::block, 1).forward_work_bytes);
  EXPECT_GT(loaded.p2p.bandwidth_GBps, 0);
  EXPECT_GT(loaded.p2p.latency_us, 0);
  // The overlapped pair's efficiency, measured on two streams and kept with how it was measured.
  EXPECT_GE(loaded.overlap.efficiency, 0.0);
  EXPECT_LE(loaded.overlap.efficiency, 1.0);
  EXPECT_EQ(loaded.overlap.source.rfind("measured: a block's forward beside", 0), 0u)
      << loaded.overlap.source;
}

// Under load: a short load run on every emulated stage's green context at once gives the
// sustained-load record (and its model where the GPU slowed), and bursts on k = 1..P contexts give
// one contention curve entry per stage, 1 alone.
TEST(CudaProfiler, MeasuresTheGpuUnderLoad) {
  PIPEPLAN_REQUIRE_GPU();
  GpuProfileOptions options = pipeplan::testing::quick_profile_options(Attention::recompute, 1, 3);
  options.max_concat = 1;
  options.sm_partition = 32;
  options.sustain_seconds = 0.5;
  options.cooldown_seconds = 0.2;
  const Profile profile = cuda::measure_profile(options);
  ASSERT_TRUE(profile.sustained_load);
  const SustainedMeasurement& load = *profile.sustained_load;
  EXPECT_GE(load.devices, 2);
  EXPECT_GE(load.seconds, 0.4);
  for (const char* op : {"F", "P1", "P2"}) {
    ASSERT_TRUE(load.ops.contains(op)) << op;
    EXPECT_GE(load.ops.at(op).count, kMinOpsPerType) << op;
    EXPECT_GT(load.ops.at(op).burst_us, 0) << op;
    EXPECT_GT(load.ops.at(op).steady_us, 0) << op;
  }
  EXPECT_EQ(load.source.rfind("measured at profile time", 0), 0u) << load.source;
  if (load.clock) {
    EXPECT_GT(load.clock->steady_mhz, 0);
    EXPECT_GT(load.clock->samples, 0);
  }
  EXPECT_EQ(profile.contention.slowdown.size(), static_cast<std::size_t>(load.devices));
  EXPECT_EQ(profile.contention.slowdown.front(), 1.0);
  for (const char* op : {"F", "B", "P1", "P2"})
    EXPECT_TRUE(profile.contention.by_op.contains(op)) << op;
  EXPECT_EQ(profile.contention.sustained.has_value(), load.model.factor > 0);
  // What it wrote, the planner reads.
  const Profile back = profile_from_json(profile_to_json(profile), "measured");
  EXPECT_EQ(back.contention.slowdown, profile.contention.slowdown);
  EXPECT_EQ(*back.sustained_load, load);
}

// `profile --backend cuda --gemm-candidates 3`: the answers are timed in the warm-up (so the
// profile needs one) and the notes say which GEMMs the times are of.
TEST(CudaProfiler, NotesTheGemmAnswersItTimed) {
  PIPEPLAN_REQUIRE_GPU();
  GpuProfileOptions options = pipeplan::testing::quick_profile_options(Attention::recompute, 1, 1);
  options.gemm_candidates = 3;
  const Profile profile = cuda::measure_profile(options);
  EXPECT_NE(profile.provenance.notes.find("; GEMMs: the fastest of 3 cuBLASLt answers per shape"),
            std::string::npos)
      << profile.provenance.notes;
  EXPECT_GT(profile.cost(LayerKind::block, 1).p2_us, 0);
  options.warmup = 0;
  EXPECT_THROW(cuda::measure_profile(options), Error);
}

}  // namespace
}  // namespace pipeplan
