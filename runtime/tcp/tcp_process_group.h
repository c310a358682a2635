// The ProcessGroup of a run started by a torchrun-style launcher (`pipeplan run --launcher env`,
// docs/design/runtime.md "Multi-process runs"): RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
// MASTER_PORT (runtime/launch.h) instead of MPI. POSIX sockets, no library.
//
// Rendezvous: rank 0 listens on MASTER_ADDR:MASTER_PORT (or the port EnvLaunch::port_source
// names: torchrun's agent may hold MASTER_PORT) (SO_REUSEADDR; on every interface when
// MASTER_ADDR is not one of this host's addresses, e.g. a Kubernetes service name), the other
// ranks connect, retrying until the deadline (rank 0 may start after them), and send a hello:
// the protocol's marker and version, their RANK and WORLD_SIZE, and the job's identity where the
// environment gives one (EnvLaunch::job_id). Rank 0 refuses another version, another WORLD_SIZE
// or a RANK already taken: it tells every connected rank why and every one of them fails with
// that one line. A process of another job (another identity: two jobs given one port) is told so
// and fails alone, naming both; rank 0 goes on waiting for its own. When all WORLD_SIZE - 1 have
// joined, rank 0 welcomes each and stops listening: a rank that comes later (started twice, or
// of another job without an identity) finds nobody there, and says the rendezvous may have
// completed without it.
//
// Topology: a star through rank 0, one TCP connection per other rank. Every collective of
// ProcessGroup goes between rank 0 and the others; a message between two other ranks is relayed
// by rank 0, in order. Frames are length-prefixed (a 20-byte header: marker, kind, source,
// destination, length) and at most kMaxFrameBytes; a frame above that or without the marker
// ends the connection as corrupted. One thread per process does every socket read and write
// (non-blocking sockets, poll(2), MSG_NOSIGNAL): post() never waits for the receiver.
//
// Failures. A peer whose connection ends without its goodbye ("rank 2 closed its connection"), a
// corrupted frame, or a peer that ended the job (an abort frame, which rank 0 relays to every
// rank) makes the group failed: every later poll() throws GroupTimeout naming the cause, and
// the group is broken(). A process that must end the job calls abort(): it tells every peer
// why, then exits. With end_process_on_failure, a failure this rank does not act on within
// failure_grace (its main thread is busy elsewhere, or hung) ends the process from the socket
// thread with the same one line, as MPI_Abort would end a rank that is not listening.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/launch.h"
#include "runtime/process_group.h"

namespace pipeplan::tcp {

inline constexpr std::uint32_t kProtocolVersion = 2;
// The largest frame a rank sends or accepts: a step's share of the plan's largest (limits.h)
// is far below it.
inline constexpr std::size_t kMaxFrameBytes = std::size_t{1} << 30;

struct TcpOptions {
  EnvLaunch launch;
  // Bounds the rendezvous: the other ranks keep trying to reach rank 0 this long, rank 0 waits
  // this long for all of them (the run's --timeout-ms).
  std::chrono::milliseconds timeout{60000};
  // Whether a failure this rank does not act on ends the process (the CLI; see above).
  bool end_process_on_failure = false;
  // How long the socket thread leaves the main thread to act on a failure before it ends the
  // process itself.
  std::chrono::milliseconds failure_grace{1000};
};

class TcpProcessGroup final : public ProcessGroup {
 public:
  // The rendezvous; throws an Error (one line: the variable, the rank or the peer it concerns)
  // when it fails or does not complete within options.timeout.
  static std::shared_ptr<TcpProcessGroup> connect(const TcpOptions& options);

  ~TcpProcessGroup() override;
  TcpProcessGroup(const TcpProcessGroup&) = delete;
  TcpProcessGroup& operator=(const TcpProcessGroup&) = delete;

  int rank() const override { return options_.launch.rank; }
  int size() const override { return options_.launch.world_size; }
  int local_rank() const override { return options_.launch.local_rank; }
  std::string name() const override { return "env"; }
  void post(int to, std::string bytes) override;
  std::optional<std::string> poll(int from, Clock::time_point deadline, const Idle& idle) override;

  // MASTER_ADDR:MASTER_PORT, e.g. "127.0.0.1:29500"
  std::string endpoint() const { return options_.launch.endpoint(); }
  const std::string& port_source() const { return options_.launch.port_source; }

  // This process is on its way out (it caught the error it will print, or is finishing): a
  // failure no longer needs the socket thread to end it. True for the first caller only: false
  // means the socket thread is already ending the process (and has printed why).
  bool set_ending() { return !ending_.exchange(true); }
  // The end of a run whose group is not broken: a barrier, then a goodbye on every connection,
  // and each side reads until the other closed (bounded by `timeout`), so no message in flight
  // is lost and no peer sees a failure. False when the barrier failed (`why`, when given, says
  // how): call abort().
  bool finish(std::chrono::milliseconds timeout, std::string* why = nullptr);
  // Ends the job: tells every connected peer `reason` (rank 0 relays it to all), then exits
  // with `code` without running destructors (as MPI_Abort does).
  [[noreturn]] void abort(int code, const std::string& reason);

 private:
  struct Peer {
    int rank = -1;
    int fd = -1;
    std::string in;               // bytes read, not yet a whole frame
    std::deque<std::string> out;  // frames to send, the front one from out_offset
    std::size_t out_offset = 0;
    bool bye = false;     // the peer said goodbye: its end of the connection is expected
    bool closed = false;  // nothing more to read: the peer's end closed, or it failed
    bool dead = false;    // nothing more to write: the connection failed
    bool shut = false;    // this side's write end is shut (after its goodbye)
  };

  TcpProcessGroup(TcpOptions options, std::vector<Peer> peers);
  void io_loop();
  // With mutex_ held.
  Peer* peer_locked(int rank);
  void queue_locked(Peer& peer, std::string frame);
  void fail_locked(const std::string& reason);
  void read_locked(Peer& peer);
  void write_locked(Peer& peer);
  void handle_frame_locked(Peer& peer, std::uint32_t kind, std::uint32_t source,
                           std::uint32_t destination, std::string payload);
  bool closed_down_locked() const;
  [[noreturn]] void exit_now(int code);
  void wake();

  TcpOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Peer> peers_;                     // rank 0: every other rank; else rank 0
  std::vector<std::deque<std::string>> inbox_;  // by source rank
  std::optional<std::string> failure_;          // the first failure, as poll() reports it
  Clock::time_point failed_at_{};
  bool closing_ = false;  // finish(): goodbyes sent, ends expected
  bool stop_ = false;     // the socket thread ends
  std::atomic<bool> ending_{false};
  int wake_read_ = -1;
  int wake_write_ = -1;
  std::thread io_;
};

// One rank's life after the rendezvous, by the rules of process_group.h: runs `body` (its exit
// status) and ends the rank. An AgreedError is printed by rank 0 only, any other Error by the rank
// that caught it ("pipeplan: error: rank R: ..." on stderr); then the group finishes cleanly, or,
// when it is broken or its last barrier fails, abort() ends the job with the error as reason.
// Returns the status: body's, 1 after an error, 3 after an exception that is not an Error.
int run_as_rank(TcpProcessGroup& group, const std::function<int()>& body,
                std::chrono::milliseconds timeout);

// Whether a connected socket's two ends are one address: a rank connecting to a port of its own
// host in the ephemeral range, while nothing listens there, can be given that very port as its
// source (TCP's simultaneous open) and is then connected to itself. The rendezvous closes such a
// connection and tries again.
bool connected_to_itself(int fd);

}  // namespace pipeplan::tcp
