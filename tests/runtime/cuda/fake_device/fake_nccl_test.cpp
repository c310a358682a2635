// The stand-in's NCCL (fake_device.h): a message crosses between streams in both orders; a receive
// is not ready until its send is queued, nor a send until its receive is posted; groups issue
// their calls at their end; several ranks on the one GPU need NCCL 2.30+ and
// NCCL_MULTI_RANK_GPU_ENABLE=1; splits; nonblocking communicators are in progress until their
// ranks joined, split and connected; a byte-count mismatch is an asynchronous error; an abort
// ends a pending receive.
#include <nccl.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "runtime/cuda/env_query.h"
#include "runtime/cuda/green_context.h"
#include "runtime/cuda/kernels.h"
#include "tests/runtime/cuda/fake_device/fake_device.h"
#include "tests/runtime/cuda/gpu_test_support.h"

namespace pipeplan {
namespace {

using testing::ScopedEnv;

constexpr std::int64_t kCount = 64;

// Sets the version ncclGetVersion reports for one scope.
class NcclVersion {
 public:
  explicit NcclVersion(int code) { fake_cuda::set_nccl_version(code); }
  NcclVersion(const NcclVersion&) = delete;
  NcclVersion& operator=(const NcclVersion&) = delete;
  ~NcclVersion() { fake_cuda::set_nccl_version(0); }
};

// Streams, buffers of kCount floats and an event, freed at the end (after everything ran).
class FakeNccl : public ::testing::Test {
 protected:
  // Aborts first, so that no receive a failed test left pending keeps a stream from its end.
  void TearDown() override {
    for (ncclComm_t comm : comms_)
      EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
    for (cudaEvent_t event : events_)
      EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
    for (cudaStream_t stream : streams_)
      EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    for (float* buffer : buffers_)
      EXPECT_EQ(cudaFree(buffer), cudaSuccess);
    for (ncclComm_t comm : comms_)
      EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  }
  cudaStream_t stream() {
    cudaStream_t stream = nullptr;
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    streams_.push_back(stream);
    return stream;
  }
  float* buffer(float value) {
    float* buffer = nullptr;
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&buffer), kCount * sizeof(float)), cudaSuccess);
    std::fill_n(buffer, kCount, value);  // device memory is host memory here
    buffers_.push_back(buffer);
    return buffer;
  }
  cudaEvent_t recorded_on(cudaStream_t stream) {
    cudaEvent_t event = nullptr;
    EXPECT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
    EXPECT_EQ(cudaEventRecord(event, stream), cudaSuccess);
    events_.push_back(event);
    return event;
  }
  // Two ranks of one communicator (several ranks on one GPU: allowed by the environment).
  std::vector<ncclComm_t> pair() {
    const ScopedEnv multi_rank("NCCL_MULTI_RANK_GPU_ENABLE", "1");
    std::vector<ncclComm_t> comms(2, nullptr);
    const int devices[] = {0, 0};
    EXPECT_EQ(ncclCommInitAll(comms.data(), 2, devices), ncclSuccess) << ncclGetLastError(nullptr);
    keep(comms);
    return comms;
  }
  void keep(const std::vector<ncclComm_t>& comms) {
    for (ncclComm_t comm : comms)
      if (comm != nullptr) comms_.push_back(comm);
  }

 private:
  std::vector<cudaStream_t> streams_;
  std::vector<float*> buffers_;
  std::vector<cudaEvent_t> events_;
  std::vector<ncclComm_t> comms_;
};

ncclResult_t send(const float* buffer, int peer, ncclComm_t comm, cudaStream_t stream,
                  std::int64_t count = kCount) {
  return ncclSend(buffer, static_cast<std::size_t>(count), ncclFloat32, peer, comm, stream);
}

ncclResult_t recv(float* buffer, int peer, ncclComm_t comm, cudaStream_t stream,
                  std::int64_t count = kCount) {
  return ncclRecv(buffer, static_cast<std::size_t>(count), ncclFloat32, peer, comm, stream);
}

// Polls an event for a while (a receive the stand-in can never run would hang a wait).
bool completes(cudaEvent_t event,
               std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) return true;
    EXPECT_EQ(status, cudaErrorNotReady);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return false;
}

