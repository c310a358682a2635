#include "runtime/tcp/tcp_process_group.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "planner/base/error.h"
#include "planner/base/io.h"

namespace pipeplan::tcp {

namespace {

using Clock = ProcessGroup::Clock;
using std::chrono::milliseconds;

// Every frame: marker, kind, source, destination, payload length (little-endian u32 each), then
// the payload.
constexpr std::uint32_t kMarker = 0x4E4C5050;  // "PPLN"
constexpr std::size_t kHeaderBytes = 20;
// The most a refusal or an abort reason carries.
constexpr std::size_t kMaxReasonBytes = 4096;

enum Kind : std::uint32_t {
  kData = 1,   // a message: source rank to destination rank (relayed by rank 0)
  kAbort = 2,  // the source rank ended the job; the payload says why
  kBye = 3,    // the sender is finishing: the end of its connection is expected
  // Rendezvous, to rank 0: source RANK, destination WORLD_SIZE, payload the version (u32) and
  // the job's identity (EnvLaunch::job_id, may be empty).
  kHello = 10,
  kWelcome = 11,   // rendezvous, from rank 0: every rank joined
  kOtherJob = 12,  // rendezvous, from rank 0: it is of another job; the payload says which
};

// A hello's payload: the version, then the job's identity.
constexpr std::size_t kMaxHelloPayload = 4 + kMaxJobIdBytes;

void put32(std::string& out, std::uint32_t value) {
  for (int shift = 0; shift < 32; shift += 8)
    out.push_back(static_cast<char>((value >> shift) & 0xFFU));
}

std::uint32_t get32(const char* bytes) {
  std::uint32_t value = 0;
  for (int i = 3; i >= 0; --i)
    value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

std::string make_frame(std::uint32_t kind, std::uint32_t source, std::uint32_t destination,
                       std::string_view payload) {
  std::string out;
  out.reserve(kHeaderBytes + payload.size());
  put32(out, kMarker);
  put32(out, kind);
  put32(out, source);
  put32(out, destination);
  put32(out, static_cast<std::uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

struct Header {
  std::uint32_t marker = 0;
  std::uint32_t kind = 0;
  std::uint32_t source = 0;
  std::uint32_t destination = 0;
  std::uint32_t length = 0;
};

Header parse_header(const char* bytes) {
  return {get32(bytes), get32(bytes + 4), get32(bytes + 8), get32(bytes + 12), get32(bytes + 16)};
}

std::string system_error(int error) {
  std::array<char, 256> buffer{};
  // GNU strerror_r: returns the message (maybe a static string, not the buffer).
  return strerror_r(error, buffer.data(), buffer.size());
}

std::string limited(std::string text) {
  if (text.size() > kMaxReasonBytes) text.resize(kMaxReasonBytes);
  return text;
}

std::string ms_text(milliseconds timeout) {
  return std::to_string(timeout.count()) + " ms";
}

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, INT_MAX));
}

// A socket this scope owns until release().
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Socket& operator=(Socket&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

void set_no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// getaddrinfo's answer, freed with it. The lookup is bounded by `by`: the system's resolver keeps
// its own timeouts (seconds, and more behind a cluster's search domains), so it runs on a thread
// of its own, left to finish and free its answer alone where `by` passes first.
class Addresses {
 public:
  Addresses(const EnvLaunch& launch, Clock::time_point by) {
    auto lookup = std::make_shared<Lookup>();
    const auto resolve = [lookup, address = launch.address, port = std::to_string(launch.port)] {
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* list = nullptr;
      const int status = getaddrinfo(address.c_str(), port.c_str(), &hints, &list);
      const int error = errno;
      const std::lock_guard lock(lookup->mutex);
      if (lookup->abandoned) {
        if (status == 0) freeaddrinfo(list);
        return;
      }
      lookup->list = status == 0 ? list : nullptr;
      lookup->status = status;
      lookup->error = error;
      lookup->done = true;
      lookup->answered.notify_all();
    };
    try {
      std::thread(resolve).detach();
    } catch (const std::system_error&) {
      resolve();  // no thread to be had: the lookup as the resolver bounds it
    }
    std::unique_lock lock(lookup->mutex);
    if (!lookup->answered.wait_until(lock, by, [&] { return lookup->done; })) {
      lookup->abandoned = true;
      status_ = EAI_AGAIN;
      timed_out_ = true;
      return;
    }
    list_ = lookup->list;
    status_ = lookup->status;
    errno_ = lookup->error;
  }
  Addresses(const Addresses&) = delete;
  Addresses& operator=(const Addresses&) = delete;
  ~Addresses() {
    if (list_ != nullptr) freeaddrinfo(list_);
  }
  // Empty when resolved, else why not ("MASTER_ADDR: cannot resolve ...").
  std::string error(const EnvLaunch& launch) const {
    if (status_ == 0) return {};
    const std::string why = timed_out_              ? "the name service did not answer in time"
                            : status_ == EAI_SYSTEM ? system_error(errno_)
                                                    : gai_strerror(status_);
    return "MASTER_ADDR: cannot resolve '" + launch.address + "' (" + why + ")";
  }
  const addrinfo* begin() const { return list_; }

 private:
  struct Lookup {
    std::mutex mutex;
    std::condition_variable answered;
    bool done = false;
    bool abandoned = false;
    addrinfo* list = nullptr;
    int status = 0;
    int error = 0;
  };
  addrinfo* list_ = nullptr;
  int status_ = 0;
  int errno_ = 0;
  bool timed_out_ = false;
};

std::string peer_address(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "?";
  std::array<char, NI_MAXHOST> host{};
  std::array<char, NI_MAXSERV> port{};
  if (getnameinfo(reinterpret_cast<sockaddr*>(&address), length, host.data(), host.size(),
                  port.data(), port.size(), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  std::string h(host.data());
  // An IPv4 peer of the dual-stack listener, as the IPv4 address it is.
  if (constexpr std::string_view kMapped = "::ffff:";
      h.starts_with(kMapped) && h.find('.') != std::string::npos) {
    h = h.substr(kMapped.size());
  }
  return (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port.data();
}

// Writes all of `bytes` to a non-blocking socket by `deadline`; false (errno set, or ETIMEDOUT)
// otherwise.
bool send_all(int fd, std::string_view bytes, Clock::time_point deadline) {
  while (!bytes.empty()) {
    const ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(sent));
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    if (Clock::now() >= deadline) {
      errno = ETIMEDOUT;
      return false;
    }
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, ms_until(deadline)) < 0 && errno != EINTR) return false;
  }
  return true;
}

enum class ReadStatus { ok, end, timeout, error };

// Reads exactly `size` bytes from a non-blocking socket by `deadline`.
ReadStatus read_exact(int fd, char* out, std::size_t size, Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, out + got, size - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return ReadStatus::end;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return ReadStatus::error;
    if (Clock::now() >= deadline) return ReadStatus::timeout;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, ms_until(deadline)) < 0 && errno != EINTR) return ReadStatus::error;
  }
  return ReadStatus::ok;
}

