#include "runtime/launch.h"

#include <array>
#include <cstdlib>

#include "planner/base/error.h"

namespace pipeplan {

Launcher parse_launcher(std::string_view text) {
  if (text == "none") return Launcher::none;
  if (text == "mpi") return Launcher::mpi;
  if (text == "auto") return Launcher::automatic;
  throw FieldError("launcher", "unknown launcher '" + std::string(text) + "' (none, mpi, auto)");
}

LaunchEnvironment detect_launch_environment(const EnvironmentReader& getenv) {
  static constexpr std::array<const char*, 4> kVariables = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                                            "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"};
  for (const char* name : kVariables) {
    const char* value = getenv(name);
    if (value == nullptr || *value == '\0') continue;
    char* end = nullptr;
    const long ranks = std::strtol(value, &end, 10);
    if (end == value || *end != '\0' || ranks < 1 || ranks > 1'000'000) continue;
    return {static_cast<int>(ranks), std::string(name) + "=" + value};
  }
  return {};
}

LaunchEnvironment detect_launch_environment() {
  return detect_launch_environment([](const char* name) { return std::getenv(name); });
}

bool runs_under_mpi(Launcher launcher, const LaunchEnvironment& environment, bool mpi_built) {
  const bool wanted =
      launcher == Launcher::mpi || (launcher == Launcher::automatic && environment.ranks > 1);
  if (!wanted || mpi_built) return wanted;
  if (launcher == Launcher::mpi) throw FieldError("launcher", "mpi: " + std::string(kMpiNotBuilt));
  throw FieldError("launcher", "started as one of " + std::to_string(environment.ranks) +
                                   " ranks (" + environment.variable + "), but " +
                                   std::string(kMpiNotBuilt) + "; " + field_name("launcher") +
                                   " none runs the whole plan in each of them");
}

}  // namespace pipeplan