// A kernel fills the send buffer on the sender's stream; the receive, on another stream, runs the
// sender's stream up to the send (that kernel first, where it is deferred too). Nothing moves until
// something follows the receive.
TEST_F(FakeNccl, AMessageCrossesFromOneStreamToAnotherInBothOrders) {
  const auto comms = pair();
  for (const bool deferred : {false, true}) {
    SCOPED_TRACE(deferred ? "all work deferred" : "copies deferred");
    const fake_cuda::AllWorkDeferred order(deferred);
    cudaStream_t sending = stream(), receiving = stream();
    float* from = buffer(0.0f);
    float* to = buffer(-1.0f);
    cuda::fill_f32(from, kCount, 5.0f, sending);
    ASSERT_EQ(send(from, 1, comms[0], sending), ncclSuccess);
    ASSERT_EQ(recv(to, 0, comms[1], receiving), ncclSuccess);
    EXPECT_EQ(to[0], -1.0f) << "the receive ran before anything had to follow it";
    EXPECT_EQ(from[0], deferred ? 0.0f : 5.0f);
    ASSERT_TRUE(completes(recorded_on(receiving)));
    EXPECT_EQ(to[0], 5.0f);
    EXPECT_EQ(to[kCount - 1], 5.0f);
  }
}

// The receive is not ready before its send is queued: an event recorded after it is not ready, a
// kernel queued behind it waits (in either order), and so does a stream that waits on that event;
// once the send is queued, all of them run.
TEST_F(FakeNccl, AReceiveQueuedBeforeItsSendIsNotReadyUntilTheSendIsQueued) {
  const auto comms = pair();
  cudaStream_t sending = stream(), receiving = stream(), waiting = stream();
  float* from = buffer(3.0f);
  float* to = buffer(0.0f);
  float* sum = buffer(0.0f);
  ASSERT_EQ(recv(to, 0, comms[1], receiving), ncclSuccess);
  cudaEvent_t received = recorded_on(receiving);
  cuda::add_f32(to, from, kCount, receiving);  // behind the receive: 3 + 3 once it ran
  EXPECT_EQ(cudaEventQuery(received), cudaErrorNotReady);
  EXPECT_EQ(to[0], 0.0f);
  ASSERT_EQ(cudaStreamWaitEvent(waiting, received, 0), cudaSuccess);  // queued, not refused
  cuda::add_f32(sum, to, kCount, waiting);
  EXPECT_EQ(sum[0], 0.0f) << "a kernel ran before the wait it follows";
  EXPECT_EQ(cudaEventQuery(received), cudaErrorNotReady);

  ASSERT_EQ(send(from, 1, comms[0], sending), ncclSuccess);
  EXPECT_EQ(cudaEventQuery(received), cudaSuccess);
  EXPECT_EQ(to[0], 3.0f);
  ASSERT_EQ(cudaStreamSynchronize(waiting), cudaSuccess);  // behind the receive, not the add
  EXPECT_EQ(sum[0], 3.0f);
  ASSERT_EQ(cudaStreamSynchronize(receiving), cudaSuccess);
  EXPECT_EQ(to[kCount - 1], 6.0f);
}