// Rank 0's listening socket on MASTER_PORT, on every interface (IPv6 and IPv4 where the host has
// IPv6, else IPv4), as torch's TCPStore listens: MASTER_ADDR is where the other ranks find rank 0,
// which need not be an address rank 0 can bind (a service or NAT address), nor one it resolves to
// a reachable address itself (a host name /etc/hosts maps to 127.0.1.1), nor one that resolves yet
// (a Kubernetes service before its pod is ready). Throws an Error naming MASTER_PORT (or
// PIPEPLAN_MASTER_PORT, whichever set the port).
Socket listen_on(const EnvLaunch& launch, int backlog) {
  // Rank 0 holds a connection per rank, and for a moment those of strangers: its soft open-file
  // limit goes up to what that needs, within the hard one (no higher: what runs later, NCCL
  // included, keeps the limit it expects).
  rlimit files{};
  const auto wanted = static_cast<rlim_t>(launch.world_size) + 64;
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < wanted &&
      files.rlim_cur < files.rlim_max) {
    files.rlim_cur = std::min(files.rlim_max, wanted);
    static_cast<void>(::setrlimit(RLIMIT_NOFILE, &files));
  }
  auto try_bind = [&](int family, int& error) {
    Socket s(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (s.get() < 0) {
      error = errno;
      return Socket();
    }
    const int one = 1;
    setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_storage any{};
    socklen_t length = 0;
    if (family == AF_INET6) {
      const int zero = 0;  // IPv4 too, as mapped addresses
      setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      auto* v6 = reinterpret_cast<sockaddr_in6*>(&any);
      v6->sin6_family = AF_INET6;
      v6->sin6_addr = in6addr_any;
      v6->sin6_port = htons(static_cast<std::uint16_t>(launch.port));
      length = sizeof(sockaddr_in6);
    } else {
      auto* v4 = reinterpret_cast<sockaddr_in*>(&any);
      v4->sin_family = AF_INET;
      v4->sin_addr.s_addr = htonl(INADDR_ANY);
      v4->sin_port = htons(static_cast<std::uint16_t>(launch.port));
      length = sizeof(sockaddr_in);
    }
    if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&any), length) != 0 ||
        ::listen(s.get(), backlog) != 0) {
      error = errno;
      return Socket();
    }
    return s;
  };
  int error = 0;
  for (const int family : {AF_INET6, AF_INET}) {
    Socket s = try_bind(family, error);
    if (s.get() >= 0) return s;
    if (error == EADDRINUSE) break;
  }
  const std::string variable =
      launch.port_source == "PIPEPLAN_MASTER_PORT" ? "PIPEPLAN_MASTER_PORT" : "MASTER_PORT";
  if (error == EADDRINUSE) {
    throw Error(
        variable + ": " + launch.endpoint() +
        (launch.port_source == "MASTER_PORT + 1" ? " (MASTER_PORT + 1)" : "") +
        " is in use (by another job's rank 0, a second process given RANK=0, torchrun's store or "
        "another program; "
        "PIPEPLAN_MASTER_PORT set to a free port on every rank chooses another)");
  }
  throw Error(variable + ": rank 0 cannot listen on port " + std::to_string(launch.port) +
              " of its interfaces (" + system_error(error) + ")");
}

std::string rendezvous_at(const EnvLaunch& launch) {
  return "rendezvous at " + launch.endpoint() + ": ";
}

// A connection that has not said hello yet.
struct Pending {
  Socket socket;
  std::string hello;
  std::string from;
  Clock::time_point since;  // accepted
};

// A rank sends its hello as soon as it connects: a connection silent for longer is a stranger
// (a port scan, a health check) and gives its place up.
constexpr milliseconds kHelloWithin(2000);
// Out of descriptors, a connection silent this long already gives its place up.
constexpr milliseconds kSilentAfter(200);

