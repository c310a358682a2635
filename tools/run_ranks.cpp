// `pipeplan run` as one rank of a multi-process run (docs/design/runtime.md, "Multi-process runs"):
// MPI_Init (mpirun, srun) or the TCP rendezvous (a torchrun-style launch), then every rank loads
// and checks the plan and all agree before anything runs (the plan's device count equals the
// world size; every rank's plan and options have rank 0's fingerprint); then the same run as in
// one process, rank r driving plan device r, and rank 0 printing. Errors every rank shares
// (AgreedError) print once, on rank 0; an error only one rank sees (a rank that did not answer in
// time) prints on that rank, naming it. Every rank then ends: cleanly (MPI: drain, MPI_Finalize;
// env: a barrier and a goodbye on every connection; status 1 after a failure), or, when a rank is
// missing, by ending the job (MPI_Abort, which the launcher turns into the end of every rank; env:
// an abort frame to every rank, each of which prints it in one line and exits non-zero).
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/graph/taskgraph.h"
#include "runtime/faulty_transport.h"
#include "runtime/tcp/tcp_process_group.h"
#include "tools/run_command.h"

namespace pipeplan {

namespace {

// PIPEPLAN_TEST_FAULT=KIND:RANK, for the tests only (tests/tools/mpi_run_test.cpp,
// env_run_test.cpp): on rank RANK, `corrupt-size` declares its first message 4 bytes larger than
// it is, `die` kills the process (SIGKILL) at its first node of step 1, `hang` stops at that node
// (sleeps for a day); `die-at-setup` and `hang-at-setup` do the same as soon as the ranks are
// connected, before they load the plan, and `fail-at-setup` throws an error of its own there (not
// agreed with the others); `trace-folder-gone` (rank 0) removes the --trace file's
// folder, when empty, after the last step, before rank 0 writes its outputs there.
void install_test_fault(RunRanks& ranks) {
  const char* spec = std::getenv("PIPEPLAN_TEST_FAULT");
  if (spec == nullptr || *spec == '\0') return;
  const std::string text(spec);
  const auto colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const int rank = colon == std::string::npos ? 0 : std::atoi(text.c_str() + colon + 1);
  if (rank != ranks.group->rank()) return;
  if (kind == "corrupt-size") {
    ranks.wrap_transport = [](std::unique_ptr<Transport> inner) -> std::unique_ptr<Transport> {
      FaultPlan faults;
      faults.corrupt_size = 0;
      return std::make_unique<FaultyTransport>(std::move(inner), faults);
    };
  } else if (kind == "die") {
    ranks.before_node = [](int) { std::raise(SIGKILL); };
  } else if (kind == "hang") {
    ranks.before_node = [](int) { std::this_thread::sleep_for(std::chrono::hours(24)); };
  } else if (kind == "die-at-setup") {
    std::raise(SIGKILL);
  } else if (kind == "hang-at-setup") {
    std::this_thread::sleep_for(std::chrono::hours(24));
  } else if (kind == "fail-at-setup") {
    throw Error("PIPEPLAN_TEST_FAULT: this rank failed on its own at set-up");
  } else if (kind == "trace-folder-gone") {
    ranks.before_outputs = [](const RunCommand& command) {
      std::error_code ignored;
      std::filesystem::remove(std::filesystem::absolute(command.trace, ignored).parent_path(),
                              ignored);
    };
  } else {
    throw Error("PIPEPLAN_TEST_FAULT: unknown fault '" + kind +
                "' (corrupt-size, die, hang, die-at-setup, hang-at-setup, fail-at-setup, "
                "trace-folder-gone)");
  }
}

// How long a rank other than 1 that found rank 0 silent leaves rank 1 to end the job first.
constexpr std::chrono::seconds kRankOneSpeaksFirst{2};

void print_error(const std::string& text) {
  std::cerr << "pipeplan: error: " << text << "\n" << std::flush;
}

// How this launcher starts a world of `devices` ranks, for the messages.
using StartHint = std::string (*)(int devices);

std::string mpi_start_hint(int devices) {
  return "mpirun -np " + std::to_string(devices) + ", srun -n " + std::to_string(devices);
}

std::string env_start_hint(int devices) {
  return "WORLD_SIZE=" + std::to_string(devices) + ", e.g. torchrun --nproc-per-node " +
         std::to_string(devices);
}

// Where a rank's GPU is: its host (name and boot id: containers of one name on two machines are
// two hosts), the GPUs it sees (CUDA_VISIBLE_DEVICES, and the container runtime's
// NVIDIA_VISIBLE_DEVICES: pods of one node each given a GPU) and LOCAL_RANK, of which it takes GPU
// LOCAL_RANK mod the count.
std::string gpu_place(const ProcessGroup& group) {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  std::string boot;
  std::getline(std::ifstream("/proc/sys/kernel/random/boot_id"), boot);
  const auto variable = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value == nullptr ? "" : value);
  };
  return std::string(host.data()) + "\n" + boot + "\n" + variable("CUDA_VISIBLE_DEVICES") + "\n" +
         variable("NVIDIA_VISIBLE_DEVICES") + "\n" + std::to_string(group.local_rank());
}

