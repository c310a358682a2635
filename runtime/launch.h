// Whether `pipeplan run` is one rank of a multi-process run (docs/design/runtime.md, "Multi-process
// runs"): asked for (launcher mpi or env), refused (none), or detected (auto, the default) from the
// variables that mpirun, MPICH-style launchers and Slurm's srun set for every rank they start
// (MPI), or that torchrun, Kubernetes' PyTorchJob and Slurm scripts written for PyTorch set
// (env: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). Nothing here needs MPI or a
// socket: detection decides whether MPI is initialised, or a rendezvous made, at all.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "planner/base/limits.h"

namespace pipeplan {

enum class Launcher { none, mpi, env, automatic };

inline constexpr std::string_view kMpiNotBuilt =
    "MPI support is not built into this pipeplan (CMake found no MPI: install libopenmpi-dev and "
    "openmpi-bin, then configure again)";

// "none", "mpi", "env", "auto"; throws FieldError("launcher", ...) otherwise.
Launcher parse_launcher(std::string_view text);

struct LaunchEnvironment {
  int ranks = 1;         // tasks the MPI or Slurm launcher started (1: none detected)
  std::string variable;  // what said so, e.g. "OMPI_COMM_WORLD_SIZE=4"; empty when none
  // A torchrun-style launch: WORLD_SIZE (1: none detected) when it holds a number above 1 and
  // RANK, MASTER_ADDR and MASTER_PORT are set (not checked further: parse_env_launch does).
  int env_ranks = 1;
  std::string env_variable;  // e.g. "WORLD_SIZE=4"; empty when none
  // The first of the variables above (WORLD_SIZE whether or not the others are set) that is set
  // but not a decimal integer (or, MPI's, above a million ranks), as an error line naming it;
  // empty when none is.
  std::string malformed;
};

using EnvironmentReader = std::function<const char*(const char* name)>;

// MPI: the first of OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMI_SIZE (MPICH, Intel MPI; Slurm
// with --mpi=pmi2), SLURM_STEP_NUM_TASKS and SLURM_NTASKS (srun) that holds a positive number.
// Env: WORLD_SIZE as above. A set variable that is not a decimal integer goes to `malformed`.
LaunchEnvironment detect_launch_environment(const EnvironmentReader& getenv);
LaunchEnvironment detect_launch_environment();  // from the process environment

// Whether to run as one rank under MPI: launcher mpi always, none never, auto when the
// environment shows more than one rank. Throws FieldError("launcher", ...) when MPI is needed and
// `mpi_built` is false, naming the variable that showed the ranks.
bool runs_under_mpi(Launcher launcher, const LaunchEnvironment& environment, bool mpi_built);

enum class LaunchMode { single, mpi, env };

// How to run: none → single; mpi → mpi (as runs_under_mpi); env → env; auto → mpi when only the
// MPI/Slurm variables show more than one rank, env when only the torchrun-style ones do, single
// when neither does. When both do, auto cannot tell which launcher started this process (Slurm's
// variables are inherited by everything a job starts, torchrun's can be exported by a script):
// throws FieldError("launcher", ...) naming both and asking for mpi or env. Auto also throws
// Error(environment.malformed) when a variable it reads is malformed.
LaunchMode choose_launch(Launcher launcher, const LaunchEnvironment& environment, bool mpi_built);

// This process's place in a torchrun-style launch, from its environment.
struct EnvLaunch {
  int rank = 0;         // RANK
  int world_size = 1;   // WORLD_SIZE
  int local_rank = 0;   // LOCAL_RANK: this rank's index on its node (which GPU it takes)
  std::string address;  // MASTER_ADDR: a host name or an IPv4/IPv6 literal ([brackets] removed)
  int port = 0;         // where rank 0 listens: see port_source
  // What chose `port`: "MASTER_PORT"; "MASTER_PORT + 1" when torchrun's agent holds MASTER_PORT
  // (TORCHELASTIC_USE_AGENT_STORE=True: its store listens there); "PIPEPLAN_MASTER_PORT" when
  // that variable is set (on every rank alike), which wins over both.
  std::string port_source = "MASTER_PORT";
  // The job this rank belongs to, where the environment names it: PIPEPLAN_JOB_ID, else
  // TORCHELASTIC_RUN_ID (torchrun's --rdzv-id; its default "none", which every job started
  // without one has, names none); both empty where neither does. Rank 0 refuses a rank of
  // another job (two jobs given one MASTER_ADDR:MASTER_PORT).
  std::string job_id;
  std::string job_id_source;  // "PIPEPLAN_JOB_ID", "TORCHELASTIC_RUN_ID" or empty

  // "127.0.0.1:29500", "[::1]:29500"
  std::string endpoint() const;
  // "PIPEPLAN_JOB_ID='train-7'", or "no job identity (...)": for the messages.
  std::string job() const;
};

// The most ranks an env launch may have: one per plan device.
inline constexpr int kMaxEnvRanks = limits::kMaxDevices;
// The longest job identity (PIPEPLAN_JOB_ID, TORCHELASTIC_RUN_ID) a rank carries in its hello.
inline constexpr std::size_t kMaxJobIdBytes = 1024;

// Reads and checks RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT strictly: each must
// be set; the numbers decimal integers without sign, spaces or leading junk, 0 <= RANK <
// WORLD_SIZE <= kMaxEnvRanks, 0 <= LOCAL_RANK < WORLD_SIZE, 1 <= MASTER_PORT <= 65535; MASTER_ADDR
// a host name (letters, digits, '-', '.', '_') or an IPv4/IPv6 literal. PIPEPLAN_MASTER_PORT,
// when set, is checked as MASTER_PORT and chooses the port (EnvLaunch::port_source). A number
// above its limit is named as such, whatever its length. PIPEPLAN_JOB_ID or TORCHELASTIC_RUN_ID,
// when set, names the job (EnvLaunch::job_id; at most kMaxJobIdBytes). Throws an Error whose
// message starts with the variable's name. MASTER_ADDR is resolved later, by the rendezvous.
EnvLaunch parse_env_launch(const EnvironmentReader& getenv);

// The ranks on this process's node as its launcher gives them: the first set of LOCAL_WORLD_SIZE
// (torchrun), OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI), MPI_LOCALNRANKS (MPICH); 0 when none is.
// Throws an Error naming the variable when it is not a decimal count of 1 to kMaxEnvRanks.
int local_ranks_from_environment(const EnvironmentReader& getenv);
int local_ranks_from_environment();  // from the process environment

}  // namespace pipeplan