// Rank 0 has ended the rendezvous (`frame`, the abort naming why) while `untold` of its ranks had
// not connected yet. They were started with the others and are on their way: each that comes
// before the deadline is told why too, rather than find nobody listening and take the blame
// itself ("RANK=3 started twice"). Its hello is read before the abort is sent and the connection
// is closed only once the rank has read it (its end closed, or a second), so that closing
// cannot reset the connection under the abort.
void tell_late_ranks(const Socket& listener, int untold, const std::string& frame,
                     Clock::time_point deadline) {
  while (untold > 0 && Clock::now() < deadline) {
    pollfd accepting{listener.get(), POLLIN, 0};
    const int ready = ::poll(&accepting, 1, std::min(ms_until(deadline), 100));
    if (ready < 0 && errno != EINTR) return;
    if (ready <= 0) continue;
    const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
        continue;
      }
      return;
    }
    const Socket late(fd);
    // Reads what the peer sends (a rank: its hello), until it is quiet for `quiet_ms`, its end
    // closed, or `until`; keeps the first bytes, enough for a hello's header.
    std::string first;
    const auto drain = [fd, &first](Clock::time_point until, int quiet_ms) {
      while (Clock::now() < until) {
        pollfd readable{fd, POLLIN, 0};
        if (::poll(&readable, 1, std::min(ms_until(until), quiet_ms)) <= 0) return;
        std::array<char, 2048> buffer{};
        const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
          return;
        }
        if (n > 0 && first.size() < kHeaderBytes) {
          first.append(buffer.data(), std::min(static_cast<std::size_t>(n), kHeaderBytes));
        }
      }
    };
    const Clock::time_point by = std::min(deadline, Clock::now() + milliseconds(1000));
    drain(by, 50);
    if (first.size() < kHeaderBytes) continue;  // not a rank: a rank says hello at once
    const Header h = parse_header(first.data());
    if (h.marker != kMarker || h.kind != kHello) continue;  // a stranger: no rank told
    send_all(fd, frame, by);
    ::shutdown(fd, SHUT_WR);
    drain(std::min(deadline, Clock::now() + milliseconds(1000)), 1000);
    --untold;
  }
}

