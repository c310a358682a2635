#include "runtime/mpi/mpi_group.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "runtime/mpi/mpi_check.h"

namespace pipeplan::mpi {

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, int local_rank)
    : comm_(comm), local_rank_(local_rank) {
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

MpiProcessGroup::~MpiProcessGroup() {
  // As the transport: open sends (only when the job is being aborted) keep their buffers.
  if (posted_.empty()) return;
  static auto* kept = new std::list<Posted>();  // NOLINT: intentionally never freed
  kept->splice(kept->end(), posted_);
}

void MpiProcessGroup::reap_locked() {
  for (auto it = posted_.begin(); it != posted_.end();) {
    int done = 0;
    MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    it = done != 0 ? posted_.erase(it) : std::next(it);
  }
}

void MpiProcessGroup::post(int to, std::string bytes) {
  if (bytes.size() > static_cast<std::size_t>(INT_MAX)) {
    throw Error("MPI group: a message of " + std::to_string(bytes.size()) +
                " bytes is above MPI's limit for one message");
  }
  const std::lock_guard lock(mutex_);
  reap_locked();
  Posted& posted = posted_.emplace_back();
  posted.bytes = std::move(bytes);
  check(MPI_Isend(posted.bytes.data(), static_cast<int>(posted.bytes.size()), MPI_BYTE, to,
                  kTagGroup, comm_, &posted.request),
        "MPI_Isend");
}

std::optional<std::string> MpiProcessGroup::poll(int from, Clock::time_point deadline,
                                                 const Idle& idle) {
  Backoff backoff;
  for (;;) {
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    check(MPI_Improbe(from, kTagGroup, comm_, &flag, &message, &status), "MPI_Improbe");
    if (flag != 0) {
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      std::string bytes(static_cast<std::size_t>(std::max(count, 0)), '\0');
      check(MPI_Mrecv(bytes.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
      return bytes;
    }
    if (Clock::now() > deadline) return std::nullopt;
    if (idle) idle();
    {
      const std::lock_guard lock(mutex_);
      reap_locked();
    }
    backoff.pause();
  }
}

bool MpiProcessGroup::sends_complete() {
  const std::lock_guard lock(mutex_);
  reap_locked();
  return posted_.empty();
}

}  // namespace pipeplan::mpi
