// The CUDA transports: device-local copies (plain streams and green contexts) and NCCL between
// as many GPUs as there are, or between several ranks on GPU 0 where NCCL allows that (2.30+ with
// NCCL_MULTI_RANK_GPU_ENABLE=1). Each delivers the tensors bit for bit, in per-link FIFO order,
// into the receiver's allocator, and reports a missing message as an Error naming the link and
// the tag instead of hanging; NCCL's set-up and sends give up after the run's timeout, naming the
// rank or the link.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/device_local_transport.h"
#include "runtime/cuda/green_context.h"
#include "runtime/emulate.h"
#include "tests/error_support.h"
#include "tests/runtime/cuda/gpu_test_support.h"
#ifdef PIPEPLAN_FAKE_DEVICE
#include "tests/runtime/cuda/fake_device/fake_device.h"
#endif
#ifdef PIPEPLAN_HAVE_NCCL
#include "runtime/cuda/env_query.h"
#include "runtime/cuda/nccl_transport.h"
#endif

namespace pipeplan {
namespace {

using namespace std::chrono_literals;

std::vector<double> ramp(int n, double offset) {
  std::vector<double> values(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    values[static_cast<std::size_t>(i)] = offset + 0.25 * (i % 97) - 8;  // exact in bf16
  return values;
}

Message message_of(cuda::CudaBackend& backend, const std::string& tag, double offset) {
  Message m;
  m.tag = tag;
  m.tensors.emplace_back("a", backend.upload(ramp(4096, offset), {64, 64}));
  m.tensors.emplace_back("b", backend.upload(ramp(96, offset + 1), {3, 32}));
  m.bytes = m.payload_bytes();
  return m;
}

// Reads a message as the executor's reader would: behind its arrival where it has one (a
// stream-ordered recv), so the download on the receiver's stream follows the copy.
void expect_message(cuda::CudaBackend& receiver, const Message& m, const std::string& tag,
                    double offset) {
  if (m.arrival) m.arrival->order_reader();
  ASSERT_EQ(m.tag, tag);
  ASSERT_EQ(m.tensors.size(), 2U);
  EXPECT_EQ(m.tensors[0].second.shape(), (Shape{64, 64}));
  EXPECT_EQ(receiver.download(m.tensors[0].second), ramp(4096, offset));
  EXPECT_EQ(receiver.download(m.tensors[1].second), ramp(96, offset + 1));
}

cuda::StageEndpoint endpoint_of(cuda::CudaBackend& backend, int gpu,
                                cuda::GreenContext* green = nullptr) {
  return {gpu, backend.context().stream(), &backend.context().allocator(), green};
}

void exercise(Transport& transport, cuda::CudaBackend& sender, cuda::CudaBackend& receiver) {
  const std::int64_t before = receiver.context().allocator().stats().current_bytes;
  for (int i = 0; i < 3; ++i) {
    transport.send(0, 1, Channel::pipeline, message_of(sender, "0F" + std::to_string(i), i));
  }
  transport.send(0, 1, Channel::transfer, message_of(sender, "evict 0F0", 10));
  // Channels are independent links: the transfer message is not behind the pipeline ones.
  expect_message(receiver, transport.recv(1, 0, Channel::transfer, "evict 0F0", 5s), "evict 0F0",
                 10);
  for (int i = 0; i < 3; ++i) {
    const Message m = transport.recv(1, 0, Channel::pipeline, "0F" + std::to_string(i), 5s);
    expect_message(receiver, m, "0F" + std::to_string(i), i);
    // The copy lives in the receiver's memory: its allocator counts it.
    EXPECT_GE(receiver.context().allocator().stats().current_bytes - before, m.payload_bytes());
  }
}

TEST(DeviceLocalTransport, CopiesIntoTheReceiversMemoryInFifoOrder) {
  PIPEPLAN_REQUIRE_GPU();
  cuda::CudaBackend sender, receiver;
  cuda::DeviceLocalTransport transport({endpoint_of(sender, 0), endpoint_of(receiver, 0)});
  exercise(transport, sender, receiver);
}

// Polling for the copy's end (PIPEPLAN_COPY_WAIT=poll) and ordering its readers on the GPU
// (stream) deliver the same bytes in the same order, and the transport's name says which wait it
// uses.
TEST(DeviceLocalTransport, EveryCopyWaitDeliversTheSameMessages) {
  PIPEPLAN_REQUIRE_GPU();
  for (const cuda::CopyWait wait :
       {cuda::CopyWait::blocking, cuda::CopyWait::poll, cuda::CopyWait::stream}) {
    SCOPED_TRACE(cuda::to_string(wait));
    cuda::CudaBackend sender, receiver;
    cuda::DeviceLocalTransport transport({endpoint_of(sender, 0), endpoint_of(receiver, 0)},
                                         nullptr, cuda::DeviceCopy::priority, wait);
    EXPECT_NE(transport.name().find(std::string("wait: ") + cuda::to_string(wait)),
              std::string::npos)
        << transport.name();
    exercise(transport, sender, receiver);
  }
}

// The memory moves when the receiver takes the message (the plan's rendezvous): until then the
// sender holds it and the receiver's allocator has not grown; after, the reverse.
TEST(DeviceLocalTransport, TheCopyIsMadeWhenTheReceiverTakesTheMessage) {
  PIPEPLAN_REQUIRE_GPU();
  cuda::CudaBackend sender, receiver;
  cuda::DeviceLocalTransport transport({endpoint_of(sender, 0), endpoint_of(receiver, 0)});
  const auto bytes = [](cuda::CudaBackend& b) {
    return b.context().allocator().stats().current_bytes;
  };
  const std::int64_t sender_before = bytes(sender);
  const std::int64_t receiver_before = bytes(receiver);
  Message m = message_of(sender, "load 0F3", 3);
  const std::int64_t payload = m.payload_bytes();
  EXPECT_EQ(bytes(sender) - sender_before, payload);
  transport.send(0, 1, Channel::transfer, std::move(m));
  EXPECT_EQ(bytes(sender) - sender_before, payload);  // still the sender's
  EXPECT_EQ(bytes(receiver), receiver_before);        // nothing taken from the receiver yet
  const Message got = transport.recv(1, 0, Channel::transfer, "load 0F3", 5s);
  expect_message(receiver, got, "load 0F3", 3);
  EXPECT_EQ(bytes(sender), sender_before);  // the sources went back after the copy
  EXPECT_EQ(bytes(receiver) - receiver_before, payload);
}

// flush() returns once the receiver took every message sent on the link and the sources went
// back to the sender's cache (a BPipe eviction's memory, reused by the sender's op after next);
// until then it times out naming the link; other links do not hold it up.
TEST(DeviceLocalTransport, FlushWaitsUntilTheSourcesWentBackToTheSender) {
  PIPEPLAN_REQUIRE_GPU();
  cuda::CudaBackend sender, receiver;
  cuda::DeviceLocalTransport transport({endpoint_of(sender, 0), endpoint_of(receiver, 0)});
  const auto bytes = [&] { return sender.context().allocator().stats().current_bytes; };
  const std::int64_t payload = message_of(sender, "size", 0).payload_bytes();
  const std::int64_t before = bytes();
  transport.flush(0, 1, Channel::transfer, 10ms);  // nothing sent yet
  transport.send(0, 1, Channel::transfer, message_of(sender, "evict 0F1", 1));
  transport.send(0, 1, Channel::transfer, message_of(sender, "evict 0F2", 2));
  transport.send(0, 1, Channel::pipeline, message_of(sender, "0F2", 4));
  // Before the receiver took the messages: a timeout naming the link.
  const std::string waited =
      testing::error_of([&] { transport.flush(0, 1, Channel::transfer, 50ms); });
  EXPECT_NE(waited.find("transfer link 0->1"), std::string::npos) << waited;
  EXPECT_NE(waited.find("2 sent message(s)"), std::string::npos) << waited;
  std::jthread receiving([&] {
    std::this_thread::sleep_for(30ms);
    expect_message(receiver, transport.recv(1, 0, Channel::transfer, "evict 0F1", 5s), "evict 0F1",
                   1);
    expect_message(receiver, transport.recv(1, 0, Channel::transfer, "evict 0F2", 5s), "evict 0F2",
                   2);
  });
  transport.flush(0, 1, Channel::transfer, 5s);
  // Both evictions' sources are back; the pipeline message still holds its own.
  EXPECT_EQ(bytes() - before, payload);
  receiving.join();
  std::jthread canceller([&] {
    std::this_thread::sleep_for(30ms);
    transport.cancel();
  });
  transport.send(0, 1, Channel::transfer, message_of(sender, "evict 0F3", 3));
  EXPECT_THROW(transport.flush(0, 1, Channel::transfer, 10s), Cancelled);
}

// PIPEPLAN_COPY_WAIT=stream: recv returns a message only the blocking waits would not, one still
// arriving (Message::arrival), and the sources go back to the sender once the copy ends: flush()
// and reset() wait for that. A message sent on before it landed (a held BPipe stash going back)
// follows its arrival on the GPU and comes back bit for bit; one that arrived through another
// transport is refused, naming it.
TEST(DeviceLocalTransport, StreamOrderedCopiesReleaseTheSourcesOnceCopied) {
  PIPEPLAN_REQUIRE_GPU();
  cuda::CudaBackend sender, receiver;
  cuda::DeviceLocalTransport transport({endpoint_of(sender, 0), endpoint_of(receiver, 0)}, nullptr,
                                       cuda::DeviceCopy::priority, cuda::CopyWait::stream);
  const auto bytes = [](cuda::CudaBackend& b) {
    return b.context().allocator().stats().current_bytes;
  };
  const std::int64_t sender_before = bytes(sender);
  const std::int64_t receiver_before = bytes(receiver);
  transport.send(0, 1, Channel::transfer, message_of(sender, "evict 0F4", 4));
  Message held = transport.recv(1, 0, Channel::transfer, "evict 0F4", 5s);
  ASSERT_NE(held.arrival, nullptr) << "a stream-ordered recv returns the copy's arrival";
  const std::int64_t payload = held.payload_bytes();
  EXPECT_EQ(bytes(receiver) - receiver_before, payload);  // taken from the receiver at once
  transport.flush(0, 1, Channel::transfer, 5s);           // the reaper gave the sources back
  EXPECT_EQ(bytes(sender), sender_before);
  // Back to the evictor without a reader in between: the copy out waits for the copy in.
  held.tag = "load 0F4";
  transport.send(1, 0, Channel::transfer, std::move(held));
  const Message back = transport.recv(0, 1, Channel::transfer, "load 0F4", 5s);
  expect_message(sender, back, "load 0F4", 4);
  transport.flush(1, 0, Channel::transfer, 5s);
  EXPECT_EQ(bytes(receiver), receiver_before);
  // reset() (the next step) waits for copies still being released.
  transport.send(0, 1, Channel::pipeline, message_of(sender, "0F5", 5));
  expect_message(receiver, transport.recv(1, 0, Channel::pipeline, "0F5", 5s), "0F5", 5);
  transport.reset();
  EXPECT_EQ(bytes(sender), sender_before + payload);  // `back`, still held here

  struct Elsewhere final : Arrival {
    void order_reader() const override {}
  };
  Message foreign = message_of(sender, "load 0F6", 6);
  foreign.arrival = std::make_shared<const Elsewhere>();
  const std::string refused =
      testing::error_of([&] { transport.send(0, 1, Channel::transfer, std::move(foreign)); });
  EXPECT_NE(refused.find("'load 0F6' is still arriving through another transport"),
            std::string::npos)
      << refused;
}

// PIPEPLAN_COPY_WAIT=stream on a GPU: with the sender's stream busy for some 20 ms (memsets
// queued before the send, which the copy follows), recv returns while that work still runs, and
// a reader ordered behind the arrival reads the bytes sent. (The fake device runs work when it
// is queued: there it checks only the bytes.)
TEST(DeviceLocalTransport, AStreamOrderedRecvReturnsBeforeTheCopyRuns) {
  PIPEPLAN_REQUIRE_GPU();
  cuda::CudaBackend sender, receiver;
  cuda::DeviceLocalTransport transport({endpoint_of(sender, 0), endpoint_of(receiver, 0)}, nullptr,
                                       cuda::DeviceCopy::priority, cuda::CopyWait::stream);
#ifdef PIPEPLAN_FAKE_DEVICE
  constexpr std::size_t kBusyBytes = std::size_t{1} << 16;
  constexpr int kBusyRounds = 2;
#else
  constexpr std::size_t kBusyBytes = std::size_t{1} << 30;
  constexpr int kBusyRounds = 64;  // 64 GiB written: about 20 ms at an H100's or H200's bandwidth
#endif
  void* busy = nullptr;
  ASSERT_EQ(cudaMalloc(&busy, kBusyBytes), cudaSuccess);
  Message m = message_of(sender, "0F1", 1);
  const cudaStream_t sending = sender.context().stream();
  for (int i = 0; i < kBusyRounds; ++i)
    ASSERT_EQ(cudaMemsetAsync(busy, i, kBusyBytes, sending), cudaSuccess);
  transport.send(0, 1, Channel::pipeline, std::move(m));
  const Message got = transport.recv(1, 0, Channel::pipeline, "0F1", 5s);
#ifndef PIPEPLAN_FAKE_DEVICE
  EXPECT_EQ(cudaStreamQuery(sending), cudaErrorNotReady)
      << "recv returned only after the sender's work (and so the copy) had ended";
#endif
  expect_message(receiver, got, "0F1", 1);
  transport.flush(0, 1, Channel::pipeline, 5s);
  EXPECT_EQ(cudaStreamSynchronize(sending), cudaSuccess);
  EXPECT_EQ(cudaFree(busy), cudaSuccess);
}

TEST(DeviceLocalTransport, AMissingMessageTimesOutNamingTheLinkAndCancelWakesWaiters) {
  PIPEPLAN_REQUIRE_GPU();
  cuda::CudaBackend sender, receiver;
  cuda::DeviceLocalTransport transport({endpoint_of(sender, 0), endpoint_of(receiver, 0)});
  // A message never sent: a timeout naming the tag and the link.
  const std::string missing =
      testing::error_of([&] { transport.recv(1, 0, Channel::pipeline, "0F7", 100ms); });
  EXPECT_NE(missing.find("'0F7'"), std::string::npos) << missing;
  EXPECT_NE(missing.find("pipeline link 0->1"), std::string::npos) << missing;
  std::jthread canceller([&] {
    std::this_thread::sleep_for(50ms);
    transport.cancel();
  });
  EXPECT_THROW(transport.recv(1, 0, Channel::pipeline, "0F8", 10s), Error);
}

TEST(DeviceLocalTransport, CopiesBetweenGreenContextStagesOfOneGpu) {
  PIPEPLAN_REQUIRE_GPU();
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  const int share = emulated_sm_share(prop.multiProcessorCount, 2);
  auto green = cuda::GreenContext::partition(0, 2, share);
  ASSERT_EQ(green.size(), 2U);
  EXPECT_EQ(green[0]->sm_count(), share);
  EXPECT_EQ(green[1]->sm_count(), share);
  std::unique_ptr<cuda::CudaBackend> stages[2];
  for (int s = 0; s < 2; ++s) {
    const cuda::ScopedContext current(green[static_cast<std::size_t>(s)]->context());
    stages[s] = std::make_unique<cuda::CudaBackend>(cuda::CudaBackendOptions{
        Attention::materialized, green[static_cast<std::size_t>(s)]->stream()});
  }
  int least = 0, greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  // Every way of issuing the copies delivers the same bytes; `priority` makes the link streams
  // of the device's greatest priority, the others of the default.
  for (const cuda::DeviceCopy copy :
       {cuda::DeviceCopy::memcpy, cuda::DeviceCopy::overlap, cuda::DeviceCopy::priority}) {
    SCOPED_TRACE(cuda::to_string(copy));
    cuda::DeviceLocalTransport transport(
        {endpoint_of(*stages[0], 0, green[0].get()), endpoint_of(*stages[1], 0, green[1].get())},
        nullptr, copy);
    EXPECT_NE(transport.name().find(cuda::to_string(copy)), std::string::npos) << transport.name();
    exercise(transport, *stages[0], *stages[1]);
    int priority = 1;
    {
      const cuda::ScopedContext current(green[0]->context());
      ASSERT_EQ(cudaStreamGetPriority(transport.link_stream(0, 1, Channel::pipeline), &priority),
                cudaSuccess);
    }
    EXPECT_EQ(priority, copy == cuda::DeviceCopy::priority ? greatest : 0);
  }
}

// An environment variable that picks one of a few modes: unset and empty give the default, each
// name gives its mode, and a wrong value is refused naming the variable and the value.
template <typename Mode>
void expect_env_modes(const char* variable, Mode (*read)(),
                      const std::vector<std::pair<std::string, Mode>>& modes, Mode fallback,
                      const std::string& bad, const std::string& refusal) {
  const testing::ScopedEnv restore(variable, nullptr);
  EXPECT_EQ(read(), fallback) << variable << " unset";
  setenv(variable, "", 1);
  EXPECT_EQ(read(), fallback) << variable << " empty";
  for (const auto& [name, mode] : modes) {
    setenv(variable, name.c_str(), 1);
    EXPECT_EQ(read(), mode) << variable << "=" << name;
  }
  setenv(variable, bad.c_str(), 1);
  try {
    (void)read();
    ADD_FAILURE() << variable << "=" << bad << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(refusal), std::string::npos) << e.what();
  }
}

// $PIPEPLAN_DEVICE_COPY picks how copies are issued; a wrong value names the variable.
TEST(DeviceLocalTransport, TheCopyModeComesFromTheEnvironment) {
  using cuda::DeviceCopy;
  expect_env_modes<DeviceCopy>(cuda::kDeviceCopyEnv, &cuda::device_copy_from_env,
                               {{"memcpy", DeviceCopy::memcpy},
                                {"overlap", DeviceCopy::overlap},
                                {"priority", DeviceCopy::priority}},
                               DeviceCopy::priority, "dma", "PIPEPLAN_DEVICE_COPY is 'dma'");
}

// $PIPEPLAN_COPY_WAIT picks how the receiving thread waits for a copy; a wrong value names the
// variable.
TEST(DeviceLocalTransport, TheCopyWaitComesFromTheEnvironment) {
  using cuda::CopyWait;
  expect_env_modes<CopyWait>(
      cuda::kCopyWaitEnv, &cuda::copy_wait_from_env,
      {{"poll", CopyWait::poll}, {"blocking", CopyWait::blocking}, {"stream", CopyWait::stream}},
      CopyWait::blocking, "spin",
      "PIPEPLAN_COPY_WAIT is 'spin' (expected blocking, poll or stream)");
}

#ifdef PIPEPLAN_HAVE_NCCL

// Which NCCL a run over NCCL loaded (its transport's name, in the run's header): asked of the
// library itself, no GPU needed.
TEST(NcclTransport, TheLoadedNcclIsNamedWithItsVersionAndFile) {
  const std::string text = cuda::loaded_nccl_text();
  EXPECT_EQ(text.rfind("NCCL 2.", 0), 0U) << text;
  EXPECT_NE(text.find(" from /"), std::string::npos) << text;
  EXPECT_NE(text.find("libnccl.so"), std::string::npos) << text;
}

// The GPU of each of a test's NCCL ranks (plan devices). Where two or more GPUs are visible, one
// rank per GPU: on every GPU (`every_gpu`), else on the first `ranks` GPUs (as many as there are).
// Where one is, `ranks` ranks all on GPU 0, where NCCL lets ranks share a GPU (the caller sets
// NCCL_MULTI_RANK_GPU_ENABLE=1 for its scope); where it does not, `gpus` is left empty and the
// test skipped (failed under PIPEPLAN_REQUIRE_NCCL=1).
void nccl_rank_gpus(int ranks, bool every_gpu, std::vector<int>& gpus) {
  gpus.clear();
  const int visible = cuda::cuda_device_count();
  if (visible >= 2) {
    const int used = every_gpu ? visible : std::min(visible, ranks);
    for (int g = 0; g < used; ++g)
      gpus.push_back(g);
    return;
  }
  if (const std::string refusal = cuda::multi_rank_gpu_refusal(); !refusal.empty()) {
    PIPEPLAN_NCCL_UNAVAILABLE("one GPU visible, and " + refusal);
  }
  gpus.assign(static_cast<std::size_t>(ranks), 0);
}

// Stages down a chain: one per GPU over every GPU, or three on GPU 0 where only one is visible.
TEST(NcclTransport, SingleProcessChainOverEveryGpu) {
  PIPEPLAN_REQUIRE_GPU();
  const testing::ScopedEnv multi_rank("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  std::vector<int> gpu_of;
  nccl_rank_gpus(3, true, gpu_of);
  if (gpu_of.empty()) return;
  const int stages = static_cast<int>(gpu_of.size());
  std::vector<std::unique_ptr<cuda::CudaBackend>> backends;
  std::vector<cuda::StageEndpoint> endpoints;
  std::vector<cuda::TransportLink> links;
  for (int g = 0; g < stages; ++g) {
    ASSERT_EQ(cudaSetDevice(gpu_of[static_cast<std::size_t>(g)]), cudaSuccess);
    backends.push_back(std::make_unique<cuda::CudaBackend>());
    endpoints.push_back(endpoint_of(*backends.back(), gpu_of[static_cast<std::size_t>(g)]));
    if (g + 1 < stages) {
      links.push_back({g, g + 1, Channel::pipeline});
      links.push_back({g + 1, g, Channel::pipeline});
    }
  }
  links.push_back({0, stages - 1, Channel::transfer});
  auto transport = cuda::NcclTransport::single_process(endpoints, links);
  // Activations down the chain and gradients back up, each on its own link and thread, as the
  // executor drives them: both directions progress at once.
  std::vector<std::jthread> threads;
  for (int g = 0; g + 1 < stages; ++g) {
    threads.emplace_back([&, g] {
      for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(cudaSetDevice(gpu_of[static_cast<std::size_t>(g)]), cudaSuccess);
        transport->send(g, g + 1, Channel::pipeline,
                        message_of(*backends[static_cast<std::size_t>(g)],
                                   std::to_string(g) + "F" + std::to_string(i), g + i));
      }
    });
    threads.emplace_back([&, g] {
      for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(cudaSetDevice(gpu_of[static_cast<std::size_t>(g + 1)]), cudaSuccess);
        transport->send(g + 1, g, Channel::pipeline,
                        message_of(*backends[static_cast<std::size_t>(g + 1)],
                                   std::to_string(g + 1) + "B" + std::to_string(i), -g - i));
      }
    });
  }
  for (int g = 0; g + 1 < stages; ++g) {
    for (int i = 0; i < 3; ++i) {
      const std::string down = std::to_string(g) + "F" + std::to_string(i);
      expect_message(*backends[static_cast<std::size_t>(g + 1)],
                     transport->recv(g + 1, g, Channel::pipeline, down, 20s), down, g + i);
      const std::string up = std::to_string(g + 1) + "B" + std::to_string(i);
      expect_message(*backends[static_cast<std::size_t>(g)],
                     transport->recv(g, g + 1, Channel::pipeline, up, 20s), up, -g - i);
    }
  }
  threads.clear();
  // A message that never comes is a timeout naming the link and tag; the transport aborts.
  try {
    transport->recv(stages - 1, 0, Channel::transfer, "evict 0F9", 300ms);
    FAIL() << "recv of a message never sent returned";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'evict 0F9'"), std::string::npos) << what;
    EXPECT_NE(what.find("transfer link 0->" + std::to_string(stages - 1)), std::string::npos)
        << what;
    EXPECT_NE(what.find("timed out"), std::string::npos) << what;
  }
  EXPECT_THROW(transport->reset(), Error);
}

// Two ranks as threads, on GPUs 0 and 1, or both on GPU 0 where only one is visible.
TEST(NcclTransport, OneRankPerThreadThroughInitRankAndSplit) {
  PIPEPLAN_REQUIRE_GPU();
  const testing::ScopedEnv multi_rank("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  std::vector<int> gpu_of;
  nccl_rank_gpus(2, false, gpu_of);
  if (gpu_of.empty()) return;
  // Threads stand in for processes: the same world communicator + ncclCommSplit path.
  ncclUniqueId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_EQ(cuda::unique_id_hex(cuda::unique_id_from_hex(cuda::unique_id_hex(id))),
            cuda::unique_id_hex(id));
  const std::vector<cuda::TransportLink> links = {{0, 1, Channel::pipeline},
                                                  {1, 0, Channel::pipeline}};
  std::vector<std::string> errors(2);
  std::vector<std::jthread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        const int gpu = gpu_of[static_cast<std::size_t>(rank)];
        ASSERT_EQ(cudaSetDevice(gpu), cudaSuccess);
        cuda::CudaBackend backend;
        auto transport =
            cuda::NcclTransport::multi_process(rank, 2, id, endpoint_of(backend, gpu), links);
        const int peer = 1 - rank;
        transport->send(rank, peer, Channel::pipeline,
                        message_of(backend, "from " + std::to_string(rank), rank));
        expect_message(
            backend,
            transport->recv(rank, peer, Channel::pipeline, "from " + std::to_string(peer), 20s),
            "from " + std::to_string(peer), peer);
      } catch (const Error& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
      }
    });
  }
  ranks.clear();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// How far the other rank of a two-rank world gets before it stops answering.