// Rank 0 of the rendezvous: accept until every other rank said hello, refuse a wrong one.
// Returns the connections by rank (index 0 unused).
std::vector<Socket> rendezvous_as_root(const TcpOptions& options) {
  const EnvLaunch& launch = options.launch;
  const int world = launch.world_size;
  const Clock::time_point deadline = Clock::now() + options.timeout;
  std::vector<Socket> joined(static_cast<std::size_t>(world));
  if (world == 1) return joined;
  Socket listener = listen_on(launch, std::min(world, SOMAXCONN));
  std::vector<Pending> pending;
  int count = 0;
  // The last process of another job that said hello here (its own rank 0 is elsewhere, or was
  // refused this port): named should this job's ranks not all come.
  std::string other_job;
  // Out of descriptors with every pending connection still fresh: accepting waits until their
  // hellos are read.
  Clock::time_point accept_after{};
  // Ends the rendezvous: every rank connected so far hears why, and so does this one.
  // `processes`: how many processes the job has, rank 0's included (where the ranks disagree on
  // WORLD_SIZE, the larger count).
  auto refuse = [&](const std::string& reason, int processes) {
    const std::string frame = make_frame(kAbort, 0, 0, limited(reason));
    const Clock::time_point by = std::min(deadline, Clock::now() + milliseconds(1000));
    for (Socket& s : joined) {
      if (s.get() >= 0) send_all(s.get(), frame, by);
    }
    int told = 1;  // rank 0
    for (Pending& p : pending) {
      send_all(p.socket.get(), frame, by);
      // A pending connection with a whole header is a rank's (any other was dropped on it).
      told += p.hello.size() >= kHeaderBytes ? 1 : 0;
    }
    if (listener.get() >= 0) {
      for (const Socket& s : joined)
        told += s.get() >= 0 ? 1 : 0;
      tell_late_ranks(listener, processes - told, frame, deadline);
    }
    throw Error(rendezvous_at(launch) + reason);
  };
  while (count < world - 1) {
    if (Clock::now() >= deadline) {
      std::vector<int> missing;
      for (int r = 1; r < world; ++r) {
        if (joined[static_cast<std::size_t>(r)].get() < 0) missing.push_back(r);
      }
      refuse(rank_list(missing) + " did not join within " + ms_text(options.timeout) +
                 " (not started, or MASTER_ADDR/MASTER_PORT differ" +
                 (other_job.empty() ? std::string()
                                    : "; a process of another job came: " + other_job) +
                 ")",
             world);
    }
    const Clock::time_point now = Clock::now();
    std::erase_if(pending, [now](const Pending& p) { return now - p.since > kHelloWithin; });
    std::vector<pollfd> fds;
    fds.push_back({listener.get(), static_cast<short>(now < accept_after ? 0 : POLLIN), 0});
    for (const Pending& p : pending)
      fds.push_back({p.socket.get(), POLLIN, 0});
    // The ranks that joined say nothing more until the welcome: a joined socket that becomes
    // readable has closed (its rank died, say, to be started again) or sent what no rank sends
    // (a stranger that said a rank's hello), and gives its rank up either way.
    std::vector<std::pair<int, std::size_t>> watched;  // (rank, index into fds)
    for (int r = 1; r < world; ++r) {
      const Socket& s = joined[static_cast<std::size_t>(r)];
      if (s.get() < 0) continue;
      watched.emplace_back(r, fds.size());
      fds.push_back({s.get(), POLLIN, 0});
    }
    const int ready = ::poll(fds.data(), fds.size(), std::min(ms_until(deadline), 100));
    if (ready < 0 && errno != EINTR) throw Error(rendezvous_at(launch) + system_error(errno));
    if (ready <= 0) continue;
    for (const auto& [r, at] : watched) {
      if ((fds[at].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char byte = 0;
      const ssize_t n = ::recv(fds[at].fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      joined[static_cast<std::size_t>(r)].reset();
      --count;
    }
    fds.resize(1 + pending.size());  // the pending ones' indices stay as they were
    const bool acceptable = (fds[0].revents & POLLIN) != 0;
    // The hellos that arrived first: the connections they came on are ranks, whose places a new
    // connection must not take.
    for (std::size_t i = 0; i < pending.size();) {
      const short events = i + 1 < fds.size() ? fds[i + 1].revents : 0;
      Pending& p = pending[i];
      bool drop = false;
      // The header, then as much payload as it announces.
      const auto hello_bytes = [&p] {
        return p.hello.size() < kHeaderBytes ? kHeaderBytes
                                             : kHeaderBytes + parse_header(p.hello.data()).length;
      };
      if ((events & (POLLIN | POLLHUP | POLLERR)) != 0) {
        std::array<char, 2048> buffer{};
        const std::size_t want = std::min(buffer.size(), hello_bytes() - p.hello.size());
        const ssize_t n = ::recv(p.socket.get(), buffer.data(), want, MSG_DONTWAIT);
        if (n > 0) {
          p.hello.append(buffer.data(), static_cast<std::size_t>(n));
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
          drop = true;  // gone before its hello
        }
      }
      if (!drop && p.hello.size() >= kHeaderBytes) {
        const Header h = parse_header(p.hello.data());
        // Not pipeplan's rendezvous (a port scan, another program): dropped, not an error.
        drop =
            h.marker != kMarker || h.kind != kHello || h.length < 4 || h.length > kMaxHelloPayload;
      }
      if (!drop && p.hello.size() >= kHeaderBytes && p.hello.size() == hello_bytes()) {
        const Header h = parse_header(p.hello.data());
        const std::uint32_t version = get32(p.hello.data() + kHeaderBytes);
        const auto rank = static_cast<std::int64_t>(h.source);
        const std::string who =
            "the process with RANK=" + std::to_string(rank) + " (from " + p.from + ")";
        if (version != kProtocolVersion) {
          refuse(who + " speaks rendezvous protocol " + std::to_string(version) + ", rank 0 " +
                     std::to_string(kProtocolVersion) + " (every rank must run the same pipeplan)",
                 world);
        }
        // A process of another job (two jobs given this port): told so and let go; this job
        // goes on waiting for its own ranks.
        if (const std::string_view job = std::string_view(p.hello).substr(kHeaderBytes + 4);
            job != launch.job_id) {
          send_all(p.socket.get(), make_frame(kOtherJob, 0, 0, limited(launch.job())),
                   std::min(deadline, Clock::now() + milliseconds(1000)));
          other_job = "RANK=" + std::to_string(rank) + " from " + p.from + " said it is of " +
                      (job.empty() ? std::string("no job") : "job '" + printable_text(job) + "'") +
                      " and was refused";
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
          if (i + 1 < fds.size()) fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(i + 1));
          continue;
        }
        if (h.destination != static_cast<std::uint32_t>(world)) {
          refuse(
              who + " has WORLD_SIZE=" + std::to_string(h.destination) +
                  ", rank 0 has WORLD_SIZE=" + std::to_string(world),
              std::max(world, static_cast<int>(std::min<std::uint32_t>(h.destination, 1U << 20))));
        }
        if (rank == 0) refuse("two processes have RANK=0 (this one and " + p.from + ")", world);
        if (rank >= world) {
          refuse(who + ": RANK is not below WORLD_SIZE " + std::to_string(world), world);
        }
        Socket& slot = joined[static_cast<std::size_t>(rank)];
        if (slot.get() >= 0) {
          refuse("two processes have RANK=" + std::to_string(rank) + " (from " +
                     peer_address(slot.get()) + " and " + p.from + ")",
                 world);
        }
        slot = std::move(p.socket);
        ++count;
        drop = true;  // moved
      }
      if (drop) {
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
        if (i + 1 < fds.size()) fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(i + 1));
      } else {
        ++i;
      }
    }
    if (acceptable) {
      for (;;) {
        const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          // Out of descriptors: a connection silent since well before (a rank says hello at
          // once; strangers cannot fill rank 0's table that way) gives its place up; with only
          // fresh ones pending, accepting waits for their hellos; with none, rank 0 says so
          // rather than spin to the deadline and blame the ranks. Otherwise (EAGAIN: none
          // left; a connection that failed) the others keep waiting.
          if (errno == EMFILE || errno == ENFILE) {
            const Clock::time_point at = Clock::now();
            if (!pending.empty() && at - pending.front().since >= kSilentAfter) {
              pending.erase(pending.begin());
              continue;
            }
            if (!pending.empty()) {
              accept_after = at + milliseconds(20);
              break;
            }
            refuse(
                "rank 0 cannot accept more connections (" + system_error(errno) +
                    "; it holds one per rank: raise the open-file limit, ulimit -n, to WORLD_SIZE "
                    "+ 64 or more)",
                world);
          }
          break;
        }
        Socket s(fd);
        // A bound on what strangers can make rank 0 hold: at most four per missing rank, the
        // oldest giving its place up to the newest (a rank says hello at once).
        if (pending.size() >= 4 * static_cast<std::size_t>(world)) pending.erase(pending.begin());
        set_no_delay(fd);
        std::string from = peer_address(fd);
        pending.push_back({std::move(s), {}, std::move(from), Clock::now()});
      }
    }
  }
  listener.reset();  // late or extra processes are refused by the system from now on
  pending.clear();
  const Clock::time_point by = deadline + milliseconds(1000);
  for (int r = 1; r < world; ++r) {
    Socket& s = joined[static_cast<std::size_t>(r)];
    if (!send_all(s.get(), make_frame(kWelcome, 0, static_cast<std::uint32_t>(world), {}), by)) {
      refuse("rank " + std::to_string(r) + " left before the rendezvous completed (" +
                 system_error(errno) + ")",
             world);
    }
  }
  return joined;
}

