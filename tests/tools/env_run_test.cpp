// `pipeplan run` under a torchrun-style launch (--launcher env, docs/design/runtime.md
// "Multi-process runs"), as torchrun starts it: four pipeplan processes with RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR=127.0.0.1 and MASTER_PORT (a free port) set. Without a GPU a run stops at
// loading the CUDA module, after the rendezvous and the set-up agreement: what is checked here is
// everything up to that point and every failure rule. A CPU run is refused pointing at mpirun; a
// bad variable is one line naming it; both launchers' variables under auto are refused.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli_support.h"
#include "tests/tcp_support.h"

namespace pipeplan {
namespace {

using testing::CliResult;

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
    ++n;
  return n;
}

struct RankRun {
  int status = -1;  // the exit code; 128 + N after signal N
  std::string out;  // stdout and stderr
};

// One pipeplan process of a launch: its RANK (LOCAL_RANK alike) and WORLD_SIZE, variables before
// the command, the command's arguments, and seconds it starts after the others.
struct Process {
  int rank = 0;
  int world_size = 1;
  std::string env;
  std::string args;
  int delay_s = 0;
};

class EnvRunCli : public testing::TinyPlanTest {
 protected:
  // The processes at once, each under a hard limit, meeting at 127.0.0.1:port.
  std::vector<RankRun> launch_processes(const std::vector<Process>& processes, int port) {
    std::ostringstream script;
    for (std::size_t i = 0; i < processes.size(); ++i) {
      const Process& p = processes[i];
      const std::string out = path("out." + std::to_string(i));
      script << "(sleep " << p.delay_s << "; env RANK=" << p.rank << " WORLD_SIZE=" << p.world_size
             << " LOCAL_RANK=" << p.rank << " MASTER_ADDR=127.0.0.1 MASTER_PORT=" << port << " "
             << p.env << " timeout -k 5 90 " << testing::shell_quote(testing::pipeplan_binary())
             << " " << p.args << " > " << testing::shell_quote(out) << " 2>&1; echo $? > "
             << testing::shell_quote(out + ".status") << ") & ";
    }
    script << "wait";
    const CliResult shell = testing::run_shell(script.str());
    EXPECT_EQ(shell.status, 0) << shell.out;
    std::vector<RankRun> runs(processes.size());
    for (std::size_t i = 0; i < processes.size(); ++i) {
      const std::string out = path("out." + std::to_string(i));
      std::ifstream text(out);
      runs[i].out.assign(std::istreambuf_iterator<char>(text), {});
      std::ifstream(out + ".status") >> runs[i].status;
    }
    return runs;
  }

  // `world` pipeplan processes at once, rank r with `args` + extra[r].
  std::vector<RankRun> launch(int world, const std::string& args,
                              const std::vector<std::string>& extra = {},
                              const std::string& env = "", int world_size = -1, int port = -1) {
    std::vector<Process> processes;
    processes.reserve(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      processes.push_back(
          {r, world_size < 0 ? world : world_size, env,
           args + " " +
               (r < static_cast<int>(extra.size()) ? extra[static_cast<std::size_t>(r)] : ""),
           0});
    }
    return launch_processes(processes, port < 0 ? testing::free_port() : port);
  }

  // The CUDA run of this test's plan, with a CUDA module that does not exist: every rank fails
  // alike at loading it, after the set-up agreed.
  std::string cuda_args() const { return "run " + plan_ + " --backend cuda --timeout-ms 5000"; }
  static std::string no_module() { return "PIPEPLAN_CUDA_PLUGIN=/nonexistent/libpipeplan_cuda.so"; }
};

TEST_F(EnvRunCli, FourRanksMeetAgreeAndRankZeroAloneReportsTheSharedError) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<RankRun> runs = launch(4, cuda_args(), {}, no_module());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  const std::string& zero = runs[0].out;
  EXPECT_NE(runs[0].status, 0) << zero;
  EXPECT_EQ(zero.rfind("launcher env: rank 0 of 4 via 127.0.0.1:", 0), 0U) << zero;
  EXPECT_NE(zero.find(" (MASTER_ADDR:MASTER_PORT)\n"), std::string::npos) << zero;
  EXPECT_EQ(count(zero, "pipeplan: error: "), 1) << zero;
  EXPECT_NE(zero.find("/nonexistent/libpipeplan_cuda.so"), std::string::npos) << zero;
  EXPECT_EQ(count(zero, "\n"), 2) << zero;
  for (int r = 1; r < 4; ++r) {
    EXPECT_NE(runs[static_cast<std::size_t>(r)].status, 0) << "rank " << r;
    EXPECT_EQ(runs[static_cast<std::size_t>(r)].out, "") << "rank " << r;
  }
}