enum class PeerStops { before_joining, before_splitting, before_connecting };

// Rank 1 by hand, on `gpu`: joins the world communicator of `id` and makes the transport's two
// splits as far as `stops` lets it, each settled (nonblocking, as the transport's), then waits
// until `done` and aborts what it made. Errors go to `error`.
void half_a_peer(PeerStops stops, const ncclUniqueId& id, int gpu, const std::atomic<bool>& done,
                 std::string& error) {
  std::vector<ncclComm_t> made;
  const auto settle = [&](ncclComm_t comm, ncclResult_t status, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    ncclResult_t state = status;
    while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
      std::this_thread::sleep_for(100us);
    }
    if (state != ncclSuccess && error.empty()) error = std::string(what) + " did not settle";
  };
  if (cudaSetDevice(gpu) != cudaSuccess) error = "cudaSetDevice failed";
  if (stops != PeerStops::before_joining) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t world = nullptr;
    settle(world, ncclCommInitRankConfig(&world, 2, id, 1, &config), "rank 1's world");
    made.push_back(world);
    if (stops == PeerStops::before_connecting) {
      // The transport's links, sorted: pipeline 0->1 (rank 1 receives), then 1->0 (it sends).
      for (int key : {1, 0}) {
        ncclComm_t link = nullptr;
        const ncclResult_t split = ncclCommSplit(world, key == 1 ? 0 : 1, key, &link, &config);
        settle(world, split, "rank 1's split");
        settle(link, split, "rank 1's split");
        made.push_back(link);
      }
    }
  }
  while (!done)
    std::this_thread::sleep_for(1ms);
  for (ncclComm_t comm : made) {
    if (comm != nullptr) ncclCommAbort(comm);
  }
}

