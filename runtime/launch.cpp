#include "runtime/launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <utility>

#include "planner/base/error.h"
#include "planner/base/io.h"

namespace pipeplan {

Launcher parse_launcher(std::string_view text) {
  if (text == "none") return Launcher::none;
  if (text == "mpi") return Launcher::mpi;
  if (text == "env") return Launcher::env;
  if (text == "auto") return Launcher::automatic;
  throw FieldError("launcher",
                   "unknown launcher '" + std::string(text) + "' (none, mpi, env, auto)");
}

namespace {

bool is_set(const char* value) {
  return value != nullptr && *value != '\0';
}

// Above every limit a launch variable has: a longer number reads as this.
constexpr long kHugeDecimal = 1'000'000'000'000L;

// A decimal integer (digits and nothing else, leading zeros allowed), capped at kHugeDecimal;
// -1 otherwise.
long strict_decimal(std::string_view text) {
  if (text.empty()) return -1;
  long value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return -1;
    value = std::min(kHugeDecimal, value * 10 + (c - '0'));
  }
  return value;
}

}  // namespace

LaunchEnvironment detect_launch_environment(const EnvironmentReader& getenv) {
  static constexpr std::array<const char*, 4> kVariables = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                                            "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"};
  LaunchEnvironment environment;
  // A value set but not a decimal count, or above any count of ranks: a launcher set it wrong,
  // or something else did.
  const auto malformed = [&](const char* name, const char* value, const std::string& what) {
    if (environment.malformed.empty()) {
      environment.malformed = std::string(name) + ": '" + value + "' " + what + " (" +
                              field_name("launcher") +
                              " auto reads it for a multi-process launch; " +
                              field_name("launcher") + " none runs in one process)";
    }
  };
  constexpr long kMaxRanks = 1'000'000;
  bool found = false;
  for (const char* name : kVariables) {
    const char* value = getenv(name);
    if (!is_set(value)) continue;
    const long ranks = strict_decimal(value);
    if (ranks < 0) malformed(name, value, "is not a decimal count of ranks");
    if (ranks > kMaxRanks) {
      malformed(name, value,
                "is above the limit of " + std::to_string(kMaxRanks) + " ranks for a launch");
    }
    if (found || ranks < 1 || ranks > kMaxRanks) continue;
    environment.ranks = static_cast<int>(ranks);
    environment.variable = std::string(name) + "=" + value;
    found = true;
  }
  const char* world = getenv("WORLD_SIZE");
  if (is_set(world) && strict_decimal(world) < 0) {
    malformed("WORLD_SIZE", world, "is not a decimal count of ranks");
  }
  if (is_set(world) && is_set(getenv("RANK")) && is_set(getenv("MASTER_ADDR")) &&
      is_set(getenv("MASTER_PORT"))) {
    const long ranks = strict_decimal(world);
    if (ranks > 1) {
      environment.env_ranks = static_cast<int>(std::min(ranks, kMaxRanks));
      environment.env_variable = std::string("WORLD_SIZE=") + world;
    }
  }
  return environment;
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

LaunchMode choose_launch(Launcher launcher, const LaunchEnvironment& environment, bool mpi_built) {
  switch (launcher) {
    case Launcher::none:
      return LaunchMode::single;
    case Launcher::env:
      return LaunchMode::env;
    case Launcher::mpi:
      runs_under_mpi(launcher, environment, mpi_built);  // throws when MPI is not built
      return LaunchMode::mpi;
    case Launcher::automatic:
      break;
  }
  if (!environment.malformed.empty()) throw Error(environment.malformed);
  const bool mpi = environment.ranks > 1;
  const bool env = environment.env_ranks > 1;
  if (mpi && env) {
    throw FieldError("launcher", "auto: the environment shows both an MPI or Slurm launch (" +
                                     environment.variable + ") and a torchrun-style one (" +
                                     environment.env_variable +
                                     " with RANK, MASTER_ADDR, MASTER_PORT); " +
                                     field_name("launcher") + " mpi or " + field_name("launcher") +
                                     " env says which started this process");
  }
  if (env) return LaunchMode::env;
  return runs_under_mpi(launcher, environment, mpi_built) ? LaunchMode::mpi : LaunchMode::single;
}

std::string EnvLaunch::job() const {
  if (job_id_source.empty()) return "no job identity (PIPEPLAN_JOB_ID, TORCHELASTIC_RUN_ID unset)";
  return job_id_source + "='" + printable_text(job_id) + "'";
}

