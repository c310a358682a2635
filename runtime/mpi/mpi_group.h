// The ProcessGroup of a run under MPI: ranks of a communicator of its own, messages by
// MPI_Isend and a polled MPI_Improbe/MPI_Mrecv, so every collective of runtime/process_group.h
// can give up at its timeout and name the ranks that did not arrive.
#pragma once

#include <mpi.h>

#include <list>
#include <mutex>
#include <optional>
#include <string>

#include "runtime/process_group.h"

namespace pipeplan::mpi {

class MpiProcessGroup final : public ProcessGroup {
 public:
  // `comm`: used only by this group; `local_rank`: this rank's index on its node.
  MpiProcessGroup(MPI_Comm comm, int local_rank);
  ~MpiProcessGroup() override;
  MpiProcessGroup(const MpiProcessGroup&) = delete;
  MpiProcessGroup& operator=(const MpiProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  std::string name() const override { return "mpi"; }
  void post(int to, std::string bytes) override;
  std::optional<std::string> poll(int from, Clock::time_point deadline, const Idle& idle) override;

  // Whether every message this rank posted has been received (checked without waiting).
  bool sends_complete();

 private:
  struct Posted {
    MPI_Request request = MPI_REQUEST_NULL;
    std::string bytes;
  };
  void reap_locked();

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 0;
  int local_rank_ = 0;
  std::mutex mutex_;
  std::list<Posted> posted_;  // a list: the buffers never move while MPI reads them
};

}  // namespace pipeplan::mpi