// Two ranks with one LOCAL_RANK on one host would take one GPU: refused after the rendezvous,
// rank 0 alone saying so, every rank exiting non-zero.
TEST_F(EnvRunCli, TwoRanksOfOneNodeWithOneLocalRankAreRefused) {
  const std::vector<RankRun> runs = launch(4, cuda_args(), {}, no_module() + " LOCAL_RANK=1");
  const std::string& zero = runs[0].out;
  EXPECT_NE(runs[0].status, 0) << zero;
  EXPECT_EQ(count(zero, "pipeplan: error: "), 1) << zero;
  EXPECT_NE(zero.find("pipeplan: error: LOCAL_RANK: ranks 0 and 1 on host "), std::string::npos)
      << zero;
  EXPECT_NE(zero.find(" both have LOCAL_RANK=1 and see the same GPUs"), std::string::npos) << zero;
  for (int r = 1; r < 4; ++r) {
    EXPECT_NE(runs[static_cast<std::size_t>(r)].status, 0) << "rank " << r;
    EXPECT_EQ(runs[static_cast<std::size_t>(r)].out, "") << "rank " << r;
  }
}

// A listening socket on 127.0.0.1 whose next port is free too (torchrun's store stands in).
int listen_before_a_free_port(int& port) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    port = testing::free_port();
    if (port >= 65535) continue;
    const int next = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int held = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port + 1));
    const bool next_free =
        ::bind(next, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    ::close(next);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    if (next_free && ::bind(held, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
        ::listen(held, 4) == 0) {
      return held;
    }
    ::close(held);
  }
  return -1;
}

TEST_F(EnvRunCli, UnderTorchrunsOwnStoreRankZeroListensOnTheNextPort) {
  int port = 0;
  const int store = listen_before_a_free_port(port);
  ASSERT_GE(store, 0) << "no two free ports in a row";
  const std::vector<RankRun> runs =
      launch(4, cuda_args(), {}, no_module() + " TORCHELASTIC_USE_AGENT_STORE=True", -1, port);
  ::close(store);
  EXPECT_EQ(runs[0].out.rfind("launcher env: rank 0 of 4 via 127.0.0.1:" +
                                  std::to_string(port + 1) + " (MASTER_ADDR:MASTER_PORT + 1)\n",
                              0),
            0U)
      << runs[0].out;
  EXPECT_EQ(count(runs[0].out, "pipeplan: error: "), 1) << runs[0].out;
}

TEST_F(EnvRunCli, ARankWithOtherOptionsIsRefusedBeforeTheRun) {
  const std::vector<RankRun> runs = launch(4, cuda_args(), {"", "", "", "--seed 7"}, no_module());
  EXPECT_NE(runs[0].status, 0);
  EXPECT_EQ(count(runs[0].out, "\n"), 1) << runs[0].out;
  EXPECT_EQ(runs[0].out.rfind("pipeplan: error: rank 3 loaded another plan or options than rank 0 "
                              "(" +
                                  plan_ + " fingerprint ",
                              0),
            0U)
      << runs[0].out;
  for (int r = 1; r < 4; ++r) {
    EXPECT_NE(runs[static_cast<std::size_t>(r)].status, 0) << "rank " << r;
    EXPECT_EQ(runs[static_cast<std::size_t>(r)].out, "") << "rank " << r;
  }
}

TEST_F(EnvRunCli, AWorldOfAnotherSizeIsOneLineOnRankZero) {
  const std::vector<RankRun> runs = launch(2, cuda_args(), {}, no_module());
  EXPECT_EQ(runs[0].out,
            "pipeplan: error: plan: 4 devices, but 2 ranks were started (one rank per plan device: "
            "WORLD_SIZE=4, e.g. torchrun --nproc-per-node 4)\n");
  EXPECT_NE(runs[0].status, 0);
  EXPECT_NE(runs[1].status, 0);
  EXPECT_EQ(runs[1].out, "");
}

TEST_F(EnvRunCli, ARankThatDiesEndsEveryOtherRankNamingIt) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<RankRun> runs =
      launch(4, cuda_args(), {}, no_module() + " PIPEPLAN_TEST_FAULT=die-at-setup:2");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  EXPECT_EQ(runs[2].status, 128 + 9) << runs[2].out;  // SIGKILL
  for (const int r : {0, 1, 3}) {
    const RankRun& run = runs[static_cast<std::size_t>(r)];
    EXPECT_NE(run.status, 0) << "rank " << r << ":\n" << run.out;
    EXPECT_NE(run.status, 124) << "rank " << r << " hit the hard limit:\n" << run.out;
    EXPECT_EQ(count(run.out, "\n"), 1) << "rank " << r << ":\n" << run.out;
    EXPECT_NE(run.out.find("pipeplan: error: rank " + std::to_string(r) + ": "), std::string::npos)
        << run.out;
    EXPECT_NE(run.out.find("rank 2 closed its connection (it exited or was killed)"),
              std::string::npos)
        << "rank " << r << ":\n"
        << run.out;
  }
}

