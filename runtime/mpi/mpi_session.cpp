// MpiSession: MPI_Init_thread on demand, the group's and the transport's communicators, and an
// end that cannot block (drain, then MPI_Finalize; or MPI_Abort). Compiled in every build: the
// MPI part only when CMake found MPI (PIPEPLAN_HAVE_MPI), else start() says MPI is not built.
#include "runtime/mpi/mpi_session.h"

#include <cstdlib>
#include <string>

#include "planner/base/error.h"
#include "runtime/launch.h"

#ifdef PIPEPLAN_HAVE_MPI
#include <mpi.h>

#include <iostream>
#include <vector>

#include "runtime/mpi/mpi_check.h"
#include "runtime/mpi/mpi_group.h"
#include "runtime/mpi/mpi_transport.h"
#endif

namespace pipeplan {

#ifdef PIPEPLAN_HAVE_MPI

bool mpi_support_built() {
  return true;
}

bool mpi_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

namespace {

using mpi::check;

MPI_Comm duplicate_world() {
  MPI_Comm comm = MPI_COMM_NULL;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return comm;
}

class Session final : public MpiSession {
 public:
  Session() {
    int provided = MPI_THREAD_SINGLE;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_MULTIPLE) {
      MPI_Finalize();
      throw Error(
          "MPI: the library does not support MPI_THREAD_MULTIPLE, which the executor needs (its "
          "stream threads send and receive at once)");
    }
    check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    // The rank's index on its node: which GPU it takes.
    MPI_Comm node = MPI_COMM_NULL;
    int local_rank = 0;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
          "MPI_Comm_split_type");
    check(MPI_Comm_rank(node, &local_rank), "MPI_Comm_rank");
    MPI_Comm_free(&node);
    group_ = std::make_shared<mpi::MpiProcessGroup>(duplicate_world(), local_rank);
    transport_comm_ = duplicate_world();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::shared_ptr<ProcessGroup> group() override { return group_; }

  std::unique_ptr<Transport> make_transport(std::chrono::milliseconds timeout) override {
    if (!transports_.empty()) throw Error("MPI: one transport per run");
    transports_.push_back(std::make_shared<mpi::MpiTransport>(transport_comm_, timeout));
    // What the executor owns; the session keeps the transport itself until it has drained it.
    return std::make_unique<SharedTransportRef>(transports_.back());
  }

  void finish(std::chrono::milliseconds timeout) override {
    if (group_->broken()) abort(1);
    const auto deadline = ProcessGroup::Clock::now() + timeout;
    auto drain = [this] {
      bool complete = true;
      for (const auto& transport : transports_)
        complete = transport->drain() && complete;
      return complete;
    };
    try {
      // Every rank drains until its own sends completed, then waits in a barrier (still
      // draining) until every rank's did: after that nothing is in flight on the transport.
      mpi::Backoff backoff;
      while (!drain()) {
        if (ProcessGroup::Clock::now() > deadline) abort(1);
        backoff.pause();
      }
      group_->end_run(timeout, [&] { drain(); });
      mpi::Backoff group_backoff;
      while (!group_->sends_complete()) {
        if (ProcessGroup::Clock::now() > deadline + timeout) abort(1);
        group_backoff.pause();
      }
    } catch (const Error& e) {
      // A rank is missing: only the launcher can end the job now; this rank says why first.
      std::cerr << "pipeplan: error: rank " << group_->rank() << " could not finish: " << e.what()
                << "\n"
                << std::flush;
      abort(1);
    }
    transports_.clear();
    group_.reset();
    MPI_Finalize();
  }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; should it, end this rank anyway
  }

 private:
  int rank_ = 0;
  int size_ = 1;
  std::shared_ptr<mpi::MpiProcessGroup> group_;
  MPI_Comm transport_comm_ = MPI_COMM_NULL;
  std::vector<std::shared_ptr<mpi::MpiTransport>> transports_;
};

}  // namespace

MpiSession& MpiSession::start() {
  static Session session;  // MPI_Init_thread on the first call only
  return session;
}

#else  // no MPI in this build

bool mpi_support_built() {
  return false;
}

bool mpi_initialized() {
  return false;
}

MpiSession& MpiSession::start() {
  throw FieldError("launcher", "mpi: " + std::string(kMpiNotBuilt));
}

#endif

}  // namespace pipeplan