// A rank whose peer never joins, never makes a split or never connects gives up within the run's
// timeout (the one it was made with), in one line naming itself, what it waited for and the time,
// instead of waiting for ever.
TEST(NcclTransport, SetUpWithAPeerThatStopsAnsweringTimesOutNamingWhatItWaitedFor) {
  PIPEPLAN_REQUIRE_GPU();
  const testing::ScopedEnv multi_rank("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  std::vector<int> gpu_of;
  nccl_rank_gpus(2, false, gpu_of);
  if (gpu_of.empty()) return;
  const std::vector<cuda::TransportLink> links = {{0, 1, Channel::pipeline},
                                                  {1, 0, Channel::pipeline}};
  // Long enough that the peer, a thread of this busy test process (sanitizers, other tests beside
  // it), reaches each step it does take well within it.
  constexpr auto kTimeout = 2000ms;
  struct Case {
    PeerStops stops;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {PeerStops::before_joining,
       "NCCL transport: rank 0 of 2 joining the world communicator: timed out after 2000 ms"},
      {PeerStops::before_splitting,
       "NCCL transport: rank 0 of 2 splitting the pipeline link 0->1 off the world "
       "communicator: timed out after 2000 ms"},
      {PeerStops::before_connecting,
       "NCCL transport: connection setup on the pipeline link 0->1 (device 0): timed out after "
       "2000 ms"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expected);
    ncclUniqueId id{};
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    std::atomic<bool> done = false;
    std::string peer_error;
    std::jthread peer([&] { half_a_peer(c.stops, id, gpu_of[1], done, peer_error); });
    ASSERT_EQ(cudaSetDevice(gpu_of[0]), cudaSuccess);
    cuda::CudaBackend backend;
    const auto start = std::chrono::steady_clock::now();
    std::string what;
    try {
      cuda::NcclTransport::multi_process(0, 2, id, endpoint_of(backend, gpu_of[0]), links, nullptr,
                                         kTimeout);
      what = "the transport was made";
    } catch (const Error& e) {
      what = e.what();
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    done = true;
    peer.join();
    // Where the peer thread could not take its own steps in time (starved on a loaded machine:
    // its "did not settle"), rank 0 timed out at an earlier step; the bound and the one line
    // still hold.
    if (peer_error.empty()) {
      EXPECT_EQ(what.rfind(c.expected, 0), 0U) << what;
    } else {
      EXPECT_EQ(what.rfind("NCCL transport: ", 0), 0U) << what << " (peer: " << peer_error << ")";
      EXPECT_NE(what.find("timed out after 2000 ms"), std::string::npos) << what;
    }
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_GE(waited, kTimeout);
    EXPECT_LT(waited, 20s) << "the set-up waited far beyond its timeout";
  }
}

// A send whose receiver never posts: flush gives up after the timeout it is given, reset after
// the transport's (the run's), each in one line naming the tag, the link and the time.
TEST(NcclTransport, ASendWhoseReceiverNeverPostsTimesOutInFlushAndReset) {
  PIPEPLAN_REQUIRE_GPU();
  const testing::ScopedEnv multi_rank("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  std::vector<int> gpu_of;
  nccl_rank_gpus(2, false, gpu_of);
  if (gpu_of.empty()) return;
  const std::vector<cuda::TransportLink> links = {{0, 1, Channel::pipeline}};
  for (const bool flush : {true, false}) {
    SCOPED_TRACE(flush ? "flush" : "reset");
    std::vector<std::unique_ptr<cuda::CudaBackend>> backends;
    std::vector<cuda::StageEndpoint> endpoints;
    for (int d = 0; d < 2; ++d) {
      ASSERT_EQ(cudaSetDevice(gpu_of[static_cast<std::size_t>(d)]), cudaSuccess);
      backends.push_back(std::make_unique<cuda::CudaBackend>());
      endpoints.push_back(endpoint_of(*backends.back(), gpu_of[static_cast<std::size_t>(d)]));
    }
    // The run's timeout: far above flush's own, for reset the one it waits.
    const auto run_timeout = flush ? std::chrono::milliseconds(30s) : 300ms;
    auto transport = cuda::NcclTransport::single_process(endpoints, links, nullptr, run_timeout);
    EXPECT_EQ(transport->send_timeout(), run_timeout);
    ASSERT_EQ(cudaSetDevice(gpu_of[0]), cudaSuccess);
    transport->send(0, 1, Channel::pipeline, testing::unreceived(*backends[0], "0F0"));
    const auto start = std::chrono::steady_clock::now();
    const std::string what = testing::error_of([&] {
      if (flush) {
        transport->flush(0, 1, Channel::pipeline, 200ms);
      } else {
        transport->reset();
      }
    });
    const auto waited = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(what,
              "NCCL transport: send '0F0' on the pipeline link 0->1 (device 0): timed out "
              "after " +
                  std::string(flush ? "200" : "300") + " ms");
    EXPECT_LT(waited, 10s) << "the wait ignored its timeout";
    EXPECT_THROW(transport->reset(), Error) << "a transport that gave up is aborted";
  }
}

// The link of the teardown tests: 0 -> 1, one message, and the transport's send timeout.
struct OneLink {
  std::vector<std::unique_ptr<cuda::CudaBackend>> backends;
  std::unique_ptr<cuda::NcclTransport> transport;
};

OneLink one_link(const std::vector<int>& gpu_of, std::chrono::milliseconds timeout) {
  OneLink link;
  std::vector<cuda::StageEndpoint> endpoints;
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(cudaSetDevice(gpu_of[static_cast<std::size_t>(d)]), cudaSuccess);
    link.backends.push_back(std::make_unique<cuda::CudaBackend>());
    endpoints.push_back(endpoint_of(*link.backends.back(), gpu_of[static_cast<std::size_t>(d)]));
  }
  link.transport =
      cuda::NcclTransport::single_process(endpoints, {{0, 1, Channel::pipeline}}, nullptr, timeout);
  EXPECT_EQ(cudaSetDevice(gpu_of[0]), cudaSuccess);
  return link;
}

#ifdef PIPEPLAN_FAKE_DEVICE
// What the stand-in counted between two points: communicators finalized, destroyed and aborted,
// and rules broken (a destroy with calls not run would be one).
struct Teardown {
  fake_cuda::NcclCounts start = fake_cuda::nccl_counts();
  std::int64_t rules = fake_cuda::counters().rule_errors;
  void expect(std::int64_t finalized, std::int64_t destroyed, std::int64_t aborted) const {
    const fake_cuda::NcclCounts now = fake_cuda::nccl_counts();
    EXPECT_EQ(now.finalized - start.finalized, finalized);
    EXPECT_EQ(now.destroyed - start.destroyed, destroyed);
    EXPECT_EQ(now.aborted - start.aborted, aborted);
    EXPECT_EQ(fake_cuda::counters().rule_errors, rules) << fake_cuda::last_rule_error();
  }
};
#endif

// After the last step close() finalizes both communicators of the link, polls them, then
// destroys them; a second close does nothing and the closed transport takes no more messages.
// Its destructor then has nothing left to end. A healthy transport never closed is closed by its
// destructor the same way.
TEST(NcclTransport, CloseFinalizesThenDestroysEveryCommunicator) {
  PIPEPLAN_REQUIRE_GPU();
  const testing::ScopedEnv multi_rank("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  std::vector<int> gpu_of;
  nccl_rank_gpus(2, false, gpu_of);
  if (gpu_of.empty()) return;
  for (const bool closed : {true, false}) {
    SCOPED_TRACE(closed ? "close()" : "destructor");
    OneLink link = one_link(gpu_of, 20s);
#ifdef PIPEPLAN_FAKE_DEVICE
    const Teardown counted;
#endif
    link.transport->send(0, 1, Channel::pipeline, message_of(*link.backends[0], "0F0", 3));
    expect_message(*link.backends[1], link.transport->recv(1, 0, Channel::pipeline, "0F0", 20s),
                   "0F0", 3);
    if (closed) {
      link.transport->close(20s);
      link.transport->close(20s);
      EXPECT_EQ(testing::error_of([&] {
                  link.transport->send(0, 1, Channel::pipeline,
                                       message_of(*link.backends[0], "0F1", 4));
                }),
                "NCCL transport closed after the last step; '0F1' cannot be transferred");
    }
    link.transport.reset();
#ifdef PIPEPLAN_FAKE_DEVICE
    counted.expect(2, 2, 0);
#endif
  }
}

// A send never received (its peer gone after the last step): close() gives up within its
// timeout naming the send and the link, and aborts every communicator instead of destroying it
// (ncclCommDestroy would wait for the send without bound); so does the destructor of a transport
// never closed, within the send timeout.
TEST(NcclTransport, TeardownWithASendNeverReceivedEndsWithinItsTimeout) {
  PIPEPLAN_REQUIRE_GPU();
  const testing::ScopedEnv multi_rank("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  std::vector<int> gpu_of;
  nccl_rank_gpus(2, false, gpu_of);
  if (gpu_of.empty()) return;
  for (const bool closed : {true, false}) {
    SCOPED_TRACE(closed ? "close()" : "destructor");
    OneLink link = one_link(gpu_of, closed ? std::chrono::milliseconds(30s) : 300ms);
#ifdef PIPEPLAN_FAKE_DEVICE
    const Teardown counted;
#endif
    link.transport->send(0, 1, Channel::pipeline, testing::unreceived(*link.backends[0], "0F0"));
    const auto start = std::chrono::steady_clock::now();
    if (closed) {
      EXPECT_EQ(testing::error_of([&] { link.transport->close(300ms); }),
                "NCCL transport: send '0F0' on the pipeline link 0->1 (device 0): timed out after "
                "300 ms");
      EXPECT_THROW(link.transport->close(300ms), Error) << "a transport that gave up is aborted";
    }
    link.transport.reset();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "the teardown ignored its timeout";
#ifdef PIPEPLAN_FAKE_DEVICE
    counted.expect(0, 0, 2);
#endif
  }
}

#else

TEST(NcclTransport, NotBuilt) {
  GTEST_SKIP() << "built without NCCL (runtime/cuda/CMakeLists.txt found no nccl.h / libnccl)";
}

#endif

}  // namespace
}  // namespace pipeplan