// Any other rank: connect to rank 0 until the deadline, say hello, wait for the welcome.
Socket rendezvous_as_peer(const TcpOptions& options) {
  const EnvLaunch& launch = options.launch;
  const Clock::time_point start = Clock::now();
  const Clock::time_point connect_by = start + options.timeout;
  // Rank 0 may start up to `timeout` after this rank and then wait as long for the others.
  const Clock::time_point welcome_by = start + 2 * options.timeout + milliseconds(1000);
  const std::string hello = [&] {
    std::string payload;
    put32(payload, kProtocolVersion);
    payload += launch.job_id;
    return make_frame(kHello, static_cast<std::uint32_t>(launch.rank),
                      static_cast<std::uint32_t>(launch.world_size), payload);
  }();
  std::string last_error;
  bool resolved = false;
  milliseconds pause(20);
  // The pauses between attempts grow to 500 ms: one last attempt is made once the deadline has
  // passed (with a short time of its own to connect), so a rank 0 that starts in the last pause
  // before it is still found.
  bool last_attempt = false;
  for (;;) {
    if (last_attempt) {
      if (!resolved) throw Error(last_error + ", for " + ms_text(options.timeout));
      // Rank 0 stops listening once its rendezvous has completed: a rank that comes after that
      // finds nobody, as it does where rank 0 never started.
      throw Error(
          rendezvous_at(launch) + "rank 0 did not accept a connection within " +
          ms_text(options.timeout) + " (last: " + last_error +
          "): rank 0 is not running or not at MASTER_ADDR:" + launch.port_source +
          ", or its rendezvous completed without this rank (RANK=" + std::to_string(launch.rank) +
          " started twice, or another job's ranks joined it at this address: give each "
          "job its own MASTER_PORT, or PIPEPLAN_JOB_ID)");
    }
    const Clock::time_point now = Clock::now();
    last_attempt = now >= connect_by;
    const Clock::time_point attempt_by = std::max(connect_by, now + milliseconds(100));
    Socket s;
    {
      const Addresses addresses(launch, attempt_by);
      last_error = addresses.error(launch);
      for (const addrinfo* a = addresses.begin(); a != nullptr && s.get() < 0; a = a->ai_next) {
        resolved = true;
        Socket attempt(::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (attempt.get() < 0) {
          last_error = system_error(errno);
          continue;
        }
        int error = 0;
        if (::connect(attempt.get(), a->ai_addr, a->ai_addrlen) != 0) {
          error = errno;
          if (error == EINPROGRESS || error == EINTR) {
            pollfd p{attempt.get(), POLLOUT, 0};
            const int ready =
                ::poll(&p, 1, ms_until(std::min(attempt_by, Clock::now() + pause * 50)));
            socklen_t length = sizeof(error);
            error =
                ready > 0 && getsockopt(attempt.get(), SOL_SOCKET, SO_ERROR, &error, &length) == 0
                    ? error
                    : ETIMEDOUT;
          }
        }
        if (error == 0 && connected_to_itself(attempt.get())) {
          // It holds the port rank 0 is to listen on: let it go and try again.
          last_error = "connected to itself (nothing listening on MASTER_PORT yet)";
          continue;
        }
        if (error != 0) {
          last_error = system_error(error);
          continue;
        }
        s = std::move(attempt);
      }
    }
    if (s.get() >= 0) {
      set_no_delay(s.get());
      if (!send_all(s.get(), hello, welcome_by)) {
        last_error = "the connection failed: " + system_error(errno);
        s.reset();
      }
    }
    if (s.get() >= 0) {
      std::array<char, kHeaderBytes> header{};
      const ReadStatus status = read_exact(s.get(), header.data(), header.size(), welcome_by);
      if (status == ReadStatus::timeout) {
        throw Error(
            rendezvous_at(launch) + "rank 0 did not complete it within " +
            answer_timeout_text(options.timeout, "a rank did not join, or rank 0 is stuck"));
      }
      if (status == ReadStatus::ok) {
        const Header h = parse_header(header.data());
        if (h.marker != kMarker) {
          throw Error(rendezvous_at(launch) +
                      "the program listening there is not a pipeplan rank 0 (another program on "
                      "MASTER_PORT?)");
        }
        if (h.kind == kWelcome && h.length == 0) return s;
        if ((h.kind == kAbort || h.kind == kOtherJob) && h.length <= kMaxReasonBytes) {
          std::string reason(h.length, '\0');
          if (read_exact(s.get(), reason.data(), reason.size(), welcome_by) == ReadStatus::ok) {
            if (h.kind == kAbort) throw Error(rendezvous_at(launch) + "rank 0 ended it: " + reason);
            throw Error(rendezvous_at(launch) +
                        "the rank 0 listening there is of another job (rank 0: " +
                        printable_text(reason) + "; this rank: " + launch.job() +
                        "): two jobs were given one MASTER_ADDR:" + launch.port_source +
                        " (give each job its own; within one job, set PIPEPLAN_JOB_ID alike on "
                        "every rank)");
          }
        }
        throw Error(rendezvous_at(launch) +
                    "rank 0 answered with a frame this rank cannot read "
                    "(another pipeplan version?)");
      }
      // Closed before answering (rank 0 went away, or is not pipeplan): try again.
      last_error = status == ReadStatus::end ? "rank 0 closed the connection before answering"
                                             : "the connection failed: " + system_error(errno);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, connect_by - Clock::now()));
    pause = std::min(pause * 2, milliseconds(500));
  }
}

}  // namespace

