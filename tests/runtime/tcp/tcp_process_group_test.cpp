// The env launcher's process group (runtime/tcp/tcp_process_group.h) between real processes: each
// test forks its ranks, which meet at 127.0.0.1 on a free port, and checks what every rank
// printed and how it exited. The rendezvous (rank 0 starting last, a wrong WORLD_SIZE, a duplicate
// RANK, a rank that never comes, another protocol version, a stranger on the port), every
// collective and relayed point-to-point message, and the failure rules: an AgreedError printed
// once by rank 0, a killed or hung rank named by every other rank in one line, a corrupted or
// oversized frame refused. Timeouts are 2 to 5 s; the bounds checked are far above them.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "planner/base/error.h"
#include "runtime/launch.h"
#include "runtime/tcp/tcp_process_group.h"
#include "tests/tcp_support.h"

namespace pipeplan::tcp {
namespace {

using std::chrono::milliseconds;
using Env = std::map<std::string, std::string>;

struct Exit {
  int status = -1;  // the exit code; -1 when a signal ended it (signal), -2 when the test killed it
  int signal = 0;
  std::string out;  // stdout and stderr
};

// One forked process per body, stdout and stderr into a pipe; waits at most `limit` for all of
// them (the rest are killed and reported with status -2).
std::vector<Exit> run_processes(const std::vector<std::function<int()>>& bodies,
                                std::chrono::seconds limit = std::chrono::seconds(60)) {
  std::fflush(nullptr);
  std::vector<Exit> exits(bodies.size());
  std::vector<pid_t> pids(bodies.size(), -1);
  std::vector<int> pipes(bodies.size(), -1);
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    std::array<int, 2> fds{};
    if (::pipe(fds.data()) != 0) throw std::runtime_error("pipe");
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork");
    if (pid == 0) {
      ::close(fds[0]);
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      ::close(fds[1]);
      int code = 1;
      try {
        code = bodies[i]();
      } catch (const std::exception& e) {
        std::cerr << "pipeplan: error: " << e.what() << "\n";
      }
      std::cout << std::flush;
      std::cerr << std::flush;
      std::fflush(nullptr);
      std::_Exit(code);
    }
    ::close(fds[1]);
    pids[i] = pid;
    pipes[i] = fds[0];
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::size_t open = bodies.size();
  while (open > 0 && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> fds;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < pipes.size(); ++i) {
      if (pipes[i] >= 0) {
        fds.push_back({pipes[i], POLLIN, 0});
        which.push_back(i);
      }
    }
    if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      std::array<char, 4096> buffer{};
      const ssize_t n = ::read(fds[k].fd, buffer.data(), buffer.size());
      if (n > 0) {
        exits[which[k]].out.append(buffer.data(), static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(pipes[which[k]]);
        pipes[which[k]] = -1;
        --open;
      }
    }
  }
  for (std::size_t i = 0; i < pids.size(); ++i) {
    if (pipes[i] >= 0) {  // still running (or a child of it holds the pipe): the limit passed
      ::kill(pids[i], SIGKILL);
      ::close(pipes[i]);
    }
    int raw = 0;
    ::waitpid(pids[i], &raw, 0);
    if (pipes[i] >= 0) {
      exits[i].status = -2;
    } else if (WIFEXITED(raw)) {
      exits[i].status = WEXITSTATUS(raw);
    } else if (WIFSIGNALED(raw)) {
      exits[i].signal = WTERMSIG(raw);
    }
  }
  return exits;
}

Env rank_env(int rank, int world, int port, int local_rank = -1) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(local_rank < 0 ? rank : local_rank)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}};
}

