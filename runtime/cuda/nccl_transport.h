// Stages on distinct GPUs exchange tensors with NCCL point-to-point. Each directed
// link of the plan (from -> to, channel) gets its own two-rank communicator (rank 0 sends, rank
// 1 receives) and its own stream on each side, so the link is one FIFO in the plan's per-peer
// order: the sender issues ncclSend in its send stream's planned order, the receiver ncclRecv in
// the mirrored order. Because no communicator carries two directions, a send never queues behind
// an unrelated receive (which, with one communicator per GPU pair, serialises the two directions
// and can deadlock 1F1B: NCCL orders the operations of one communicator); within a message the
// header and every tensor go in one ncclGroupStart/End, and connection setup groups both sides.
//
// A message travels as a 64 KiB header (tag, declared size, names/dtypes/shapes as JSON) and one
// ncclSend per tensor into buffers the receiver allocates from its own caching allocator. send()
// only queues (Transport contract: it never waits for the receiver) and keeps the message alive
// until NCCL has read it; recv() waits for its transfer on the host, polling the event and
// ncclCommGetAsyncError, so a hang is a timeout and an NCCL failure an Error naming the link,
// the device and the tag; either aborts every communicator (ncclCommAbort): the step is lost.
// reset() (before a step) and flush() wait for sends the same way, and close() (after the last
// step) for the streams and for ncclCommFinalize before ncclCommDestroy.
//
// Two ways to make the communicators: one process driving every GPU (two ranks per link, made in
// one group), or one process per GPU (a world communicator from a shared unique id, then
// ncclCommSplit per link; see docs/design/runtime.md for the mpirun / srun launch). Every
// communicator is nonblocking (ncclConfig_t::blocking = 0): making one, splitting one and every
// call that returns ncclInProgress is polled (ncclCommGetAsyncError) until it settles, so a peer
// that never joins, or hangs, is a timeout naming this rank, the link and the time waited, after
// which every communicator is aborted, not a call that never returns.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "planner/graph/taskgraph.h"
#include "runtime/cuda/device_local_transport.h"
#include "runtime/cuda/step_events.h"
#include "runtime/transport.h"

namespace pipeplan::cuda {

// The world communicator's unique id, passed out of band: rank 0 creates it and writes it to
// `path` (atomically); the other ranks wait up to `timeout` for the file. When the environment
// variable PIPEPLAN_NCCL_ID holds one (hex, from unique_id_hex), it wins.
ncclUniqueId exchange_unique_id(int rank, const std::filesystem::path& path,
                                std::chrono::milliseconds timeout);
std::string unique_id_hex(const ncclUniqueId& id);
// Several NCCL ranks on one GPU (stages emulated on one GPU over NCCL, or processes sharing a
// GPU) need NCCL 2.30 or later, loaded, and NCCL_MULTI_RANK_GPU_ENABLE=1: "" where both hold,
// else what is missing, in one clause ("NCCL 2.28.9 is loaded; ...").
std::string multi_rank_gpu_refusal();
ncclUniqueId unique_id_from_hex(const std::string& hex);  // throws Error on a malformed id

class NcclTransport final : public Transport {
 public:
  static constexpr std::int64_t kHeaderBytes = 64 * 1024;

  static constexpr std::chrono::milliseconds kDefaultTimeout{60000};

