// `pipeplan run`: its options and the run itself, either in one process that drives every plan
// device (tools/cmd_run.cpp) or as one rank of a multi-process run, one rank per plan device,
// under mpirun or srun (MPI) or a torchrun-style launcher (env: a TCP rendezvous at
// MASTER_ADDR:MASTER_PORT) (tools/run_ranks.cpp, docs/design/runtime.md "Multi-process runs").
// All go through the same run_cpu / run_cuda; a rank differs only in RunRanks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/graph/taskgraph.h"
#include "runtime/executor.h"
#include "runtime/gpu_plugin.h"
#include "runtime/launch.h"
#include "runtime/mpi/mpi_session.h"
#include "runtime/process_group.h"
#include "runtime/transport.h"

namespace pipeplan {

struct RunCommand;

// How this process takes part in the run.
struct RunRanks {
  MpiSession* session = nullptr;        // MPI only: its transport (CPU runs)
  std::shared_ptr<ProcessGroup> group;  // this rank and the others; null: one process
  // Test-only fault injection (PIPEPLAN_TEST_FAULT, tools/run_ranks.cpp); may be empty.
  std::function<std::unique_ptr<Transport>(std::unique_ptr<Transport>)> wrap_transport;
  std::function<void(int node)> before_node;
  std::function<void(const RunCommand&)> before_outputs;  // rank 0, before it writes them

  bool prints() const { return group == nullptr || group->rank() == 0; }
  // As one rank, every rank says whether its part of a set-up step failed (`error`) and all
  // throw the same AgreedError if one did; in one process, rethrows `error` as an Error.
  void agree(const std::optional<std::string>& error, std::string_view what,
             std::chrono::milliseconds timeout) const;
};

// The runtime builds meta.model and feeds it meta.mbs x meta.seq tokens: a plan whose pipeline
// messages are of another shape (its meta edited, or its nodes another plan's) would train a model
// its times and bytes do not describe. Throws naming the first such send (`run`, `validate`).
void check_message_shapes(const TaskGraph& plan, const std::string& plan_name);

struct RunCommand {
  std::string plan_path;
  std::string backend = "cpu";
  int steps = 1;
  std::uint64_t seed = 1;
  bool json = false;
  std::string trace;
  int timeout_ms = 60000;
  double max_host_gib = 8;
  int emulate = 0;
  std::string gpu;
  int gemm_candidates = 1;  // cuda: cuBLASLt answers timed per GEMM shape
  std::string launcher = "auto";
  std::string transport_kind = "auto";  // --transport (cuda): auto, device-local, nccl

  // Chooses one process or one rank (--launcher, the MPI/Slurm or torchrun environment) and runs.
  int run() const;
  // Loads, validates and checks the plan against the options (`as_rank`: as one rank; `writes`:
  // this process writes the outputs, --trace, which is checked where it will be written: rank 0's
  // node alone under a multi-process launch).
  TaskGraph load_and_check(bool as_rank, bool writes = true) const;
  int run_cpu(TaskGraph plan, const RunRanks& ranks) const;
  int run_cuda(TaskGraph plan, const RunRanks& ranks) const;
  // The options every rank must share, with the plan: ranks compare a fingerprint of both.
  std::string shared_options() const;
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms); }
  GpuTransport gpu_transport() const;  // --transport, parsed (throws naming the option)

 private:
  std::string header(const TaskGraph& plan, const std::string& backend_name,
                     const std::string& transport_name) const;
  void check_host_memory(const TaskGraph& plan, int rank) const;  // rank -1: one process
  ExecutorOptions executor_options(const RunRanks& ranks) const;
  // Every step's measured makespan goes to `makespans_us` when given.
  StepResult run_steps(Executor& executor, nlohmann::json& rows, const RunRanks& ranks,
                       const std::function<void()>& before_step,
                       std::vector<double>* makespans_us = nullptr) const;
  void write_trace(const TaskGraph& plan, const StepResult& last, const std::string& note) const;
  // After the last step: rank 0 (or the one process) runs `write` (the trace, the report), then,
  // as one rank, every rank agrees on whether it succeeded (bounded by the timeout): a failure
  // there ends every rank non-zero, rank 0 printing it.
  void write_outputs(const RunRanks& ranks, const std::function<void()>& write) const;
};

// tools/run_ranks.cpp: this process as one rank of `environment`'s ranks; MPI_Init happens here.
// Returns the exit status (every rank non-zero when the run failed; rank 0 printed why).
int run_under_mpi(const RunCommand& command, const LaunchEnvironment& environment);
// tools/run_ranks.cpp: this process as one rank of a torchrun-style launch (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT; runtime/tcp/tcp_process_group.h). GPU runs only: a CPU
// run is refused, pointing at mpirun. Returns the exit status as run_under_mpi; a rank that ends
// the job because another is missing exits from inside (non-zero).
int run_under_env(const RunCommand& command, const LaunchEnvironment& environment);

}  // namespace pipeplan