// A rank as `pipeplan run --launcher env` is one: its environment parsed, the rendezvous, then
// `body` under run_as_rank's rules (which print and end the job as the CLI's ranks do). The socket
// thread ends a process that does not act on a failure after `grace`: a minute, unless a test
// needs it (a hung rank), so that the other tests see the main thread's own handling.
int rank_main(const Env& env, milliseconds timeout,
              const std::function<int(TcpProcessGroup&)>& body,
              milliseconds grace = std::chrono::minutes(1)) {
  TcpOptions options;
  options.launch = parse_env_launch([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  options.timeout = timeout;
  options.end_process_on_failure = true;
  options.failure_grace = grace;
  const std::shared_ptr<TcpProcessGroup> group = TcpProcessGroup::connect(options);
  return run_as_rank(
      *group, [&] { return body(*group); }, timeout);
}

// `world` ranks running `body`; rank r's environment from rank_env unless `envs` gives one.
std::vector<Exit> run_job(int world, milliseconds timeout,
                          const std::function<int(TcpProcessGroup&)>& body,
                          std::vector<Env> envs = {},
                          milliseconds grace = std::chrono::minutes(1)) {
  const int port = testing::free_port();
  if (envs.empty()) {
    for (int r = 0; r < world; ++r)
      envs.push_back(rank_env(r, world, port));
  }
  for (Env& env : envs) {
    if (env.count("MASTER_PORT") == 0) env["MASTER_PORT"] = std::to_string(port);
  }
  std::vector<std::function<int()>> bodies;
  bodies.reserve(envs.size());
  for (const Env& env : envs)
    bodies.emplace_back([=] { return rank_main(env, timeout, body, grace); });
  return run_processes(bodies);
}

int count_lines(const std::string& text, const std::string& prefix) {
  int n = 0;
  for (std::size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at + 1))
    ++n;
  return n;
}

// The rank exited non-zero (not by a signal, not killed by the test) after printing exactly one
// error line that contains `needle`.
void expect_one_line_naming(const Exit& e, const std::string& needle, const std::string& who) {
  EXPECT_EQ(e.signal, 0) << who << ":\n" << e.out;
  EXPECT_NE(e.status, -2) << who << " outlived the test's limit:\n" << e.out;
  EXPECT_NE(e.status, 0) << who << ":\n" << e.out;
  EXPECT_EQ(count_lines(e.out, "pipeplan: error: "), 1) << who << ":\n" << e.out;
  EXPECT_EQ(count_lines(e.out, "\n"), 1) << who << ":\n" << e.out;
  EXPECT_NE(e.out.find(needle), std::string::npos) << who << ":\n" << e.out;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw Error("check failed: " + what);
}

std::string payload(int rank) {
  // Bytes of every value, a NUL among them, and (rank 3) megabytes: partial reads and writes.
  std::string bytes = "rank " + std::to_string(rank) + '\0' + "\xff\x01\x80";
  for (int i = 0; i < 256; ++i)
    bytes.push_back(static_cast<char>(i));
  bytes += std::string(static_cast<std::size_t>(rank == 3 ? 3'000'007 : rank * 1000), 'a');
  return bytes;
}

TEST(TcpProcessGroup, RendezvousThenEveryCollectiveDeliversTheRightBytes) {
  const milliseconds timeout(5000);
  const int port = testing::free_port();
  auto body = [timeout](TcpProcessGroup& group) {
    const int rank = group.rank();
    require(group.size() == 4 && group.local_rank() == rank % 2 && group.name() == "env",
            "rank, size and local rank");
    const std::vector<std::string> gathered = group.gather(payload(rank), "the gather", timeout);
    if (rank == 0) {
      require(gathered.size() == 4, "gather: 4 parts");
      for (int r = 0; r < 4; ++r)
        require(gathered[static_cast<std::size_t>(r)] == payload(r),
                "gather: rank " + std::to_string(r));
    } else {
      require(gathered.empty(), "gather: nothing on the other ranks");
    }
    const std::string big(2'500'000, 'b');
    require(group.broadcast(rank == 0 ? big : "", "the broadcast", timeout) == big, "broadcast");
    const std::vector<std::string> all = group.all_gather(payload(rank), "all_gather", timeout);
    for (int r = 0; r < 4; ++r)
      require(all.at(static_cast<std::size_t>(r)) == payload(r), "all_gather");
    group.barrier("the barrier", timeout);
    // Between two ranks that are not rank 0 (relayed by it), in order; to itself; rank 0's.
    const auto deadline = ProcessGroup::Clock::now() + timeout;
    if (rank == 1) {
      for (int i = 0; i < 20; ++i)
        group.post(3, "message " + std::to_string(i));
      require(group.poll(3, deadline, {}) == std::optional<std::string>("reply"), "reply 3->1");
    }
    if (rank == 3) {
      for (int i = 0; i < 20; ++i) {
        require(group.poll(1, deadline, {}) == "message " + std::to_string(i), "order 1->3");
      }
      group.post(1, "reply");
    }
    if (rank == 2) group.post(0, payload(2));
    if (rank == 0) require(group.poll(2, deadline, {}) == payload(2), "2->0");
    group.post(rank, "to itself");
    require(group.poll(rank, deadline, {}) == "to itself", "to itself");
    // Nothing from a rank that sends nothing: nullopt at the deadline, the idle callback called.
    if (rank != 0) {
      int idles = 0;
      const int silent = rank % 3 + 1;  // 1 -> 2, 2 -> 3, 3 -> 1
      require(!group.poll(silent, ProcessGroup::Clock::now() + milliseconds(100), [&] { ++idles; }),
              "nothing arrives");
      require(idles > 0, "the idle callback runs while poll waits");
    }
    group.agree(std::nullopt, "agreeing", timeout);
    std::cout << "rank " << rank << " ok\n";
    return 0;
  };
  std::vector<std::function<int()>> bodies;
  bodies.reserve(4);
  for (int r = 0; r < 4; ++r) {
    bodies.emplace_back([r, port, timeout, body] {
      // Rank 0 last: the others wait for it.
      if (r == 0) std::this_thread::sleep_for(milliseconds(300));
      return rank_main(rank_env(r, 4, port, r % 2), timeout, body);
    });
  }
  const std::vector<Exit> exits = run_processes(bodies);
  for (int r = 0; r < 4; ++r) {
    const Exit& e = exits[static_cast<std::size_t>(r)];
    EXPECT_EQ(e.status, 0) << "rank " << r << ":\n" << e.out;
    EXPECT_EQ(e.out, "rank " + std::to_string(r) + " ok\n");
  }
}

TEST(TcpProcessGroup, AWorldOfOneNeedsNoPeer) {
  const std::vector<Exit> exits = run_job(1, milliseconds(2000), [](TcpProcessGroup& group) {
    require(group.gather("x", "gather", milliseconds(100)) == std::vector<std::string>{"x"},
            "gather of one");
    return 0;
  });
  EXPECT_EQ(exits[0].status, 0) << exits[0].out;
}

TEST(TcpProcessGroup, AFailureOneRankReportsIsTheSameLineOnRankZeroOnly) {
  const milliseconds timeout(2000);
  const std::vector<Exit> exits = run_job(4, timeout, [timeout](TcpProcessGroup& group) {
    // As `run` agrees on the plan: rank 2 read another one.
    const std::uint64_t mine = group.rank() == 2 ? 7 : 42;
    const std::vector<std::string> all =
        group.all_gather(std::to_string(mine), "the plan's fingerprint", timeout);
    if (all[2] != all[0]) throw AgreedError("rank 2 loaded another plan than rank 0");
    return 0;
  });
  for (int r = 0; r < 4; ++r) {
    const Exit& e = exits[static_cast<std::size_t>(r)];
    EXPECT_EQ(e.status, 1) << "rank " << r << ":\n" << e.out;
    EXPECT_EQ(e.out, r == 0 ? "pipeplan: error: rank 2 loaded another plan than rank 0\n" : "")
        << "rank " << r;
  }
  // The same through agree(): every rank throws "rank 2: ..." and only rank 0 prints it.
  const std::vector<Exit> agreed = run_job(4, timeout, [timeout](TcpProcessGroup& group) {
    std::optional<std::string> error;
    if (group.rank() == 2) error = "plan: 4 devices, but 3 ranks were started";
    group.agree(error, "loading the plan", timeout);
    return 0;
  });
  for (int r = 0; r < 4; ++r) {
    const Exit& e = agreed[static_cast<std::size_t>(r)];
    EXPECT_EQ(e.status, 1) << "rank " << r << ":\n" << e.out;
    EXPECT_EQ(e.out,
              r == 0 ? "pipeplan: error: rank 2: plan: 4 devices, but 3 ranks were started\n" : "")
        << "rank " << r;
  }
}

// A rank that leaves on an error of its own, not agreed, reaches its end-of-run barrier while
// the others agree: its empty part is no answer, said so in one line, never a crash.
TEST(TcpProcessGroup, ARankThatLeftBeforeAnAgreementIsNamedByIt) {
  const milliseconds timeout(3000);
  const std::vector<Exit> exits = run_job(4, timeout, [timeout](TcpProcessGroup& group) {
    if (group.rank() == 2) throw Error("no CUDA device found");
    group.agree(std::nullopt, "loading the CUDA module", timeout);
    return 0;
  });
  for (int r = 0; r < 4; ++r) {
    const Exit& e = exits[static_cast<std::size_t>(r)];
    EXPECT_EQ(e.status, 1) << "rank " << r << ":\n" << e.out;
    EXPECT_EQ(e.out.find("internal error"), std::string::npos) << "rank " << r << ":\n" << e.out;
  }
  EXPECT_EQ(exits[0].out,
            "pipeplan: error: rank 2: left the run before loading the CUDA module (its own error "
            "is on its output)\n");
  EXPECT_EQ(exits[2].out, "pipeplan: error: rank 2: no CUDA device found\n");
}

// A run that succeeded on rank 0 but cannot end together (a rank killed after its work) fails
// with one line saying why, not silently.
TEST(TcpProcessGroup, ARunThatCannotEndTogetherSaysWhy) {
  const milliseconds timeout(2000);
  const std::vector<Exit> exits = run_job(4, timeout, [timeout](TcpProcessGroup& group) {
    group.barrier("the work", timeout);
    if (group.rank() == 2) std::raise(SIGKILL);
    return 0;
  });
  EXPECT_EQ(exits[0].status, 1) << exits[0].out;
  EXPECT_EQ(exits[0].out.rfind("pipeplan: error: rank 0 could not finish: ", 0), 0U)
      << exits[0].out;
  EXPECT_EQ(std::count(exits[0].out.begin(), exits[0].out.end(), '\n'), 1) << exits[0].out;
}

TEST(TcpProcessGroup, ARankKilledInACollectiveEndsEveryOtherRankNamingIt) {
  const milliseconds timeout(2000);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<Exit> exits = run_job(4, timeout, [timeout](TcpProcessGroup& group) {
    if (group.rank() == 2) std::raise(SIGKILL);
    group.gather("share", "the end of step 1", timeout);
    group.answer("outcome", "the end of step 1", timeout);
    return 0;
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(exits[2].signal, SIGKILL);
  // Its connection's end, not a timeout: rank 0 sees it at once and ends the others.
  for (const int r : {0, 1, 3}) {
    expect_one_line_naming(exits[static_cast<std::size_t>(r)],
                           "rank 2 closed its connection (it exited or was killed)",
                           "rank " + std::to_string(r));
  }
  EXPECT_NE(exits[1].out.find("pipeplan: error: rank 1: rank 0 ended the job: rank 2 closed"),
            std::string::npos)
      << exits[1].out;
}

TEST(TcpProcessGroup, RankZeroKilledEndsEveryOtherRankNamingIt) {
  const milliseconds timeout(2000);
  const std::vector<Exit> exits = run_job(4, timeout, [timeout](TcpProcessGroup& group) {
    if (group.rank() == 0) std::raise(SIGKILL);
    group.barrier("the start of step 1", timeout);
    return 0;
  });
  EXPECT_EQ(exits[0].signal, SIGKILL);
  for (const int r : {1, 2, 3}) {
    expect_one_line_naming(exits[static_cast<std::size_t>(r)], "rank 0 closed its connection",
                           "rank " + std::to_string(r));
  }
}

TEST(TcpProcessGroup, AHungRankIsNamedByEveryRankAndEndedToo) {
  const milliseconds timeout(2000);
  const std::vector<Exit> exits = run_job(
      4, timeout,
      [timeout](TcpProcessGroup& group) {
        if (group.rank() == 2) std::this_thread::sleep_for(std::chrono::hours(1));
        // As the step exchange: the others wait for rank 0's verdict longer than rank 0 waits.
        group.gather("share", "the end of step 1", timeout);
        group.answer("outcome", "the end of step 1", timeout);
        return 0;
      },
      {}, milliseconds(1000));
  // Rank 0 times out, prints and ends the job; the others (the hung one too, from its socket
  // thread) print the same cause.
  for (int r = 0; r < 4; ++r) {
    expect_one_line_naming(exits[static_cast<std::size_t>(r)],
                           "rank 2 did not reach the end of step 1 within 2000 ms",
                           "rank " + std::to_string(r));
  }
  EXPECT_NE(exits[2].out.find("pipeplan: error: rank 2: rank 0 ended the job: "), std::string::npos)
      << exits[2].out;
}

TEST(TcpProcessGroup, AWrongWorldSizeIsRefusedNamingIt) {
  const int port = testing::free_port();
  std::vector<Env> envs;
  envs.reserve(4);
  for (int r = 0; r < 4; ++r)
    envs.push_back(rank_env(r, r == 3 ? 5 : 4, port));
  const std::vector<Exit> exits = run_job(
      4, milliseconds(5000), [](TcpProcessGroup&) { return 0; }, envs);
  const std::string why = "has WORLD_SIZE=5, rank 0 has WORLD_SIZE=4";
  expect_one_line_naming(exits[0], why, "rank 0");
  expect_one_line_naming(exits[3], "rank 0 ended it: the process with RANK=3", "rank 3");
  EXPECT_NE(exits[3].out.find(why), std::string::npos) << exits[3].out;
  // The others were refused too, or (connecting after rank 0 ended) found nobody listening.
  for (const int r : {1, 2})
    expect_one_line_naming(exits[static_cast<std::size_t>(r)], "rendezvous at 127.0.0.1:", "r");
}

TEST(TcpProcessGroup, ADuplicateRankIsRefusedNamingIt) {
  const int port = testing::free_port();
  const std::vector<Env> envs = {rank_env(0, 4, port), rank_env(1, 4, port), rank_env(2, 4, port),
                                 rank_env(2, 4, port)};
  const std::vector<Exit> exits = run_job(
      4, milliseconds(5000), [](TcpProcessGroup&) { return 0; }, envs);
  for (int i = 0; i < 4; ++i) {
    expect_one_line_naming(exits[static_cast<std::size_t>(i)], "two processes have RANK=2",
                           "process " + std::to_string(i));
  }
}

TEST(TcpProcessGroup, ARankThatNeverComesIsNamedAtTheRendezvousDeadline) {
  const int port = testing::free_port();
  const std::vector<Env> envs = {rank_env(0, 4, port), rank_env(1, 4, port), rank_env(2, 4, port)};
  const std::vector<Exit> exits = run_job(
      4, milliseconds(3000), [](TcpProcessGroup&) { return 0; }, envs);
  for (int r = 0; r < 3; ++r) {
    expect_one_line_naming(exits[static_cast<std::size_t>(r)], "rank 3 did not join within 3000 ms",
                           "rank " + std::to_string(r));
  }
}

// Rank 0 may start as late as the timeout: the other ranks' attempts, spaced up to 500 ms apart,
// end with one made after the deadline has passed, so a rank 0 that starts in the last pause
// (here 3650 ms into a 4000 ms timeout, after the attempt at about 3620 ms) is still found.
TEST(TcpProcessGroup, RankZeroStartingInTheLastPauseBeforeTheDeadlineIsFound) {
  const milliseconds timeout(4000);
  const int port = testing::free_port();
  const auto body = [](TcpProcessGroup& group) { return group.size() == 2 ? 0 : 1; };
  const std::vector<Exit> exits =
      run_processes({[&] {
                       std::this_thread::sleep_for(milliseconds(3650));
                       return rank_main(rank_env(0, 2, port), timeout, body);
                     },
                     [&] { return rank_main(rank_env(1, 2, port), timeout, body); }});
  for (std::size_t r = 0; r < exits.size(); ++r)
    EXPECT_EQ(exits[r].status, 0) << "rank " << r << ":\n" << exits[r].out;
}

// Rank 0 whose hard open-file limit holds fewer connections than the job's ranks: it says so, in
// one line, as soon as it is out of descriptors with no connection left to give up (it used to
// give the place of a rank that had connected, its hello unread, to the next one, and at the
// deadline blamed the ranks for not joining); every other rank ends with one line too.
TEST(TcpProcessGroup, RankZeroOutOfDescriptorsSaysSoRatherThanBlameTheRanks) {
  const int port = testing::free_port();
  constexpr int kWorld = 12;
  std::vector<std::function<int()>> bodies;
  bodies.reserve(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    bodies.emplace_back([r, port] {
      if (r == 0) {
        // Room for the listener and five connections beside what is open now.
        int open = 0;
        for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
          static_cast<void>(entry);
          ++open;
        }
        const rlimit files{static_cast<rlim_t>(open + 6), static_cast<rlim_t>(open + 6)};
        if (::setrlimit(RLIMIT_NOFILE, &files) != 0) throw Error("setrlimit");
      }
      return rank_main(rank_env(r, kWorld, port), milliseconds(3000),
                       [](TcpProcessGroup&) { return 0; });
    });
  }
  const std::vector<Exit> exits = run_processes(bodies);
  expect_one_line_naming(exits[0], "rank 0 cannot accept more connections", "rank 0");
  EXPECT_EQ(exits[0].out.find("did not join"), std::string::npos) << exits[0].out;
  for (int r = 1; r < kWorld; ++r) {
    const Exit& e = exits[static_cast<std::size_t>(r)];
    EXPECT_NE(e.status, 0) << "rank " << r << ":\n" << e.out;
    EXPECT_NE(e.status, -2) << "rank " << r << " outlived the test's limit:\n" << e.out;
    EXPECT_EQ(count_lines(e.out, "pipeplan: error: "), 1) << "rank " << r << ":\n" << e.out;
  }
}

// A socket connected to 127.0.0.1:port, retrying while rank 0 is not yet listening.
int connect_raw(int port) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) return fd;
    ::close(fd);
    std::this_thread::sleep_for(milliseconds(25));
  }
  throw Error("cannot connect to rank 0");
}