TEST_F(EnvRunCli, ACpuRunIsRefusedPointingAtMpirun) {
  const CliResult r = testing::run_pipeplan("run " + plan_ + " --launcher env");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(count(r.out, "\n"), 1) << r.out;
  EXPECT_EQ(r.out.rfind("pipeplan: error: --backend cpu: a CPU run's ranks exchange tensors over "
                        "MPI, which --launcher env does not provide; start CPU runs with mpirun "
                        "-np 4 pipeplan run ",
                        0),
            0U)
      << r.out;
  // Detected (auto) the same, naming what showed the launch; nothing listens or connects.
  const CliResult detected =
      testing::run_pipeplan("run " + plan_ + " --steps 1",
                            "RANK=1 WORLD_SIZE=4 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=9");
  EXPECT_NE(detected.status, 0);
  EXPECT_EQ(count(detected.out, "\n"), 1) << detected.out;
  EXPECT_NE(detected.out.find("which a torchrun-style launch (WORLD_SIZE=4) does not provide"),
            std::string::npos)
      << detected.out;
  // --launcher none runs the whole plan here, whatever the environment says.
  const CliResult none =
      testing::run_pipeplan("run " + plan_ + " --steps 1 --launcher none",
                            "RANK=1 WORLD_SIZE=4 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=9");
  EXPECT_EQ(none.status, 0) << none.out;
  EXPECT_NE(none.out.find("transport in-process"), std::string::npos) << none.out;
}

TEST_F(EnvRunCli, ABadVariableIsOneLineNamingIt) {
  const std::string good = "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=9";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"RANK=two", "RANK: 'two' is not a non-negative decimal integer"},
      {"RANK=2", "RANK: 2 is not below WORLD_SIZE 2"},
      {"WORLD_SIZE=0", "WORLD_SIZE: 0 ranks"},
      {"LOCAL_RANK=-1", "LOCAL_RANK: '-1' is not a non-negative decimal integer"},
      {"LOCAL_RANK=", "LOCAL_RANK: not set"},
      {"MASTER_ADDR='a b'", "MASTER_ADDR: 'a b' is not a host name or an IPv4 or IPv6 address"},
      {"MASTER_PORT=70000", "MASTER_PORT: '70000' is not a port (a decimal integer, 1 to 65535)"},
      // Above the limit, whatever the number's length.
      {"WORLD_SIZE=1000000000",
       "WORLD_SIZE: 1000000000 ranks, above the limit of 1024 (one rank per plan device)"},
      {"RANK=10000000000", "RANK: 10000000000 is not below WORLD_SIZE 2"},
      {"PIPEPLAN_JOB_ID=" + std::string(1025, 'j'),
       "PIPEPLAN_JOB_ID: 1025 bytes, above the limit of 1024"},
  };
  for (const auto& [variable, message] : cases) {
    const CliResult r =
        testing::run_pipeplan("run " + plan_ + " --backend cuda --launcher env --timeout-ms 1000",
                              "env " + good + " " + variable);
    EXPECT_NE(r.status, 0) << variable;
    EXPECT_EQ(count(r.out, "\n"), 1) << variable << ":\n" << r.out;
    EXPECT_EQ(r.out.rfind("pipeplan: error: " + message, 0), 0U) << variable << ":\n" << r.out;
  }
}

TEST_F(EnvRunCli, AutoWithBothLaunchersVariablesAsksWhichOne) {
  const CliResult r = testing::run_pipeplan(
      "run " + plan_ + " --backend cuda",
      "RANK=1 WORLD_SIZE=4 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=9 SLURM_NTASKS=4");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out,
            "pipeplan: error: --launcher: auto: the environment shows both an MPI or Slurm launch "
            "(SLURM_NTASKS=4) and a torchrun-style one (WORLD_SIZE=4 with RANK, MASTER_ADDR, "
            "MASTER_PORT); --launcher mpi or --launcher env says which started this process\n");
}