// A message as the transport sends it: a header and its tensors in one group, received in order.
// Nothing is issued before the outermost ncclGroupEnd; a group that receives before it sends (on
// both ranks) completes, as one kernel per group does on a GPU.
TEST_F(FakeNccl, AGroupIssuesItsCallsAtItsOutermostEnd) {
  const auto comms = pair();
  cudaStream_t sending = stream(), receiving = stream();
  float* header = buffer(1.0f);
  float* tensors[] = {buffer(2.0f), buffer(3.0f)};
  float* got_header = buffer(0.0f);
  float* got[] = {buffer(0.0f), buffer(0.0f)};
  ASSERT_EQ(recv(got_header, 0, comms[1], receiving, 4), ncclSuccess);
  cudaEvent_t header_done = recorded_on(receiving);

  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(send(header, 1, comms[0], sending, 4), ncclSuccess);  // 4 floats of it
  for (const float* tensor : tensors)
    ASSERT_EQ(send(tensor, 1, comms[0], sending), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(cudaEventQuery(header_done), cudaErrorNotReady) << "issued before the outermost end";
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);  // none open
  ASSERT_TRUE(completes(header_done));
  EXPECT_EQ(got_header[3], 1.0f);
  EXPECT_EQ(got_header[4], 0.0f);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (float* tensor : got)
    ASSERT_EQ(recv(tensor, 0, comms[1], receiving), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_TRUE(completes(recorded_on(receiving)));
  EXPECT_EQ(got[0][kCount - 1], 2.0f);
  EXPECT_EQ(got[1][kCount - 1], 3.0f);

  // Both ranks receive, then send, each in one group on its own stream.
  float* back = buffer(0.0f);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(recv(back, 1, comms[0], sending), ncclSuccess);
  ASSERT_EQ(send(tensors[0], 1, comms[0], sending), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(recv(got[0], 0, comms[1], receiving), ncclSuccess);
  ASSERT_EQ(send(tensors[1], 0, comms[1], receiving), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_TRUE(completes(recorded_on(sending)));
  EXPECT_EQ(back[0], 3.0f);
  ASSERT_TRUE(completes(recorded_on(receiving)));
  EXPECT_EQ(got[0][0], 2.0f);
}

// NCCL refuses a GPU taken by two ranks of one communicator, except from 2.30 with
// NCCL_MULTI_RANK_GPU_ENABLE=1: every communicator of two ranks here is such a one.
TEST_F(FakeNccl, SeveralRanksOnOneGpuNeedNccl230AndTheVariable) {
  const int devices[] = {0, 0};
  ncclComm_t comms[2] = {nullptr, nullptr};
  {
    const ScopedEnv unset("NCCL_MULTI_RANK_GPU_ENABLE", nullptr);
    EXPECT_EQ(ncclCommInitAll(comms, 2, devices), ncclInvalidUsage);
    const std::string error = ncclGetLastError(nullptr);
    EXPECT_NE(error.find("several ranks on one GPU need NCCL 2.30+ and "
                         "NCCL_MULTI_RANK_GPU_ENABLE=1"),
              std::string::npos)
        << error;
    EXPECT_NE(fake_cuda::last_rule_error().find("NCCL_MULTI_RANK_GPU_ENABLE unset"),
              std::string::npos)
        << fake_cuda::last_rule_error();
    ncclComm_t alone = nullptr;  // one rank is fine
    ASSERT_EQ(ncclCommInitAll(&alone, 1, devices), ncclSuccess);
    keep({alone});
  }
  const ScopedEnv enabled("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  int version = 0;
  {
    const NcclVersion older(NCCL_VERSION(2, 29, 7));
    ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
    EXPECT_EQ(version, 22907);
    EXPECT_EQ(cuda::loaded_nccl_text().rfind("NCCL 2.29.7 from ", 0), 0U)
        << cuda::loaded_nccl_text();
    EXPECT_EQ(ncclCommInitAll(comms, 2, devices), ncclInvalidUsage);
    EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("NCCL 2.29.7 here"), std::string::npos)
        << ncclGetLastError(nullptr);
  }
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, 23102);
  ASSERT_EQ(ncclCommInitAll(comms, 2, devices), ncclSuccess);
  keep({comms[0], comms[1]});
  const int second_gpu[] = {0, 1};
  EXPECT_EQ(ncclCommInitAll(comms, 2, second_gpu), ncclInvalidArgument);

  // Through a unique id: each rank joins at once; a rank taken twice or outside is refused.
  ncclUniqueId id{}, other{};
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&other), ncclSuccess);
  EXPECT_NE(std::string(id.internal, sizeof(id.internal)),
            std::string(other.internal, sizeof(other.internal)));
  ncclComm_t ranks[2] = {nullptr, nullptr};
  ncclComm_t extra = nullptr;
  ASSERT_EQ(ncclCommInitRank(&ranks[1], 2, id, 1), ncclSuccess);
  EXPECT_EQ(ncclCommInitRank(&extra, 2, id, 1), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(&extra, 2, id, 2), ncclInvalidArgument);
  ASSERT_EQ(ncclCommInitRank(&ranks[0], 2, id, 0), ncclSuccess);
  keep({ranks[0], ranks[1]});
  {
    const ScopedEnv disabled("NCCL_MULTI_RANK_GPU_ENABLE", "0");
    EXPECT_EQ(ncclCommInitRank(&extra, 2, other, 0), ncclInvalidUsage);
    EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("NCCL_MULTI_RANK_GPU_ENABLE is '0'"),
              std::string::npos)
        << ncclGetLastError(nullptr);
  }
  cudaStream_t a = stream(), b = stream();
  float* from = buffer(7.0f);
  float* to = buffer(0.0f);
  ASSERT_EQ(send(from, 1, ranks[0], a), ncclSuccess);
  ASSERT_EQ(recv(to, 0, ranks[1], b), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(to[0], 7.0f);
}