  // One process drives every plan device: endpoints[d].cuda_device, distinct GPUs, or stages in
  // green contexts of one GPU (endpoints[d].green) where multi_rank_gpu_refusal() allows it.
  // `timeout` (the run's) bounds each wait of the set-up, and later each send's wait for its
  // receiver in reset().
  static std::unique_ptr<NcclTransport> single_process(
      std::vector<StageEndpoint> endpoints, const std::vector<TransportLink>& links,
      StepEvents* events = nullptr, std::chrono::milliseconds timeout = kDefaultTimeout);
  // One process per plan device: this one is plan device `rank` of `world`, on `local`. Throws
  // an Error naming the rank and `timeout` when the other ranks do not all join the world
  // communicator, a split or the connection set-up in time.
  static std::unique_ptr<NcclTransport> multi_process(
      int rank, int world, const ncclUniqueId& id, StageEndpoint local,
      const std::vector<TransportLink>& links, StepEvents* events = nullptr,
      std::chrono::milliseconds timeout = kDefaultTimeout);
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  // "nccl (NCCL 2.32.3 from /path/libnccl.so.2)": which NCCL the run loaded.
  std::string name() const override;
  void send(int from, int to, Channel channel, Message message) override;
  // Waits for the link's sends in flight (each within `timeout`), which then give their tensors
  // back to the sender's cache.
  void flush(int from, int to, Channel channel, std::chrono::milliseconds timeout) override;
  Message recv(int to, int from, Channel channel, std::string_view expected_tag,
               std::chrono::milliseconds timeout) override;
  void cancel() override;  // aborts every communicator: in-flight transfers cannot be resumed
  // Waits for every send in flight (each within the send timeout); throws once aborted: the
  // communicators are gone.
  void reset() override;
  // After the last step: waits for every send in flight and for each link's stream, then
  // finalizes every communicator (ncclCommFinalize, polled) and destroys it, each wait within
  // `timeout`. Where one does not end in time (a peer gone after the last step), every
  // communicator is aborted and an Error names the link and what was waited for. The destructor
  // does the same within the send timeout for a transport not closed, so no teardown waits
  // without bound (ncclCommDestroy alone would wait for unfinished work and for peers).
  void close(std::chrono::milliseconds timeout) override;
  // Bounds a send's wait for its receiver in reset(), and the settling of a send's calls (recv
  // and flush take their timeout per call). The factories set it to their `timeout`.
  void set_send_timeout(std::chrono::milliseconds timeout) { send_timeout_ = timeout; }
  std::chrono::milliseconds send_timeout() const { return send_timeout_; }

 private:
  using LinkSide = std::tuple<int, int, int, Channel>;  // (device, from, to, channel)
  struct Side;
  NcclTransport(std::vector<StageEndpoint> endpoints, StepEvents* events,
                std::chrono::milliseconds send_timeout);
  void add_side(int device, const TransportLink& link, ncclComm_t comm);
  void connect();  // one grouped 1-byte exchange per link: connection setup off the hot path
  // A call on nonblocking communicators returned `status`: "" once it succeeded, or once every
  // one of `comms` has left ncclInProgress (ncclCommGetAsyncError) within `timeout`; else why
  // not (an NCCL error, the timeout, a cancel), for the caller to fail with. Only then is the
  // call's work queued on its stream.
  std::string settle(std::initializer_list<ncclComm_t> comms, ncclResult_t status,
                     std::chrono::milliseconds timeout);
  // Set-up failed (`what` of this process, `why`): aborts every communicator, those in `also`
  // too (made, not yet a link's), and throws one line.
  [[noreturn]] void fail_setup(const std::string& what, const std::string& why,
                               std::initializer_list<ncclComm_t> also = {});
  Side& side(int device, int from, int to, Channel channel, std::string_view tag);
  std::mutex& device_mutex(int device);
  int endpoint_gpu(int device) const;  // throws for a device another process drives
  // Polls `done` until it completes; throws (after aborting) on an NCCL error, a timeout or a
  // cancel. `what` names the operation for the error.
  void wait(Side& side, cudaEvent_t done, std::chrono::milliseconds timeout,
            const std::string& what);
  // Releases the sends NCCL has finished (all of them, each waited for within `timeout`, when
  // `wait_all`).
  void reap(Side& side, bool wait_all, std::chrono::milliseconds timeout = {});
  void reap_locked(Side& side, bool wait_all, std::chrono::milliseconds timeout);  // holds its lock
  // Releases the finished sends of every link `device` sends on whose lock is free.
  void reap_finished(int device);
  void abort_all(const std::string& reason);
  [[noreturn]] void fail(Side& side, const std::string& what, const std::string& why);

  std::vector<StageEndpoint> endpoints_;  // by plan device; cuda_device < 0: another process
  StepEvents* events_;
  std::map<LinkSide, std::unique_ptr<Side>> sides_;
  std::map<int, std::unique_ptr<std::mutex>> device_mutexes_;  // NCCL calls per GPU, serialised
  std::vector<ncclComm_t> world_;                              // multi-process: this rank's
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> aborted_{false};
  bool closed_ = false;  // close() ended every communicator
  std::mutex abort_mutex_;
  std::string abort_reason_;
  std::chrono::milliseconds send_timeout_;
};

}  // namespace pipeplan::cuda
