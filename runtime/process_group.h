// The processes of a multi-process run (one rank per plan device, docs/design/runtime.md,
// "Multi-process runs"), as the executor and the GPU plugin see them: a rank, a world size and
// small messages between ranks, on a channel of their own (not the transport's). The MPI
// implementation lives in runtime/mpi/, the TCP one of torchrun-style launches in runtime/tcp/;
// tests use threads. Nothing here names MPI, so the executor and the CUDA module need no MPI
// library.
//
// Every collective below waits at most `timeout` and names the ranks that did not arrive, so a
// dead or hung rank is an Error, never a hang. After such a timeout the group is broken():
// messages may still be in flight, and the process must end the whole job (MPI_Abort;
// TcpProcessGroup::abort) rather than finish cleanly.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/base/error.h"

namespace pipeplan {

// Every rank throws this one, with the same message: rank 0 prints it, the others exit quietly.
class AgreedError : public Error {
 public:
  using Error::Error;
};

// A collective or a message from another rank did not arrive in time (the rank died, hung or is
// far behind). Only this rank knows: it prints the error itself.
class GroupTimeout : public Error {
 public:
  using Error::Error;
};

// The GroupTimeout of a rank other than 0 that waited for rank 0: every rank waiting on a dead or
// hung rank 0 sees it at about the same time, so the launcher's code lets rank 1 say it first
// (run_under_mpi).
class RankZeroSilent : public GroupTimeout {
 public:
  using GroupTimeout::GroupTimeout;
};

// What the last collective of every run is called (ProcessGroup::end_run).
inline constexpr std::string_view kEndOfRun = "the end of the run";

class ProcessGroup {
 public:
  using Clock = std::chrono::steady_clock;
  // Called while a collective waits (e.g. to keep draining a transport); may be empty.
  using Idle = std::function<void()>;

  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This rank's index among the ranks on its node (which GPU it takes).
  virtual int local_rank() const = 0;
  virtual std::string name() const = 0;  // "mpi"

  // Point to point on the group's channel: messages from one rank to another arrive in the order
  // they were posted. post never waits for the receiver; poll returns the next message from
  // `from`, or nullopt when none arrived by `deadline`. The collectives below put the name of
  // their point (`what`) in each message and read only messages of the point they are at.
  virtual void post(int to, std::string bytes) = 0;
  virtual std::optional<std::string> poll(int from, Clock::time_point deadline,
                                          const Idle& idle) = 0;

  // Rank 0 gets every rank's bytes, by rank; the others get an empty vector. Throws
  // GroupTimeout (rank 0: naming the ranks missing after `timeout`; `what` names the point,
  // e.g. "the end of step 3"), or AgreedError when a rank had left the run (on an error of its
  // own, which it printed) before this point: "rank 2 left the run before <what> (...)".
  std::vector<std::string> gather(std::string bytes, std::string_view what,
                                  std::chrono::milliseconds timeout, const Idle& idle = {});
  // As gather, but rank 0 gets every part that arrived and the ranks that did not, instead of a
  // throw.
  struct Gathered {
    std::vector<std::optional<std::string>> parts;  // by rank; nullopt: missing or left
    std::vector<int> missing;                       // nothing by the deadline
    std::vector<int> left;                          // had reached the end of the run instead
  };
  Gathered gather_available(std::string bytes, std::string_view what,
                            std::chrono::milliseconds timeout, const Idle& idle = {});
  // Rank 0's bytes on every rank (rank 0 passes them, the others anything). The others wait
  // `timeout` ("rank 0 did not send <what> within T ms").
  std::string broadcast(std::string bytes, std::string_view what, std::chrono::milliseconds timeout,
                        const Idle& idle = {});
  // As broadcast, for rank 0's answer to a gather of `what` that every rank joined with the same
  // `timeout`: the others wait answer_timeout(timeout) ("rank 0 did not answer at <what> within
  // 5000 ms (2 x --timeout-ms 2000 + 1 s ...)").
  std::string answer(std::string bytes, std::string_view what, std::chrono::milliseconds timeout,
                     const Idle& idle = {});
  // Rank 0's answer to one rank only (a rank that is missing gets none), as answer() reads it.
  void reply(int to, std::string_view bytes, std::string_view what);
  // Every rank's bytes on every rank. all_gather and barrier: the ranks other than 0 wait
  // answer_timeout(timeout) for rank 0's answer. A rank that had left the run: every other rank
  // throws the same AgreedError naming it.
  std::vector<std::string> all_gather(std::string bytes, std::string_view what,
                                      std::chrono::milliseconds timeout, const Idle& idle = {});
  void barrier(std::string_view what, std::chrono::milliseconds timeout, const Idle& idle = {});

