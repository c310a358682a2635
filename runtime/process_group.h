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
  // `from`, or nullopt when none arrived by `deadline`.
  virtual void post(int to, std::string bytes) = 0;
  virtual std::optional<std::string> poll(int from, Clock::time_point deadline,
                                          const Idle& idle) = 0;

  // Rank 0 gets every rank's bytes, by rank; the others get an empty vector. Throws
  // GroupTimeout (rank 0: naming the ranks missing after `timeout`; `what` names the point,
  // e.g. "the end of step 3").
  std::vector<std::string> gather(std::string bytes, std::string_view what,
                                  std::chrono::milliseconds timeout, const Idle& idle = {});
  // As gather, but rank 0 gets nullopt for the ranks that did not arrive instead of a throw.
  std::vector<std::optional<std::string>> gather_available(std::string bytes, std::string_view what,
                                                           std::chrono::milliseconds timeout,
                                                           const Idle& idle = {});
  // Rank 0's bytes on every rank (rank 0 passes them, the others anything). The others wait
  // `timeout` ("rank 0 did not send <what> within T ms").
  std::string broadcast(std::string bytes, std::string_view what, std::chrono::milliseconds timeout,
                        const Idle& idle = {});
  // As broadcast, for rank 0's answer to a gather of `what` that every rank joined with the same
  // `timeout`: the others wait answer_timeout(timeout) ("rank 0 did not answer at <what> within
  // 5000 ms (2 x --timeout-ms 2000 + 1 s ...)").
  std::string answer(std::string bytes, std::string_view what, std::chrono::milliseconds timeout,
                     const Idle& idle = {});
  // Every rank's bytes on every rank. all_gather and barrier: the ranks other than 0 wait
  // answer_timeout(timeout) for rank 0's answer.
  std::vector<std::string> all_gather(std::string bytes, std::string_view what,
                                      std::chrono::milliseconds timeout, const Idle& idle = {});
  void barrier(std::string_view what, std::chrono::milliseconds timeout, const Idle& idle = {});

  // Every rank says whether its part of a setup step failed; when some rank's did, every rank
  // throws the same AgreedError: the message when all failed alike, else "rank R: message"
  // of the first failing rank (and how many more failed).
  void agree(const std::optional<std::string>& local_error, std::string_view what,
             std::chrono::milliseconds timeout);

  // A collective timed out: messages may still be in flight; end the job, do not finish it.
  bool broken() const { return broken_; }
  void mark_broken() { broken_ = true; }

 private:
  bool broken_ = false;
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
