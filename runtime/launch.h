// Whether `pipeplan run` is one rank of a multi-process run (docs/design/runtime.md, "Multi-process
// runs"): asked for (launcher mpi), refused (none), or detected (auto, the default) from the
// variables that mpirun, MPICH-style launchers and Slurm's srun set for every rank they start.
// Nothing here needs MPI: detection decides whether MPI is initialised at all.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace pipeplan {

enum class Launcher { none, mpi, automatic };

inline constexpr std::string_view kMpiNotBuilt =
    "MPI support is not built into this pipeplan (CMake found no MPI: install libopenmpi-dev and "
    "openmpi-bin, then configure again)";

// "none", "mpi", "auto"; throws FieldError("launcher", ...) otherwise.
Launcher parse_launcher(std::string_view text);

struct LaunchEnvironment {
  int ranks = 1;         // tasks the launcher started (1: none detected)
  std::string variable;  // what said so, e.g. "OMPI_COMM_WORLD_SIZE=4"; empty when none
};

using EnvironmentReader = std::function<const char*(const char* name)>;

// The first of OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMI_SIZE (MPICH, Intel MPI; Slurm with
// --mpi=pmi2), SLURM_STEP_NUM_TASKS and SLURM_NTASKS (srun) that holds a positive number.
LaunchEnvironment detect_launch_environment(const EnvironmentReader& getenv);
LaunchEnvironment detect_launch_environment();  // from the process environment

// Whether to run as one rank under MPI: launcher mpi always, none never, auto when the
// environment shows more than one rank. Throws FieldError("launcher", ...) when MPI is needed and
// `mpi_built` is false, naming the variable that showed the ranks.
bool runs_under_mpi(Launcher launcher, const LaunchEnvironment& environment, bool mpi_built);

}  // namespace pipeplan
