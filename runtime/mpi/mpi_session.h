// MPI for `pipeplan run` under mpirun or srun (docs/design/runtime.md, "Multi-process runs"): one
// rank per plan device, ranks and world size from MPI_Comm_rank/size. This header names no MPI
// type, so the CLI compiles the same with or without MPI; without it (CMake found no MPI) start()
// throws a one-line Error. MPI_Init runs only in start(), which only `run` under MPI calls:
// every other command starts without initialising MPI.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "runtime/process_group.h"
#include "runtime/transport.h"

namespace pipeplan {

// Whether this build has MPI (runtime/mpi/CMakeLists.txt, FindMPI).
bool mpi_support_built();
// Whether this process has called MPI_Init (false without MPI): only `run` under MPI does.
bool mpi_initialized();

class MpiSession {
 public:
  // MPI_Init_thread(MPI_THREAD_MULTIPLE: every stream thread sends or receives) on the first
  // call; the same session afterwards. Throws Error naming `launcher` when MPI is not built, and
  // Error when the library lacks MPI_THREAD_MULTIPLE.
  static MpiSession& start();

  virtual ~MpiSession() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The ranks, on a communicator of their own (MPI_Comm_dup of MPI_COMM_WORLD).
  virtual std::shared_ptr<ProcessGroup> group() = 0;
  // Point-to-point between the ranks' devices (MPI_Isend/MPI_Irecv, runtime/mpi/mpi_transport.h)
  // on another communicator of their own; `timeout` bounds a step's wait for its sends. The
  // session keeps it alive until finish(), which drains it.
  virtual std::unique_ptr<Transport> make_transport(std::chrono::milliseconds timeout) = 0;
  // Ends MPI on every rank: each drains the messages in flight (after a failed step some were
  // never received) until every rank's sends completed, then MPI_Finalize, so no rank blocks in
  // it. When the group is broken or the drain takes longer than `timeout`, aborts the whole job
  // instead (MPI_Abort; does not return).
  virtual void finish(std::chrono::milliseconds timeout) = 0;
  // MPI_Abort(MPI_COMM_WORLD, code): mpirun or srun ends every rank.
  [[noreturn]] virtual void abort(int code) = 0;
};

}  // namespace pipeplan