  // Every rank says whether its part of a setup step failed; when some rank's did, every rank
  // throws the same AgreedError: the message when all failed alike, else "rank R: message"
  // of the first failing rank (and how many more failed). A rank that had left the run fails
  // with "left the run before <what> (its own error is on its output)".
  void agree(const std::optional<std::string>& local_error, std::string_view what,
             std::chrono::milliseconds timeout);

  // The last collective of a run, on every rank, after its error if it had one: a barrier at
  // kEndOfRun. Rank 0 first tells every rank it has got there, so that a rank still waiting for
  // rank 0 at an earlier point stops waiting (AgreedError: rank 0 printed why) and comes too;
  // a rank that comes early is, to rank 0 at an earlier point, a rank that left the run.
  void end_run(std::chrono::milliseconds timeout, const Idle& idle = {});

  // A collective timed out: messages may still be in flight; end the job, do not finish it.
  bool broken() const { return broken_; }
  void mark_broken() { broken_ = true; }

 private:
  // A message as received for point `what`: its bytes, or that the sender had left the run (is
  // at kEndOfRun), or nothing by the deadline.
  struct Received {
    std::optional<std::string> bytes;
    bool left = false;
  };
  void send(int to, std::string_view what, std::string_view bytes);
  Received receive(int from, std::string_view what, Clock::time_point deadline, const Idle& idle);
  // Rank 0's answer of `what`, waited for until `deadline`; `silence` is the message when none.
  std::string from_rank_zero(std::string_view what, Clock::time_point deadline,
                             const std::string& silence, const Idle& idle);
  // Rank 0: every other rank throws AgreedError(text) at `what`; so does rank 0.
  [[noreturn]] void fail_everywhere(const std::string& text, std::string_view what);
  // Rank 0: throws GroupTimeout when a rank is missing (the group is then broken).
  void require_arrived(const Gathered& gathered, std::string_view what,
                       std::chrono::milliseconds timeout);

  bool broken_ = false;
  // By sender: messages of a later point that came while this rank was at an earlier one.
  std::vector<std::vector<std::pair<std::string, std::string>>> held_;
};

// How long a rank other than 0 waits for rank 0's answer to a gather it joined: rank 0 may itself
// wait `timeout` for a missing rank before it answers, and must time out first, so that the job
// ends naming the rank that is missing rather than rank 0.
inline std::chrono::milliseconds answer_timeout(std::chrono::milliseconds timeout) {
  return 2 * timeout + std::chrono::milliseconds(1000);
}
// That wait as a message gives it, with how it follows from --timeout-ms and `why`:
// "5000 ms (2 x --timeout-ms 2000 + 1 s; <why>)".
std::string answer_timeout_text(std::chrono::milliseconds timeout, std::string_view why);

// "rank 2", "ranks 1, 3"
std::string rank_list(const std::vector<int>& ranks);

// FNV-1a, 64 bits: the fingerprint ranks compare (of the plan JSON and the run options).
std::uint64_t fingerprint(std::string_view bytes, std::uint64_t seed = 14695981039346656037ULL);

}  // namespace pipeplan
