// The Transport between ranks of a multi-process CPU run: plan device r is rank r of the
// communicator, and a link (from, to, channel) is the ordered stream of MPI messages from rank
// `from` to rank `to` with the channel's tag. MPI keeps messages of one (source, tag,
// communicator) in order, and one stream thread sends (or receives) on a link, so a link is a
// FIFO in the plan's order, as in the in-process transport.
//
// A Message travels as a header (JSON: tag, declared size, tensor names, dtypes and shapes; at
// most kHeaderBytes) and one MPI_Isend per tensor (in chunks of at most 1 GiB) straight from the
// tensor's storage; send() keeps the message until MPI has completed the sends, and never waits
// for the receiver. recv() posts MPI_Irecv for the header, then for each tensor into fresh host
// memory, and polls them (MPI_Testall) against the timeout; the executor then runs the same
// check_message as in one process (tag, declared size, expected size), and recv itself checks
// that each tensor arrived whole.
//
// Failure: cancel() wakes this rank's waits with Cancelled and sends every other rank a notice,
// which ends their waits with Cancelled too ("rank 2 failed"); a dead rank sends nothing, so
// its peers' waits end at the timeout. Either way no wait is longer than the timeout.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/transport.h"

namespace pipeplan::mpi {

class MpiTransport final : public Transport {
 public:
  static constexpr int kHeaderBytes = 64 * 1024;

  // `comm`: a communicator only this transport uses (errors returned, not fatal); rank r of it
  // runs plan device r. `send_timeout` bounds reset()'s wait for the last step's sends.
  MpiTransport(MPI_Comm comm, std::chrono::milliseconds send_timeout);
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  std::string name() const override { return "mpi"; }
  void send(int from, int to, Channel channel, Message message) override;
  // Waits until MPI has completed this rank's sends on the link (their tensors are sent from
  // the sender's own memory, which the sender may change once this returns), within `timeout`;
  // Cancelled on a cancel or a peer's notice.
  void flush(int from, int to, Channel channel, std::chrono::milliseconds timeout) override;
  Message recv(int to, int from, Channel channel, std::string_view expected_tag,
               std::chrono::milliseconds timeout) override;
  void cancel() override;
  // Waits (up to the send timeout) until the peers received every message of the last step;
  // throws once a rank has failed: the ranks cannot go on together.
  void reset() override;

  // Receives and drops whatever has arrived, and returns whether every send of this rank has
  // completed (MpiSession::finish drains before MPI_Finalize).
  bool drain();

 private:
  using Clock = std::chrono::steady_clock;
  struct PendingSend {
    std::vector<MPI_Request> requests;
    std::string header;  // the bytes the header send reads
    Message message;     // the tensors the data sends read
    int to = 0;
    Channel channel = Channel::pipeline;
  };
  // Polls until every request completes; on a cancel, a peer's notice or the deadline, cancels
  // the requests still open and throws (Cancelled for the first two). `what` names the message.
  void wait(std::vector<MPI_Request>& requests, std::vector<MPI_Status>& statuses,
            Clock::time_point deadline, std::chrono::milliseconds timeout, const std::string& what);
  std::optional<std::string> peer_failure();  // a notice received by any thread of this rank
  void reap_locked();                         // drops completed sends; caller holds mutex_

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 0;
  std::chrono::milliseconds send_timeout_;
  std::mutex mutex_;
  // A list: erasing one element moves no other, so every buffer stays where MPI was told it is.
  std::list<PendingSend> pending_;
  bool notified_ = false;  // this rank's notices were sent
  std::atomic<bool> cancelled_{false};
  std::mutex peer_mutex_;
  std::optional<std::string> peer_failure_;
};

}  // namespace pipeplan::mpi