// The wire format (runtime/tcp/tcp_process_group.h): marker, kind, source, destination, length.
std::string raw_frame(std::uint32_t kind, std::uint32_t source, std::uint32_t destination,
                      std::uint32_t length, const std::string& payload = {}) {
  std::string out;
  for (const std::uint32_t v : {0x4E4C5050U, kind, source, destination, length}) {
    for (int shift = 0; shift < 32; shift += 8)
      out.push_back(static_cast<char>((v >> shift) & 0xFFU));
  }
  return out + payload;
}

std::string version_payload(std::uint32_t version) {
  std::string out;
  for (int shift = 0; shift < 32; shift += 8)
    out.push_back(static_cast<char>((version >> shift) & 0xFFU));
  return out;
}

void write_raw(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

std::string read_raw(int fd) {
  std::string out;
  std::array<char, 4096> buffer{};
  for (;;) {
    const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
    if (n <= 0) return out;
    out.append(buffer.data(), static_cast<std::size_t>(n));
  }
}

TEST(TcpProcessGroup, AnotherProtocolVersionIsRefusedNamingIt) {
  const int port = testing::free_port();
  const std::vector<std::function<int()>> bodies = {[port] {
    return rank_main(rank_env(0, 2, port), milliseconds(10000), [](TcpProcessGroup&) { return 0; });
  }};
  std::optional<std::vector<Exit>> exits;
  std::thread job([&] { exits = run_processes(bodies); });
  const int fd = connect_raw(port);
  write_raw(fd, raw_frame(10, 1, 2, 4, version_payload(99)));
  const std::string answer = read_raw(fd);
  ::close(fd);
  job.join();
  // Rank 0 told the stranger why, then ended with the same line.
  EXPECT_NE(
      answer.find("speaks rendezvous protocol 99, rank 0 " + std::to_string(kProtocolVersion)),
      std::string::npos)
      << answer;
  ASSERT_GE(answer.size(), 20U);
  EXPECT_EQ(answer[4], '\x02') << "an abort frame";
  expect_one_line_naming(exits->at(0), "the process with RANK=1 (from 127.0.0.1:", "rank 0");
  EXPECT_NE(exits->at(0).out.find("speaks rendezvous protocol 99"), std::string::npos);
}

// A socket bound to a port and connected to that same address (TCP's simultaneous open, which
// the kernel may also make of a rank's connect to a port of its own host) is told from a
// connection to a listener.
TEST(TcpProcessGroup, AConnectionToItselfIsToldApart) {
  const int port = testing::free_port();
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  const int self = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(self, 0);
  const int one = 1;
  ::setsockopt(self, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  ASSERT_EQ(::bind(self, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::connect(self, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_TRUE(connected_to_itself(self));
  ::close(self);

  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  const int client = connect_raw(port);
  EXPECT_FALSE(connected_to_itself(client));
  ::close(client);
  ::close(listener);
}

// A rank's body that only meets the others at a barrier and succeeds.
std::function<int(TcpProcessGroup&)> meet_at_a_barrier(milliseconds timeout) {
  return [timeout](TcpProcessGroup& group) {
    group.barrier("the barrier", timeout);
    return 0;
  };
}

// Three ranks of a job at a barrier, rank 2 a second late; rank 1's process runs `rank_1` with
// the port and the barrier (doing something to rank 0's port before it starts rank 1 itself).
// Every rank must exit 0 without an error line.
void expect_three_ranks_meet(
    milliseconds timeout,
    const std::function<int(int port, const std::function<int(TcpProcessGroup&)>& body)>& rank_1) {
  const int port = testing::free_port();
  const auto body = meet_at_a_barrier(timeout);
  const std::vector<std::function<int()>> bodies = {
      [=] { return rank_main(rank_env(0, 3, port), timeout, body); },
      [=] { return rank_1(port, body); },
      [=] {
        std::this_thread::sleep_for(milliseconds(1000));
        return rank_main(rank_env(2, 3, port), timeout, body);
      }};
  const std::vector<Exit> exits = run_processes(bodies);
  for (std::size_t r = 0; r < exits.size(); ++r) {
    EXPECT_EQ(exits[r].status, 0) << "rank " << r << ":\n" << exits[r].out;
    EXPECT_EQ(exits[r].out.find("pipeplan: error"), std::string::npos) << exits[r].out;
  }
}

// Rank 1's hello of a world of 3, and `extra` after it, on a connection of its own; -1 where it
// could not be sent.
int say_rank_1s_hello(int port, const std::string& extra) {
  const int fd = connect_raw(port);
  const std::string hello = raw_frame(10, 1, 3, 4, version_payload(kProtocolVersion)) + extra;
  if (::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Two jobs given one port, each naming itself (PIPEPLAN_JOB_ID; torchrun's TORCHELASTIC_RUN_ID
// alike): the processes of job B that reach job A's rank 0 are refused, each alone and in one
// line naming both jobs (one with an identity, one without), and job A runs with its own ranks,
// which come later.
TEST(TcpProcessGroup, AProcessOfAnotherJobIsRefusedAloneNamingBoth) {
  const int port = testing::free_port();
  const milliseconds timeout(10000);
  const auto job = [port](int rank, const std::string& id) {
    Env env = rank_env(rank, 3, port);
    if (!id.empty()) env["PIPEPLAN_JOB_ID"] = id;
    return env;
  };
  const auto body = meet_at_a_barrier(timeout);
  const std::vector<std::function<int()>> bodies = {
      [=] { return rank_main(job(0, "A"), timeout, body); },
      [=] { return rank_main(job(1, "B"), timeout, body); },
      [=] { return rank_main(job(2, ""), timeout, body); },
      [=] {
        std::this_thread::sleep_for(milliseconds(1500));
        return rank_main(job(1, "A"), timeout, body);
      },
      [=] {
        std::this_thread::sleep_for(milliseconds(1500));
        return rank_main(job(2, "A"), timeout, body);
      }};
  const std::vector<Exit> exits = run_processes(bodies);
  expect_one_line_naming(exits[1],
                         "rendezvous at 127.0.0.1:" + std::to_string(port) +
                             ": the rank 0 listening there is of another job (rank 0: "
                             "PIPEPLAN_JOB_ID='A'; this rank: PIPEPLAN_JOB_ID='B'): two jobs were "
                             "given one MASTER_ADDR:MASTER_PORT",
                         "job B's rank 1");
  expect_one_line_naming(exits[2],
                         "(rank 0: PIPEPLAN_JOB_ID='A'; this rank: no job identity "
                         "(PIPEPLAN_JOB_ID, TORCHELASTIC_RUN_ID unset))",
                         "rank 2 without a job");
  for (const std::size_t i : {0U, 3U, 4U}) {
    EXPECT_EQ(exits[i].status, 0) << "job A's process " << i << ":\n" << exits[i].out;
    EXPECT_EQ(exits[i].out, "") << "job A's process " << i;
  }
}

// Job A's rank 0 waiting for ranks that never come names the process of another job it refused.
TEST(TcpProcessGroup, RankZeroNamesTheOtherJobWhenItsOwnRanksDoNotCome) {
  const int port = testing::free_port();
  Env a = rank_env(0, 2, port);
  a["TORCHELASTIC_RUN_ID"] = "A";
  Env b = rank_env(1, 2, port);
  b["TORCHELASTIC_RUN_ID"] = "B";
  const milliseconds timeout(2000);
  const std::vector<Exit> exits =
      run_processes({[=] { return rank_main(a, timeout, meet_at_a_barrier(timeout)); },
                     [=] { return rank_main(b, timeout, meet_at_a_barrier(timeout)); }});
  expect_one_line_naming(exits[0],
                         "rank 1 did not join within 2000 ms (not started, or "
                         "MASTER_ADDR/MASTER_PORT differ; a process of another job came: RANK=1 "
                         "from 127.0.0.1:",
                         "rank 0");
  EXPECT_NE(exits[0].out.find(" said it is of job 'B' and was refused)"), std::string::npos)
      << exits[0].out;
  expect_one_line_naming(
      exits[1], "(rank 0: TORCHELASTIC_RUN_ID='A'; this rank: TORCHELASTIC_RUN_ID='B')", "rank 1");
}

// A process that comes after the rendezvous completed (its RANK started twice; or a rank of
// another job without an identity, whose place this job's ranks took) finds nobody listening,
// and says the rendezvous may have completed without it, not only that rank 0 may not be running.
TEST(TcpProcessGroup, AProcessAfterTheRendezvousSaysItMayHaveCompletedWithoutIt) {
  const int port = testing::free_port();
  const milliseconds timeout(10000);
  const auto body = [timeout](TcpProcessGroup& group) {
    group.barrier("the barrier", timeout);
    std::this_thread::sleep_for(milliseconds(2500));  // rank 0 runs on, no longer listening
    return 0;
  };
  const std::vector<Exit> exits =
      run_processes({[=] { return rank_main(rank_env(0, 2, port), timeout, body); },
                     [=] { return rank_main(rank_env(1, 2, port), timeout, body); },
                     [=] {
                       std::this_thread::sleep_for(milliseconds(1000));
                       return rank_main(rank_env(1, 2, port), milliseconds(1000), body);
                     }});
  EXPECT_EQ(exits[0].status, 0) << exits[0].out;
  EXPECT_EQ(exits[1].status, 0) << exits[1].out;
  expect_one_line_naming(
      exits[2], "rank 0 did not accept a connection within 1000 ms (last: ", "the second RANK=1");
  EXPECT_NE(exits[2].out.find("): rank 0 is not running or not at MASTER_ADDR:MASTER_PORT, or its "
                              "rendezvous completed without this rank (RANK=1 started twice, or "
                              "another job's ranks joined it at this address"),
            std::string::npos)
      << exits[2].out;
}

// A rank that joined and went away before the rendezvous completed (killed, say, and started
// again, as a pod restarts) gives its place up: the process started in its place joins, and the
// job runs. Here "rank 1" says hello on a raw connection, closes it, and then runs as rank 1.
TEST(TcpProcessGroup, ARankThatLeftTheRendezvousCanBeStartedAgain) {
  const milliseconds timeout(10000);
  expect_three_ranks_meet(timeout, [=](int port, const auto& body) {
    const int fd = say_rank_1s_hello(port, "");
    if (fd < 0) return 3;
    std::this_thread::sleep_for(milliseconds(300));
    ::close(fd);
    std::this_thread::sleep_for(milliseconds(200));
    return rank_main(rank_env(1, 3, port), timeout, body);
  });
}

// A connection that said rank 1's hello and then more (no rank sends anything before the
// welcome) gives rank 1's place up while the world is still gathering: the real rank 1 joins
// (it was refused as a second RANK=1), and rank 0 does not spin on the unread byte.
TEST(TcpProcessGroup, BytesBeforeTheWelcomeGiveTheRankUp) {
  const milliseconds timeout(10000);
  expect_three_ranks_meet(timeout, [=](int port, const auto& body) {
    const int fd = say_rank_1s_hello(port, "Z");
    if (fd < 0) return 3;
    std::this_thread::sleep_for(milliseconds(300));
    const int status = rank_main(rank_env(1, 3, port), timeout, body);  // the stranger open
    ::close(fd);
    return status;
  });
}

// Two ranks that meet at a barrier, rank 1 held back until `meanwhile` calls its argument (or
// returns): for tests that do something to rank 0's port first. A marker file, named after `what`,
// the process and the port, holds rank 1 back. The ranks' exits; the test fails where the job
// could not be run.
std::optional<std::vector<Exit>> barrier_pair_with_rank_1_held(
    int port, milliseconds timeout, const std::string& what,
    const std::function<void(const std::function<void()>& start_rank_1)>& meanwhile) {
  const auto body = meet_at_a_barrier(timeout);
  const std::string marker =
      (std::filesystem::temp_directory_path() /
       ("pipeplan-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(port)))
          .string();
  std::filesystem::remove(marker);
  const std::vector<std::function<int()>> bodies = {
      [=] { return rank_main(rank_env(0, 2, port), timeout, body); },
      [=] {
        for (int i = 0; i < 500 && !std::filesystem::exists(marker); ++i)
          std::this_thread::sleep_for(milliseconds(10));
        return rank_main(rank_env(1, 2, port), timeout, body);
      }};
  std::optional<std::vector<Exit>> exits;
  std::string job_error;
  std::thread job([&] {
    try {
      exits = run_processes(bodies);
    } catch (const std::exception& e) {
      job_error = e.what();
    }
  });
  const auto start_rank_1 = [&] { std::ofstream(marker) << "go\n"; };
  meanwhile(start_rank_1);
  start_rank_1();  // in case `meanwhile` failed before it did
  job.join();
  std::filesystem::remove(marker);
  if (!exits) ADD_FAILURE() << "the " << what << " job: " << job_error;
  return exits;
}

TEST(TcpProcessGroup, AStrangerOnThePortIsIgnored) {
  const int port = testing::free_port();
  std::string answer;
  const auto exits = barrier_pair_with_rank_1_held(
      port, milliseconds(5000), "stranger", [&](const std::function<void()>& start_rank_1) {
        try {
          const int fd = connect_raw(port);
          write_raw(fd, "GET / HTTP/1.0\r\nHost: x\r\n\r\n");
          start_rank_1();
          answer = read_raw(fd);  // rank 0 closes it without a word
          ::close(fd);
        } catch (const Error& e) {
          ADD_FAILURE() << "the stranger: " << e.what();
        }
      });
  ASSERT_TRUE(exits.has_value());
  EXPECT_EQ(answer, "");
  EXPECT_EQ(exits->at(0).status, 0) << exits->at(0).out;
  EXPECT_EQ(exits->at(1).status, 0) << exits->at(1).out;
}

// Silent connections (more than rank 0 holds for strangers, 4 per rank) do not lock the real
// rank out: the oldest gives its place up, and each is dropped once silent for 2 s.
TEST(TcpProcessGroup, SilentConnectionsDoNotLockARankOut) {
  const int port = testing::free_port();
  std::vector<int> silent;
  silent.reserve(12);
  const auto exits = barrier_pair_with_rank_1_held(
      port, milliseconds(8000), "silent", [&](const std::function<void()>&) {
        try {
          for (int i = 0; i < 12; ++i)
            silent.push_back(connect_raw(port));
        } catch (const Error& e) {
          ADD_FAILURE() << e.what() << " after " << silent.size() << " connections";
        }
      });
  for (const int fd : silent)
    ::close(fd);
  ASSERT_TRUE(exits.has_value());
  EXPECT_EQ(exits->at(0).status, 0) << exits->at(0).out;
  EXPECT_EQ(exits->at(1).status, 0) << exits->at(1).out;
}

TEST(TcpProcessGroup, AnOversizedOrUnmarkedFrameEndsTheGroupWithoutAllocatingIt) {
  for (const bool oversized : {true, false}) {
    const int port = testing::free_port();
    const milliseconds timeout(5000);
    const std::vector<std::function<int()>> bodies = {[=] {
      return rank_main(rank_env(0, 2, port), timeout, [timeout](TcpProcessGroup& group) {
        group.gather("share", "the end of step 1", timeout);
        return 0;
      });
    }};
    std::optional<std::vector<Exit>> exits;
    std::thread job([&] { exits = run_processes(bodies); });
    const int fd = connect_raw(port);
    write_raw(fd, raw_frame(10, 1, 2, 4, version_payload(kProtocolVersion)));
    std::array<char, 20> welcome{};
    ASSERT_EQ(::recv(fd, welcome.data(), welcome.size(), MSG_WAITALL), 20);
    EXPECT_EQ(welcome[4], '\x0b') << "welcome";
    // A header that announces 4 GiB, or one without the marker.
    std::string bad = raw_frame(1, 1, 0, 0xFFFFFFFFU);
    if (!oversized) bad[0] = 'X';
    write_raw(fd, bad);
    read_raw(fd);
    ::close(fd);
    job.join();
    expect_one_line_naming(exits->at(0),
                           oversized ? "rank 1 sent a corrupted frame (4294967295 bytes, above the "
                                       "limit of 1073741824)"
                                     : "rank 1 sent a corrupted frame (no pipeplan marker)",
                           oversized ? "oversized" : "unmarked");
  }
}

TEST(TcpProcessGroup, APortInUseIsRefusedNamingMasterPort) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);
  TcpOptions options;
  options.launch.world_size = 2;
  options.launch.address = "127.0.0.1";
  options.launch.port = port;
  options.timeout = milliseconds(1000);
  try {
    TcpProcessGroup::connect(options);
    FAIL() << "listened on a port in use";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "MASTER_PORT: 127.0.0.1:" + std::to_string(port) +
                  " is in use (by another job's rank 0, a second process given RANK=0, torchrun's "
                  "store or "
                  "another program; "
                  "PIPEPLAN_MASTER_PORT set to a free port on every rank chooses another)");
  }
  ::close(fd);
}

// A job of two ranks at `port`, each given its own MASTER_ADDR (the name as each host sees it).
std::vector<Env> two_ranks_at(int port, const std::string& rank0, const std::string& rank1) {
  std::vector<Env> envs = {rank_env(0, 2, port), rank_env(1, 2, port)};
  envs[0]["MASTER_ADDR"] = rank0;
  envs[1]["MASTER_ADDR"] = rank1;
  return envs;
}

TEST(TcpProcessGroup, RanksMeetOverIpv6Too) {
  const int probe = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  socklen_t length = sizeof(address);
  const bool ipv6 = probe >= 0 &&
                    ::bind(probe, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                    ::getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  if (probe >= 0) ::close(probe);
  if (!ipv6) GTEST_SKIP() << "no IPv6 loopback here";
  const int port = ntohs(address.sin6_port);
  const std::vector<Env> envs = two_ranks_at(port, "::1", "[::1]");
  const milliseconds timeout(5000);
  const std::vector<Exit> exits = run_job(
      2, timeout,
      [timeout, port](TcpProcessGroup& group) {
        group.barrier("the barrier", timeout);
        return group.endpoint() == "[::1]:" + std::to_string(port) ? 0 : 1;
      },
      envs);
  EXPECT_EQ(exits[0].status, 0) << exits[0].out;
  EXPECT_EQ(exits[1].status, 0) << exits[1].out;
}

// Rank 0 listens on every interface: a MASTER_ADDR that it cannot resolve itself (a service
// name before its pod is ready, here a reserved .invalid name) still lets the others, which can
// reach it, join.
TEST(TcpProcessGroup, RankZeroNeedsNoAddressOfItsOwnForMasterAddr) {
  const int port = testing::free_port();
  const std::vector<Env> envs = two_ranks_at(port, "rank-zero.invalid", "127.0.0.1");
  const milliseconds timeout(5000);
  const std::vector<Exit> exits = run_job(2, timeout, meet_at_a_barrier(timeout), envs);
  EXPECT_EQ(exits[0].status, 0) << exits[0].out;
  EXPECT_EQ(exits[1].status, 0) << exits[1].out;
}

// A rank that connects after rank 0 ended the rendezvous (here a second after the others) is
// told why as the others are, instead of finding nobody listening and blaming itself ("RANK=1
// started twice"); a stranger that connects meanwhile (junk, not a hello) is not taken for it;
// rank 0 stays only until the rank came, not to the deadline.
TEST(TcpProcessGroup, ARankComingAfterTheRendezvousEndedIsToldWhy) {
  const milliseconds timeout(20000);
  const int port = testing::free_port();
  const auto body = [](TcpProcessGroup&) { return 0; };
  const auto start = std::chrono::steady_clock::now();
  const std::vector<Exit> exits =
      run_processes({[&] { return rank_main(rank_env(0, 4, port), timeout, body); },
                     [&] {
                       std::this_thread::sleep_for(milliseconds(1000));
                       return rank_main(rank_env(1, 4, port), timeout, body);
                     },
                     [&] { return rank_main(rank_env(2, 4, port), timeout, body); },
                     [&] { return rank_main(rank_env(2, 4, port), timeout, body); },
                     [&] {
                       std::this_thread::sleep_for(milliseconds(500));
                       const int fd = connect_raw(port);
                       const std::string junk = "GET / HTTP/1.0\r\n\r\n";
                       [[maybe_unused]] const ssize_t n =
                           ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
                       std::this_thread::sleep_for(milliseconds(3000));
                       ::close(fd);
                       return 0;
                     }});
  EXPECT_LT(std::chrono::steady_clock::now() - start, timeout / 2);
  for (std::size_t i = 0; i < 4; ++i) {
    expect_one_line_naming(exits[i], "two processes have RANK=2", "process " + std::to_string(i));
  }
}

}  // namespace
}  // namespace pipeplan::tcp