// Two jobs given one MASTER_PORT, each with its PIPEPLAN_JOB_ID: job B's ranks 1 to 3 reach job
// A's rank 0 first and are refused, each in one line naming both jobs, and job A runs on its own
// ranks, a second later (to the shared error of a missing CUDA module here).
TEST_F(EnvRunCli, TwoJobsOnOnePortDoNotMerge) {
  std::vector<Process> processes;
  processes.reserve(7);
  for (int r = 0; r < 4; ++r)
    processes.push_back({r, 4, no_module() + " PIPEPLAN_JOB_ID=job-a", cuda_args(), r > 0 ? 1 : 0});
  for (int r = 1; r < 4; ++r)
    processes.push_back({r, 4, no_module() + " PIPEPLAN_JOB_ID=job-b", cuda_args(), 0});
  const std::vector<RankRun> runs = launch_processes(processes, testing::free_port());
  for (std::size_t i = 0; i < processes.size(); ++i) {
    const Process& p = processes[i];
    const RankRun& run = runs[i];
    EXPECT_NE(run.status, 0) << i << ":\n" << run.out;
    if (p.env.find("job-b") != std::string::npos) {
      EXPECT_EQ(count(run.out, "\n"), 1) << "job B's rank " << p.rank << ":\n" << run.out;
      EXPECT_NE(run.out.find("pipeplan: error: rendezvous at 127.0.0.1:"), std::string::npos)
          << run.out;
      EXPECT_NE(run.out.find("is of another job (rank 0: PIPEPLAN_JOB_ID='job-a'; this rank: "
                             "PIPEPLAN_JOB_ID='job-b')"),
                std::string::npos)
          << "job B's rank " << p.rank << ":\n"
          << run.out;
    } else if (p.rank == 0) {
      EXPECT_EQ(count(run.out, "pipeplan: error: "), 1) << run.out;
      EXPECT_NE(run.out.find("/nonexistent/libpipeplan_cuda.so"), std::string::npos) << run.out;
    } else {
      EXPECT_EQ(run.out, "") << "job A's rank " << p.rank;
    }
  }
}

// Standard input reaches one rank at most: `run -` as one of several ranks is refused by every
// rank at once, rank 0 saying why.
TEST_F(EnvRunCli, APlanOnStandardInputIsRefusedAsOneOfSeveralRanks) {
  const std::vector<RankRun> runs =
      launch(4, "run - --backend cuda --timeout-ms 5000", {}, no_module());
  EXPECT_NE(runs[0].status, 0);
  EXPECT_EQ(runs[0].out,
            "pipeplan: error: plan '-': each of the 4 ranks reads the plan, but standard input "
            "reaches one of them at most (a torchrun-style launch shares one between its "
            "processes): give the plan as a "
            "file every rank can read (pipeplan run p.json)\n");
  for (int r = 1; r < 4; ++r) {
    EXPECT_NE(runs[static_cast<std::size_t>(r)].status, 0) << "rank " << r;
    EXPECT_EQ(runs[static_cast<std::size_t>(r)].out, "") << "rank " << r;
  }
}

// Ranks given '-' among ranks given the file: the rank given '-' is named on rank 0, in one line,
// whichever rank it is (it used to leave the agreement without a word, or, as rank 0, be misread
// by the others as "0 parts for 4 ranks").
TEST_F(EnvRunCli, APlanOnStandardInputGivenToSomeRanksIsNamed) {
  for (const int odd : {1, 0}) {
    SCOPED_TRACE("rank " + std::to_string(odd) + " given '-'");
    std::vector<Process> processes;
    for (int r = 0; r < 4; ++r) {
      processes.push_back({r, 4, no_module(),
                           "run " + (r == odd ? std::string("-") : plan_) +
                               " --backend cuda --timeout-ms 5000 < " + plan_,
                           0});
    }
    const std::vector<RankRun> runs = launch_processes(processes, testing::free_port());
    EXPECT_EQ(runs[0].out, "pipeplan: error: rank " + std::to_string(odd) +
                               ": plan '-': each of the 4 ranks reads the plan, but standard "
                               "input reaches one of them at most (a torchrun-style launch "
                               "shares one between its processes): give the plan as a file "
                               "every rank can read (pipeplan run p.json)\n");
    for (int r = 0; r < 4; ++r) {
      EXPECT_NE(runs[static_cast<std::size_t>(r)].status, 0) << "rank " << r;
      if (r > 0) {
        EXPECT_EQ(runs[static_cast<std::size_t>(r)].out, "") << "rank " << r;
      }
    }
  }
}

TEST_F(EnvRunCli, EmulationIsRefusedAsOneRank) {
  const std::vector<RankRun> runs = launch(4, cuda_args() + " --emulate 4", {}, no_module());
  EXPECT_NE(runs[0].status, 0);
  EXPECT_EQ(runs[0].out,
            "pipeplan: error: --emulate: runs every stage on one GPU in one process; as one rank "
            "of a multi-process run each rank has a GPU of its own (drop --emulate, or run "
            "without mpirun/srun/torchrun)\n");
  for (int r = 1; r < 4; ++r)
    EXPECT_EQ(runs[static_cast<std::size_t>(r)].out, "") << "rank " << r;
}

}  // namespace
}  // namespace pipeplan