std::shared_ptr<TcpProcessGroup> TcpProcessGroup::connect(const TcpOptions& options) {
  const EnvLaunch& launch = options.launch;
  if (launch.world_size < 1 || launch.rank < 0 || launch.rank >= launch.world_size) {
    throw Error("RANK: " + std::to_string(launch.rank) + " is not below WORLD_SIZE " +
                std::to_string(launch.world_size));
  }
  std::vector<Peer> peers;
  if (launch.rank == 0) {
    std::vector<Socket> joined = rendezvous_as_root(options);
    for (int r = 1; r < launch.world_size; ++r) {
      Peer& peer = peers.emplace_back();
      peer.rank = r;
      peer.fd = joined[static_cast<std::size_t>(r)].release();
    }
  } else {
    Peer& peer = peers.emplace_back();
    peer.rank = 0;
    peer.fd = rendezvous_as_peer(options).release();
  }
  return std::shared_ptr<TcpProcessGroup>(new TcpProcessGroup(options, std::move(peers)));
}

TcpProcessGroup::TcpProcessGroup(TcpOptions options, std::vector<Peer> peers)
    : options_(std::move(options)),
      peers_(std::move(peers)),
      inbox_(static_cast<std::size_t>(options_.launch.world_size)) {
  std::array<int, 2> wake{};
  if (::pipe2(wake.data(), O_NONBLOCK | O_CLOEXEC) != 0) {
    const std::string why = system_error(errno);
    for (Peer& peer : peers_)
      ::close(peer.fd);
    throw Error("process group: cannot make a pipe (" + why + ")");
  }
  wake_read_ = wake[0];
  wake_write_ = wake[1];
  io_ = std::thread([this] { io_loop(); });
}

TcpProcessGroup::~TcpProcessGroup() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake();
  if (io_.joinable()) io_.join();
  for (Peer& peer : peers_) {
    if (peer.fd >= 0) ::close(peer.fd);
  }
  ::close(wake_read_);
  ::close(wake_write_);
}

void TcpProcessGroup::wake() {
  const char byte = 1;
  // A full pipe already wakes the thread.
  [[maybe_unused]] const ssize_t n = ::write(wake_write_, &byte, 1);
}

TcpProcessGroup::Peer* TcpProcessGroup::peer_locked(int rank) {
  for (Peer& peer : peers_) {
    if (peer.rank == rank) return &peer;
  }
  return nullptr;
}

void TcpProcessGroup::queue_locked(Peer& peer, std::string frame) {
  if (peer.dead || peer.shut) return;  // the failure (if it is one) is reported on its own
  peer.out.push_back(std::move(frame));
}

void TcpProcessGroup::fail_locked(const std::string& reason) {
  if (closing_ || failure_) return;
  failure_ = reason;
  failed_at_ = Clock::now();
  changed_.notify_all();
}

void TcpProcessGroup::post(int to, std::string bytes) {
  if (to < 0 || to >= size()) {
    throw Error("process group: no rank " + std::to_string(to) + " in a world of " +
                std::to_string(size()));
  }
  if (bytes.size() > kMaxFrameBytes) {
    throw Error("process group: a message of " + std::to_string(bytes.size()) +
                " bytes is above the limit of " + std::to_string(kMaxFrameBytes) +
                " bytes per message");
  }
  {
    const std::lock_guard lock(mutex_);
    if (to == rank()) {
      inbox_[static_cast<std::size_t>(to)].push_back(std::move(bytes));
      changed_.notify_all();
      return;
    }
    Peer* via = rank() == 0 ? peer_locked(to) : &peers_.front();
    if (via == nullptr) return;
    queue_locked(*via, make_frame(kData, static_cast<std::uint32_t>(rank()),
                                  static_cast<std::uint32_t>(to), bytes));
  }
  wake();
}

std::optional<std::string> TcpProcessGroup::poll(int from, Clock::time_point deadline,
                                                 const Idle& idle) {
  if (from < 0 || from >= size()) {
    throw Error("process group: no rank " + std::to_string(from) + " in a world of " +
                std::to_string(size()));
  }
  std::unique_lock lock(mutex_);
  std::deque<std::string>& queue = inbox_[static_cast<std::size_t>(from)];
  for (;;) {
    if (failure_) {
      const std::string reason = *failure_;
      lock.unlock();
      mark_broken();
      throw GroupTimeout(reason);
    }
    if (!queue.empty()) {
      std::string bytes = std::move(queue.front());
      queue.pop_front();
      return bytes;
    }
    const Clock::time_point now = Clock::now();
    if (now > deadline) return std::nullopt;
    if (idle) {
      changed_.wait_until(lock, std::min(deadline, now + std::chrono::microseconds(500)));
      lock.unlock();
      idle();
      lock.lock();
    } else {
      changed_.wait_until(lock, deadline);
    }
  }
}