std::string EnvLaunch::endpoint() const {
  const bool v6 = address.find(':') != std::string::npos;
  return (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

namespace {

std::string single_quoted(std::string_view text) {
  return "'" + std::string(text) + "'";
}

class EnvReader {
 public:
  explicit EnvReader(const EnvironmentReader& getenv) : getenv_(getenv) {}

  std::string text(const char* name) const {
    const char* value = getenv_(name);
    if (!is_set(value)) {
      throw Error(std::string(name) +
                  ": not set (a torchrun-style launch sets RANK, WORLD_SIZE, LOCAL_RANK, "
                  "MASTER_ADDR and MASTER_PORT for every process it starts)");
    }
    return value;
  }

  // The value (capped: see strict_decimal) and its text as given, for the messages.
  std::pair<long, std::string> number(const char* name) const {
    std::string value = text(name);
    const long parsed = strict_decimal(value);
    if (parsed < 0) {
      throw Error(std::string(name) + ": " + single_quoted(value) +
                  " is not a non-negative decimal integer");
    }
    return {parsed, std::move(value)};
  }

 private:
  const EnvironmentReader& getenv_;
};

bool host_name_like(std::string_view text) {
  if (text.empty() || text.size() > 253) return false;
  for (const char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_';
    if (!ok) return false;
  }
  return text.front() != '-' && text.front() != '.';
}

bool ipv6_literal(const std::string& text) {
  // A zone ("fe80::1%eth0", "fe80::1%2") is allowed: it names an interface (letters, digits, '-',
  // '.', '_', as interface names have them), which the resolver checks.
  const std::size_t percent = text.find('%');
  const std::string address = text.substr(0, percent);
  if (percent != std::string::npos && !host_name_like(std::string_view(text).substr(percent + 1)))
    return false;
  in6_addr parsed{};
  return inet_pton(AF_INET6, address.c_str(), &parsed) == 1;
}

}  // namespace

EnvLaunch parse_env_launch(const EnvironmentReader& getenv) {
  const EnvReader env(getenv);
  EnvLaunch launch;
  // Each number is checked against its limit before it is narrowed: a value of any length above
  // it is named as given ("WORLD_SIZE: 1000000000 ranks, above the limit of 1024").
  const auto [world, world_text] = env.number("WORLD_SIZE");
  if (world < 1) throw Error("WORLD_SIZE: 0 ranks (at least 1: one per plan device)");
  if (world > kMaxEnvRanks) {
    throw Error("WORLD_SIZE: " + world_text + " ranks, above the limit of " +
                std::to_string(kMaxEnvRanks) + " (one rank per plan device)");
  }
  launch.world_size = static_cast<int>(world);
  const auto [rank, rank_text] = env.number("RANK");
  if (rank >= world) {
    throw Error("RANK: " + rank_text + " is not below WORLD_SIZE " + world_text +
                " (ranks are 0 to WORLD_SIZE - 1)");
  }
  launch.rank = static_cast<int>(rank);
  const auto [local, local_text] = env.number("LOCAL_RANK");
  if (local >= world) {
    throw Error("LOCAL_RANK: " + local_text + " is not below WORLD_SIZE " + world_text);
  }
  launch.local_rank = static_cast<int>(local);
  std::string address = env.text("MASTER_ADDR");
  if (address.size() > 2 && address.front() == '[' && address.back() == ']') {
    address = address.substr(1, address.size() - 2);  // "[::1]"
    if (!ipv6_literal(address)) {
      throw Error("MASTER_ADDR: " + single_quoted("[" + address + "]") +
                  " is not an IPv6 address in brackets");
    }
  } else if (address.find(':') != std::string::npos ? !ipv6_literal(address)
                                                    : !host_name_like(address)) {
    throw Error("MASTER_ADDR: " + single_quoted(address) +
                " is not a host name or an IPv4 or IPv6 address");
  }
  launch.address = address;
  auto port = [&](const char* name) {
    const std::string text = env.text(name);
    const long parsed = strict_decimal(text);
    if (parsed < 1 || parsed > 65535) {
      throw Error(std::string(name) + ": " + single_quoted(text) +
                  " is not a port (a decimal integer, 1 to 65535)");
    }
    return static_cast<int>(parsed);
  };
  launch.port = port("MASTER_PORT");
  if (is_set(getenv("PIPEPLAN_MASTER_PORT"))) {
    launch.port = port("PIPEPLAN_MASTER_PORT");
    launch.port_source = "PIPEPLAN_MASTER_PORT";
  } else if (const char* agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
             agent != nullptr && std::string_view(agent) == "True") {
    // torchrun's agent serves its own store on MASTER_PORT: the next port, on every rank alike.
    if (launch.port == 65535) {
      throw Error(
          "MASTER_PORT: 65535 is torchrun's store (TORCHELASTIC_USE_AGENT_STORE=True) and no port "
          "follows it; set PIPEPLAN_MASTER_PORT to a free port on every rank");
    }
    launch.port += 1;
    launch.port_source = "MASTER_PORT + 1";
  }
  for (const char* name : {"PIPEPLAN_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* value = getenv(name);
    // torchrun's run id is "none" unless --rdzv-id gives one: every such job has it alike.
    if (!is_set(value) ||
        (std::string_view(name) == "TORCHELASTIC_RUN_ID" && std::string_view(value) == "none")) {
      continue;
    }
    const std::string_view id(value);
    if (id.size() > kMaxJobIdBytes) {
      throw Error(std::string(name) + ": " + std::to_string(id.size()) +
                  " bytes, above the limit of " + std::to_string(kMaxJobIdBytes) +
                  (std::string_view(name) == "PIPEPLAN_JOB_ID"
                       ? std::string()
                       : " (set PIPEPLAN_JOB_ID to a shorter name of the job on every rank)"));
    }
    launch.job_id = id;
    launch.job_id_source = name;
    break;
  }
  return launch;
}

int local_ranks_from_environment(const EnvironmentReader& getenv) {
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    const char* value = getenv(name);
    if (!is_set(value)) continue;
    const long ranks = strict_decimal(value);
    if (ranks < 1 || ranks > kMaxEnvRanks) {
      throw Error(std::string(name) + ": " + single_quoted(value) + " is not a rank count (1 to " +
                  std::to_string(kMaxEnvRanks) + ")");
    }
    return static_cast<int>(ranks);
  }
  return 0;
}

int local_ranks_from_environment() {
  return local_ranks_from_environment([](const char* name) { return std::getenv(name); });
}

}  // namespace pipeplan