// Two ranks that would take one GPU (a LOCAL_RANK given twice on a node) are refused before the
// run: each would otherwise drive the whole GPU beside the other, or fail in NCCL.
void check_gpu_places(ProcessGroup& group, std::chrono::milliseconds timeout) {
  const std::vector<std::string> places =
      group.all_gather(gpu_place(group), "the ranks' GPUs", timeout);
  for (std::size_t a = 0; a < places.size(); ++a) {
    for (std::size_t b = a + 1; b < places.size(); ++b) {
      if (places[a] != places[b]) continue;
      const std::string host = printable_text(places[a].substr(0, places[a].find('\n')));
      const std::string local = places[a].substr(places[a].rfind('\n') + 1);
      throw AgreedError("LOCAL_RANK: ranks " + std::to_string(a) + " and " + std::to_string(b) +
                        " on host " + host + " both have LOCAL_RANK=" + local +
                        " and see the same GPUs (a rank takes GPU LOCAL_RANK mod the GPUs it "
                        "sees): give each rank of a node its own LOCAL_RANK");
    }
  }
}

// Load and check on every rank, then agree: the same plan and options everywhere, one rank per
// plan device, and (`check_world`, may be empty) what the launcher itself says of the world.
TaskGraph set_up(const RunCommand& command, ProcessGroup& group,
                 const std::function<void()>& check_world, StartHint start_hint) {
  std::optional<TaskGraph> plan;
  std::optional<std::string> error;
  std::uint64_t hash = 0;
  try {
    // Every rank reads the plan; a launcher gives standard input to one rank at most. A rank
    // given '-' reads nothing and says so through the agreement below, which names it to every
    // rank (ranks given '-' and ranks given a file may differ).
    if (command.plan_path == "-" && group.size() > 1) {
      throw Error("plan '-': each of the " + std::to_string(group.size()) +
                  " ranks reads the plan, but standard input reaches one of them at most (" +
                  (group.name() == "mpi"
                       ? "mpirun forwards it to rank 0 alone"
                       : "a torchrun-style launch shares one between its processes") +
                  "): give the plan as a file every rank can read (pipeplan run p.json)");
    }
    plan = command.load_and_check(true, group.rank() == 0);
    const int devices = plan->meta.devices;
    if (check_world) check_world();
    if (devices != group.size()) {
      throw Error("plan: " + std::to_string(devices) + " devices, but " +
                  std::to_string(group.size()) + (group.size() == 1 ? " rank was" : " ranks were") +
                  " started (one rank per plan device: " + start_hint(devices) + ")");
    }
    hash = fingerprint(plan_to_text(*plan) + command.shared_options());
  } catch (const Error& e) {
    error = e.what();
  }
  group.agree(error, "loading the plan", command.timeout());
  // With the fingerprint, the outputs this rank asks for (the trace as given: ranks on several
  // nodes may each have their own working folder): rank 0 alone writes them.
  const std::string& trace = command.trace;
  const std::vector<std::string> shared =
      group.all_gather(std::to_string(hash) + "\n" + (command.json ? "1" : "0") + "\n" + trace,
                       "the plan's fingerprint", command.timeout());
  std::vector<std::string> hashes;
  std::vector<bool> json;
  std::vector<std::string> traces;
  for (const std::string& part : shared) {
    const std::size_t first = part.find('\n');
    const std::size_t second = first == std::string::npos ? first : part.find('\n', first + 1);
    hashes.push_back(part.substr(0, first));
    json.push_back(first != std::string::npos && part.compare(first + 1, 1, "1") == 0);
    traces.push_back(second == std::string::npos ? std::string() : part.substr(second + 1));
  }
  std::vector<int> differ;
  for (std::size_t r = 1; r < hashes.size(); ++r) {
    if (hashes[r] != hashes[0]) differ.push_back(static_cast<int>(r));
  }
  // Under mpirun's MPMD form (`-np 1 ... : -np 3 ...`) each rank has its own options: an output
  // asked of another rank that rank 0 does not write would be dropped.
  for (std::size_t r = 1; r < shared.size(); ++r) {
    std::string asked;
    if (json[r] && !json[0]) asked = "--json";
    if (!traces[r].empty() && traces[r] != traces[0]) asked = "--trace " + traces[r];
    if (asked.empty()) continue;
    const std::string rank_zero = asked == "--json"   ? std::string("no --json")
                                  : traces[0].empty() ? std::string("no --trace")
                                                      : "--trace " + traces[0];
    throw AgreedError("rank " + std::to_string(r) + " was given " + asked +
                      ", but rank 0, which alone prints the report and writes the trace, was "
                      "given " +
                      rank_zero +
                      " (give --json and --trace to rank 0; the other ranks may have them alike "
                      "or not at all)");
  }
  if (!differ.empty()) {
    throw AgreedError(rank_list(differ) + " loaded another plan or options than rank 0 (" +
                      input_name(command.plan_path) + " fingerprint " + hashes[0] + " on rank 0, " +
                      hashes[static_cast<std::size_t>(differ.front())] + " on rank " +
                      std::to_string(differ.front()) +
                      "): every rank must read the same plan with the same --backend, --steps, "
                      "--seed, --timeout-ms, --gpu, --gemm-candidates and --transport");
  }
  if (command.backend != "cpu") check_gpu_places(group, command.timeout());
  return std::move(*plan);
}

}  // namespace