void TcpProcessGroup::handle_frame_locked(Peer& peer, std::uint32_t kind, std::uint32_t source,
                                          std::uint32_t destination, std::string payload) {
  const auto world = static_cast<std::uint32_t>(size());
  const auto self = static_cast<std::uint32_t>(rank());
  auto corrupt = [&](const std::string& what) {
    peer.closed = true;
    peer.dead = true;
    peer.out.clear();
    ::shutdown(peer.fd, SHUT_RDWR);
    fail_locked("rank " + std::to_string(peer.rank) + " sent a corrupted frame (" + what + ")");
  };
  switch (kind) {
    case kData: {
      // From rank 0: anything addressed here. To rank 0: from the sender itself, to any rank.
      const bool valid =
          self == 0 ? source == static_cast<std::uint32_t>(peer.rank) && destination < world
                    : destination == self && source < world;
      if (!valid) {
        corrupt("message from rank " + std::to_string(source) + " to rank " +
                std::to_string(destination));
        return;
      }
      if (destination == self) {
        inbox_[source].push_back(std::move(payload));
        changed_.notify_all();
        return;
      }
      if (Peer* to = peer_locked(static_cast<int>(destination)); to != nullptr) {
        queue_locked(*to, make_frame(kData, source, destination, payload));
      }
      return;
    }
    case kAbort: {
      if (source >= world || payload.size() > kMaxReasonBytes) {
        corrupt("an abort from rank " + std::to_string(source));
        return;
      }
      if (self == 0) {  // tell every other rank
        const std::string frame = make_frame(kAbort, source, 0, payload);
        for (Peer& other : peers_) {
          if (&other != &peer) queue_locked(other, frame);
        }
      }
      fail_locked("rank " + std::to_string(source) + " ended the job: " + payload);
      return;
    }
    case kBye:
      peer.bye = true;
      return;
    default:
      corrupt("kind " + std::to_string(kind));
  }
}

void TcpProcessGroup::read_locked(Peer& peer) {
  std::array<char, 65536> buffer{};
  for (int reads = 0; reads < 16 && !peer.closed; ++reads) {
    const ssize_t n = ::recv(peer.fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      const int error = n < 0 ? errno : 0;
      peer.closed = true;
      if (error != 0) {
        peer.dead = true;
        peer.out.clear();
      }
      if (!peer.bye) {
        fail_locked("rank " + std::to_string(peer.rank) + " closed its connection" +
                    (error == 0 || error == ECONNRESET ? std::string(" (it exited or was killed)")
                                                       : " (" + system_error(error) + ")"));
      }
      changed_.notify_all();
      return;
    }
    peer.in.append(buffer.data(), static_cast<std::size_t>(n));
    std::size_t at = 0;
    while (!peer.closed && peer.in.size() - at >= kHeaderBytes) {
      const Header h = parse_header(peer.in.data() + at);
      if (h.marker != kMarker || h.length > kMaxFrameBytes) {
        peer.closed = true;
        peer.dead = true;
        peer.out.clear();
        ::shutdown(peer.fd, SHUT_RDWR);
        fail_locked("rank " + std::to_string(peer.rank) + " sent a corrupted frame (" +
                    (h.marker != kMarker
                         ? std::string("no pipeplan marker")
                         : std::to_string(h.length) + " bytes, above the limit of " +
                               std::to_string(kMaxFrameBytes)) +
                    ")");
        break;
      }
      if (peer.in.size() - at - kHeaderBytes < h.length) break;
      std::string payload = peer.in.substr(at + kHeaderBytes, h.length);
      at += kHeaderBytes + h.length;
      handle_frame_locked(peer, h.kind, h.source, h.destination, std::move(payload));
    }
    if (peer.closed) {
      peer.in.clear();
      return;
    }
    peer.in.erase(0, at);
  }
}