// Each split of a world makes one communicator per colour; a message on one does not reach
// another, nor the world.
TEST_F(FakeNccl, ASplitMakesACommunicatorPerColour) {
  const ScopedEnv enabled("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  ncclUniqueId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> world(3, nullptr);
  for (int rank = 0; rank < 3; ++rank)
    ASSERT_EQ(ncclCommInitRank(&world[static_cast<std::size_t>(rank)], 3, id, rank), ncclSuccess);
  keep(world);
  // Two splits, collective over the world: ranks 0 and 1, then ranks 2 and 1 (keys: new ranks).
  std::vector<ncclComm_t> first(3, nullptr), second(3, nullptr);
  const int first_colour[] = {4, 4, NCCL_SPLIT_NOCOLOR};
  const int second_colour[] = {NCCL_SPLIT_NOCOLOR, 4, 4};
  const int first_key[] = {0, 1, 0};
  const int second_key[] = {0, 1, 0};
  for (std::size_t r = 0; r < 3; ++r) {
    ASSERT_EQ(ncclCommSplit(world[r], first_colour[r], first_key[r], &first[r], nullptr),
              ncclSuccess);
  }
  for (std::size_t r = 0; r < 3; ++r) {
    ASSERT_EQ(ncclCommSplit(world[r], second_colour[r], second_key[r], &second[r], nullptr),
              ncclSuccess);
  }
  keep(first);
  keep(second);
  EXPECT_EQ(first[2], nullptr);
  EXPECT_EQ(second[0], nullptr);
  ncclComm_t twice = nullptr;  // a third split where two members give the same key
  ASSERT_EQ(ncclCommSplit(world[0], 1, 0, &twice, nullptr), ncclSuccess);
  keep({twice});
  EXPECT_EQ(ncclCommSplit(world[1], 1, 0, &twice, nullptr), ncclInvalidArgument);

  cudaStream_t s0 = stream(), s1 = stream(), s2 = stream();
  float* over_world = buffer(1.0f);
  float* over_first = buffer(2.0f);
  float* over_second = buffer(3.0f);
  float* got_world = buffer(0.0f);
  float* got_first = buffer(0.0f);
  float* got_second = buffer(0.0f);
  ASSERT_EQ(send(over_first, 1, first[0], s0), ncclSuccess);    // world rank 0 -> 1
  ASSERT_EQ(send(over_world, 1, world[0], s0), ncclSuccess);    // world rank 0 -> 1
  ASSERT_EQ(send(over_second, 1, second[2], s2), ncclSuccess);  // world rank 2 -> 1
  ASSERT_EQ(recv(got_world, 0, world[1], s1), ncclSuccess);
  ASSERT_EQ(recv(got_second, 0, second[1], s1), ncclSuccess);
  ASSERT_EQ(recv(got_first, 0, first[1], s1), ncclSuccess);
  ASSERT_TRUE(completes(recorded_on(s1)));
  EXPECT_EQ(got_world[0], 1.0f);
  EXPECT_EQ(got_first[0], 2.0f);
  EXPECT_EQ(got_second[0], 3.0f);
}

// A receive whose byte count differs from its send's stays pending with an asynchronous error
// (counted as a broken rule once asked about); the abort that follows ends it without moving
// data, and the aborted communicator refuses later calls.
TEST_F(FakeNccl, AByteCountMismatchIsAnAsyncErrorAndAnAbortEndsThePendingReceive) {
  const auto comms = pair();
  cudaStream_t sending = stream(), receiving = stream();
  float* from = buffer(4.0f);
  float* to = buffer(0.0f);
  ASSERT_EQ(send(from, 1, comms[0], sending, kCount / 2), ncclSuccess);
  ASSERT_EQ(recv(to, 0, comms[1], receiving), ncclSuccess);
  cudaEvent_t received = recorded_on(receiving);
  EXPECT_EQ(cudaEventQuery(received), cudaErrorNotReady);
  const std::int64_t rules = fake_cuda::counters().rule_errors;
  ncclResult_t async = ncclSuccess;
  ASSERT_EQ(ncclCommGetAsyncError(comms[0], &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);  // the sender's communicator has none
  ASSERT_EQ(ncclCommGetAsyncError(comms[1], &async), ncclSuccess);
  EXPECT_EQ(async, ncclInvalidUsage);
  EXPECT_EQ(fake_cuda::counters().rule_errors, rules + 1);
  const std::string error = ncclGetLastError(comms[1]);
  EXPECT_NE(error.find("ncclRecv of 256 bytes from rank 0 met an ncclSend of 128 bytes"),
            std::string::npos)
      << error;
  EXPECT_NE(std::string(ncclGetErrorString(async)).find("must match"), std::string::npos);

  ASSERT_EQ(ncclCommAbort(comms[1]), ncclSuccess);
  EXPECT_EQ(cudaEventQuery(received), cudaSuccess);
  EXPECT_EQ(to[0], 0.0f);
  EXPECT_EQ(recv(to, 0, comms[1], receiving), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("aborted"), std::string::npos);
}

// A receive whose send never comes ends with an abort of its communicator.
TEST_F(FakeNccl, AnAbortEndsAReceiveWhoseSendNeverComes) {
  const auto comms = pair();
  cudaStream_t receiving = stream();
  float* to = buffer(0.0f);
  ASSERT_EQ(recv(to, 0, comms[1], receiving), ncclSuccess);
  cudaEvent_t received = recorded_on(receiving);
  EXPECT_FALSE(completes(received, std::chrono::milliseconds(20)));
  ASSERT_EQ(ncclCommAbort(comms[1]), ncclSuccess);
  EXPECT_EQ(cudaEventQuery(received), cudaSuccess);
  EXPECT_EQ(to[0], 0.0f);
}

// A send is blocking for the GPU: work behind it on its stream waits until its receive is posted.
TEST_F(FakeNccl, ASendIsNotReadyUntilItsReceiveIsPosted) {
  const auto comms = pair();
  cudaStream_t sending = stream(), receiving = stream();
  float* from = buffer(2.0f);
  float* to = buffer(0.0f);
  ASSERT_EQ(send(from, 1, comms[0], sending), ncclSuccess);
  cudaEvent_t sent = recorded_on(sending);
  EXPECT_FALSE(completes(sent, std::chrono::milliseconds(20)));
  ASSERT_EQ(recv(to, 0, comms[1], receiving), ncclSuccess);
  EXPECT_TRUE(completes(sent));
  ASSERT_TRUE(completes(recorded_on(receiving)));
  EXPECT_EQ(to[0], 2.0f);
}

ncclResult_t state_of(ncclComm_t comm) {
  ncclResult_t state = ncclInternalError;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  return state;
}

// A nonblocking communicator (ncclConfig_t::blocking = 0) is in progress until every rank of its
// id joined, and after its first call to a peer until the peer called back; a call on it before
// it settled breaks NCCL's rule. A config not made by NCCL_CONFIG_INITIALIZER is refused.
TEST_F(FakeNccl, ANonblockingCommunicatorIsInProgressUntilItsRanksJoinedAndConnected) {
  const ScopedEnv enabled("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  ncclUniqueId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t ranks[2] = {nullptr, nullptr};
  ASSERT_EQ(ncclCommInitRankConfig(&ranks[0], 2, id, 0, &config), ncclInProgress);
  keep({ranks[0]});
  EXPECT_EQ(state_of(ranks[0]), ncclInProgress);
  cudaStream_t a = stream(), b = stream();
  float* from = buffer(6.0f);
  float* to = buffer(0.0f);
  const std::int64_t rules = fake_cuda::counters().rule_errors;
  EXPECT_EQ(send(from, 1, ranks[0], a), ncclInvalidUsage);
  EXPECT_EQ(fake_cuda::counters().rule_errors, rules + 1);
  EXPECT_NE(fake_cuda::last_rule_error().find("still in progress"), std::string::npos)
      << fake_cuda::last_rule_error();
  ASSERT_EQ(ncclCommInitRankConfig(&ranks[1], 2, id, 1, &config), ncclSuccess);
  keep({ranks[1]});
  EXPECT_EQ(state_of(ranks[0]), ncclSuccess);
  // The first send connects: in progress until the peer's first call.
  EXPECT_EQ(send(from, 1, ranks[0], a), ncclInProgress);
  EXPECT_EQ(state_of(ranks[0]), ncclInProgress);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(recv(to, 0, ranks[1], b), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);  // the peer had called
  EXPECT_EQ(state_of(ranks[0]), ncclSuccess);
  ASSERT_TRUE(completes(recorded_on(b)));
  EXPECT_EQ(to[0], 6.0f);

  ncclConfig_t unset{};
  unset.blocking = 0;
  ncclComm_t refused = nullptr;
  EXPECT_EQ(ncclCommInitRankConfig(&refused, 2, id, 0, &unset), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("NCCL_CONFIG_INITIALIZER"),
            std::string::npos);
}

// A nonblocking split leaves the parent and the new communicator in progress until every rank of
// the parent made it, those without a colour too; the new communicator inherits nonblocking.
TEST_F(FakeNccl, ANonblockingSplitSettlesOnceEveryRankOfTheParentMadeIt) {
  const ScopedEnv enabled("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  ncclUniqueId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  std::vector<ncclComm_t> world(3, nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_EQ(ncclCommInitRankConfig(&world[static_cast<std::size_t>(rank)], 3, id, rank, &config),
              ncclSuccess);
  }
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);  // every rank joined within the group
  keep(world);
  std::vector<ncclComm_t> link(3, nullptr);
  EXPECT_EQ(ncclCommSplit(world[0], 0, 0, &link[0], nullptr), ncclInProgress);
  EXPECT_EQ(ncclCommSplit(world[1], 0, 1, &link[1], nullptr), ncclInProgress);
  keep({link[0], link[1]});
  EXPECT_EQ(state_of(world[0]), ncclInProgress);
  EXPECT_EQ(state_of(link[1]), ncclInProgress);
  EXPECT_EQ(ncclCommSplit(world[0], 1, 0, &link[2], nullptr), ncclInvalidUsage)
      << "a second split before the first settled";
  EXPECT_EQ(ncclCommSplit(world[2], NCCL_SPLIT_NOCOLOR, 0, &link[2], nullptr), ncclSuccess);
  EXPECT_EQ(link[2], nullptr);
  for (ncclComm_t comm : {world[0], world[1], link[0], link[1]})
    EXPECT_EQ(state_of(comm), ncclSuccess);
  cudaStream_t a = stream(), b = stream();
  float* from = buffer(8.0f);
  float* to = buffer(0.0f);
  EXPECT_EQ(send(from, 2, link[0], a), ncclInvalidArgument) << "the link has two ranks";
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(send(from, 1, link[0], a), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclInProgress);  // connecting to rank 1
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(recv(to, 0, link[1], b), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(state_of(link[0]), ncclSuccess);
  ASSERT_TRUE(completes(recorded_on(b)));
  EXPECT_EQ(to[kCount - 1], 8.0f);
}

// NCCL launches kernels on the stream it is given: the stream must be the current context's.
TEST_F(FakeNccl, ASendGoesOnlyToAStreamOfTheCurrentContext) {
  const auto comms = pair();
  const auto stages = cuda::GreenContext::partition(0, 2, 32);
  float* from = buffer(1.0f);
  {
    const cuda::ScopedContext current(stages[0]->context());
    EXPECT_EQ(send(from, 1, comms[0], stages[1]->stream()), ncclInvalidUsage);
    EXPECT_NE(std::string(ncclGetLastError(nullptr))
                  .find("a launch must go to a stream of the current context"),
              std::string::npos)
        << ncclGetLastError(nullptr);
  }
}

}  // namespace
}  // namespace pipeplan
