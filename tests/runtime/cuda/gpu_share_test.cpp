// Where a rank of a multi-process run computes (cuda::gpu_share): GPU local_rank % GPUs, shared
// by the node's ranks that map to it, each with its own place (its green context's).
#include <gtest/gtest.h>

#include <string>

#include "planner/base/error.h"
#include "runtime/cuda/cuda_run.h"

namespace pipeplan {
namespace {

using cuda::gpu_share;

void expect_share(int local_rank, int local_size, int gpus, int gpu, int ranks, int index) {
  const cuda::GpuShare share = gpu_share(local_rank, local_size, gpus);
  EXPECT_EQ(share.gpu, gpu) << local_rank << " of " << local_size << " on " << gpus;
  EXPECT_EQ(share.ranks, ranks) << local_rank << " of " << local_size << " on " << gpus;
  EXPECT_EQ(share.index, index) << local_rank << " of " << local_size << " on " << gpus;
}

TEST(GpuShare, OneRankPerGpuSharesNothing) {
  expect_share(0, 4, 4, 0, 1, 0);
  expect_share(3, 4, 4, 3, 1, 0);
  expect_share(1, 0, 8, 1, 1, 0);  // no local size given, and none needed
}

TEST(GpuShare, RanksBeyondTheGpusShareThemInTurn) {
  for (int r = 0; r < 4; ++r)
    expect_share(r, 4, 1, 0, 4, r);  // four ranks on one GPU
  expect_share(5, 8, 4, 1, 2, 1);    // ranks 1 and 5 on GPU 1
  expect_share(1, 6, 4, 1, 2, 0);    // six ranks on four GPUs: GPUs 0 and 1 have two
  expect_share(3, 6, 4, 3, 1, 0);
}

TEST(GpuShare, ASharedGpuNeedsTheNodesRankCount) {
  try {
    gpu_share(4, 0, 4);
    FAIL() << "a shared GPU without the node's rank count";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("LOCAL_WORLD_SIZE"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gpu_share(4, 4, 1), Error);  // the local rank is not below the local size
}

}  // namespace
}  // namespace pipeplan