void TcpProcessGroup::write_locked(Peer& peer) {
  while (!peer.out.empty() && !peer.dead) {
    const std::string& frame = peer.out.front();
    const ssize_t sent = ::send(peer.fd, frame.data() + peer.out_offset,
                                frame.size() - peer.out_offset, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (sent < 0) {
      const int error = errno;
      peer.dead = true;
      peer.out.clear();
      if (!peer.bye) {
        fail_locked("rank " + std::to_string(peer.rank) + " closed its connection" +
                    (error == EPIPE || error == ECONNRESET
                         ? std::string(" (it exited or was killed)")
                         : " (" + system_error(error) + ")"));
      }
      return;
    }
    peer.out_offset += static_cast<std::size_t>(sent);
    if (peer.out_offset == frame.size()) {
      peer.out.pop_front();
      peer.out_offset = 0;
    }
  }
}

bool TcpProcessGroup::closed_down_locked() const {
  return std::all_of(peers_.begin(), peers_.end(),
                     [](const Peer& peer) { return peer.dead || (peer.closed && peer.shut); });
}

void TcpProcessGroup::io_loop() {
  std::vector<pollfd> fds;
  std::vector<Peer*> owners;
  for (;;) {
    int wait_ms = -1;
    fds.clear();
    owners.clear();
    {
      const std::lock_guard lock(mutex_);
      if (stop_) return;
      fds.push_back({wake_read_, POLLIN, 0});
      owners.push_back(nullptr);
      for (Peer& peer : peers_) {
        short events = 0;
        if (!peer.closed) events |= POLLIN;
        if (!peer.dead && !peer.out.empty()) events |= POLLOUT;
        if (events == 0) continue;
        fds.push_back({peer.fd, events, 0});
        owners.push_back(&peer);
      }
      if (failure_ && options_.end_process_on_failure && !ending_) {
        wait_ms = std::max(0, ms_until(failed_at_ + options_.failure_grace));
      }
    }
    const int ready = ::poll(fds.data(), fds.size(), wait_ms);
    const int poll_error = ready < 0 ? errno : 0;
    std::optional<std::string> unattended;
    {
      const std::lock_guard lock(mutex_);
      if (stop_) return;
      if (poll_error != 0 && poll_error != EINTR) {
        fail_locked("process group: poll failed (" + system_error(poll_error) + ")");
      }
      if ((fds[0].revents & POLLIN) != 0) {
        std::array<char, 64> drain{};
        while (::read(wake_read_, drain.data(), drain.size()) > 0) {
        }
      }
      for (std::size_t i = 1; ready > 0 && i < fds.size(); ++i) {
        Peer& peer = *owners[i];
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !peer.closed) {
          read_locked(peer);
        }
      }
      // Writes after reads: a relayed frame goes out in the same turn.
      for (Peer& peer : peers_)
        write_locked(peer);
      if (closing_) {
        for (Peer& peer : peers_) {
          if (!peer.dead && !peer.shut && peer.out.empty()) {
            ::shutdown(peer.fd, SHUT_WR);
            peer.shut = true;
          }
        }
      }
      changed_.notify_all();
      if (failure_ && options_.end_process_on_failure && !ending_ &&
          Clock::now() >= failed_at_ + options_.failure_grace) {
        unattended = failure_;
      }
    }
    if (unattended && set_ending()) {
      // Nobody in this process acted on the failure: end it as the launcher's abort would.
      const std::string line =
          "pipeplan: error: rank " + std::to_string(rank()) + ": " + *unattended + "\n";
      std::fflush(stdout);
      [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
      abort(1, *unattended);
    }
  }
}

bool TcpProcessGroup::finish(std::chrono::milliseconds timeout, std::string* why) {
  set_ending();
  const auto failed = [why](std::string text) {
    if (why != nullptr) *why = std::move(text);
    return false;
  };
  if (broken()) return failed("the group broke before the end of the run");
  try {
    end_run(timeout);
  } catch (const Error& e) {
    return failed(e.what());
  }
  {
    const std::lock_guard lock(mutex_);
    if (failure_) return failed("a peer failed at the end of the run");
    closing_ = true;
    for (Peer& peer : peers_)
      queue_locked(peer, make_frame(kBye, static_cast<std::uint32_t>(rank()), 0, {}));
  }
  wake();
  {
    std::unique_lock lock(mutex_);
    changed_.wait_until(lock, Clock::now() + timeout, [this] { return closed_down_locked(); });
    stop_ = true;
  }
  wake();
  if (io_.joinable()) io_.join();
  return true;
}

void TcpProcessGroup::abort(int code, const std::string& reason) {
  set_ending();
  const std::lock_guard lock(mutex_);
  stop_ = true;  // the socket thread stops at its next turn; this thread writes from now on
  const std::string frame =
      make_frame(kAbort, static_cast<std::uint32_t>(rank()), 0, limited(reason));
  for (Peer& peer : peers_)
    queue_locked(peer, frame);
  // Everything queued (the abort last), within a second; then no more writes, and read what the
  // peers still send until they close, so closing sends no reset that could discard the abort.
  const Clock::time_point deadline = Clock::now() + milliseconds(1000);
  for (Peer& peer : peers_) {
    while (!peer.dead && !peer.out.empty()) {
      const std::string& front = peer.out.front();
      if (!send_all(peer.fd, std::string_view(front).substr(peer.out_offset), deadline)) break;
      peer.out.pop_front();
      peer.out_offset = 0;
    }
    if (peer.fd >= 0) ::shutdown(peer.fd, SHUT_WR);
  }
  const Clock::time_point drained_by = Clock::now() + milliseconds(500);
  for (Peer& peer : peers_) {
    std::array<char, 4096> sink{};
    while (!peer.closed && Clock::now() < drained_by) {
      const ReadStatus status = read_exact(peer.fd, sink.data(), sink.size(), drained_by);
      if (status == ReadStatus::end || status == ReadStatus::error) peer.closed = true;
      if (status == ReadStatus::timeout) break;
    }
  }
  exit_now(code);
}

void TcpProcessGroup::exit_now(int code) {
  // No destructor runs: the temporaries of outputs being written (rank 0's trace and report)
  // are unlinked here, as a SIGTERM's handler would.
  remove_live_temporaries();
  std::fflush(nullptr);
  std::_Exit(code);
}

int run_as_rank(TcpProcessGroup& group, const std::function<int()>& body,
                std::chrono::milliseconds timeout) {
  int status = 1;
  std::string reason;  // what ends the job, should this rank have to
  auto print = [](const std::string& line) { std::cerr << line << "\n" << std::flush; };
  try {
    status = body();
  } catch (const AgreedError& e) {
    reason = e.what();
    // set_ending() false: the socket thread is already ending this process, having printed why.
    if (group.set_ending() && group.rank() == 0) print("pipeplan: error: " + reason);
  } catch (const Error& e) {
    reason = e.what();
    if (group.set_ending()) {
      print("pipeplan: error: rank " + std::to_string(group.rank()) + ": " + reason);
    }
  } catch (const std::exception& e) {
    reason = std::string("internal error: ") + e.what();
    if (group.set_ending()) {
      print("pipeplan: internal error: rank " + std::to_string(group.rank()) + ": " + e.what());
    }
    status = 3;
  }
  std::fflush(stdout);
  if (std::string why; !group.finish(timeout, &why)) {
    if (reason.empty()) {
      // The run itself succeeded and nothing was printed: say why the job still fails.
      reason = "rank " + std::to_string(group.rank()) + " could not finish: " + why;
      print("pipeplan: error: " + reason);
    }
    group.abort(status == 0 ? 1 : status, reason);
  }
  return status;
}

bool connected_to_itself(int fd) {
  sockaddr_storage local{};
  sockaddr_storage peer{};
  socklen_t local_length = sizeof(local);
  socklen_t peer_length = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0)
    return false;
  return local_length == peer_length && std::memcmp(&local, &peer, local_length) == 0;
}

}  // namespace pipeplan::tcp