int run_under_mpi(const RunCommand& command, const LaunchEnvironment& environment) {
  MpiSession& session = MpiSession::start();
  RunRanks ranks;
  ranks.session = &session;
  ranks.group = session.group();
  ProcessGroup& group = *ranks.group;
  int status = 1;
  try {
    install_test_fault(ranks);
    auto check_world = [&] {
      if (environment.ranks > 1 && environment.ranks != group.size()) {
        throw Error("the launcher started " + std::to_string(environment.ranks) + " ranks (" +
                    environment.variable + "), but MPI sees a world of " +
                    std::to_string(group.size()) +
                    " (is this pipeplan's MPI the launcher's? with Slurm: srun --mpi=pmix; "
                    "--launcher none runs one process)");
      }
    };
    TaskGraph plan = set_up(command, group, check_world, mpi_start_hint);
    status = command.backend == "cpu" ? command.run_cpu(std::move(plan), ranks)
                                      : command.run_cuda(std::move(plan), ranks);
  } catch (const AgreedError& e) {
    if (group.rank() == 0) print_error(e.what());
  } catch (const RankZeroSilent& e) {
    // Every rank waiting on a dead or hung rank 0 gives up at about the same moment: rank 1 says
    // so and ends the job (MPI_Abort, in finish below); another says so only if the job is still
    // running a while later (rank 1 is gone too).
    if (group.rank() > 1) std::this_thread::sleep_for(kRankOneSpeaksFirst);
    print_error("rank " + std::to_string(group.rank()) + ": " + e.what());
  } catch (const Error& e) {
    print_error("rank " + std::to_string(group.rank()) + ": " + e.what());
  } catch (const std::exception& e) {
    std::cerr << "pipeplan: internal error: rank " << group.rank() << ": " << e.what() << "\n"
              << std::flush;
    status = 3;
  }
  std::fflush(stdout);
  session.finish(command.timeout());  // MPI_Abort instead when a rank is missing
  return status;
}

int run_under_env(const RunCommand& command, const LaunchEnvironment& environment) {
  if (command.backend == "cpu") {
    // Before the rendezvous: no rank waits for another to say this.
    const std::string started = environment.env_variable.empty()
                                    ? std::string("--launcher env")
                                    : "a torchrun-style launch (" + environment.env_variable + ")";
    // The plan's file and devices where it can be read; not standard input, which every rank
    // of the launch shares and which mpirun would not give its ranks.
    std::string plan = "PLAN.json";
    std::string ranks = "P";
    if (command.plan_path != "-") {
      plan = command.plan_path;
      try {
        ranks = std::to_string(load_plan(plan).meta.devices);
      } catch (const std::exception&) {  // the refusal is the error to report
      }
    }
    throw Error("--backend cpu: a CPU run's ranks exchange tensors over MPI, which " + started +
                " does not provide; start CPU runs with mpirun -np " + ranks + " pipeplan run " +
                plan +
                " --backend cpu (one rank per plan device), or use --backend cuda (NCCL) here; "
                "--launcher none runs the whole plan in this one process");
  }
  tcp::TcpOptions options;
  options.launch = parse_env_launch([](const char* name) { return std::getenv(name); });
  options.timeout = command.timeout();
  options.end_process_on_failure = true;
  const std::shared_ptr<tcp::TcpProcessGroup> group = tcp::TcpProcessGroup::connect(options);
  RunRanks ranks;
  ranks.group = group;
  return tcp::run_as_rank(
      *group,
      [&] {
        install_test_fault(ranks);
        TaskGraph plan = set_up(command, *group, {}, env_start_hint);
        if (group->rank() == 0 && !command.json) {
          std::cout << "launcher env: rank 0 of " << group->size() << " via " << group->endpoint()
                    << " (MASTER_ADDR:" << group->port_source() << ")\n"
                    << std::flush;
        }
        return command.run_cuda(std::move(plan), ranks);
      },
      command.timeout());
}

}  // namespace pipeplan
