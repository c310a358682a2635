// Reading and writing whole files (planner/base/io.h): one reader for every input and one writer
// for every output, on POSIX descriptors so that the file's type and identity are those of what
// is actually opened.
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"

namespace pipeplan {

namespace {

// A file's identity: the same (device, inode) is the same file under any name or link.
using FileId = std::pair<dev_t, ino_t>;

FileId id_of(const struct stat& st) {
  return {st.st_dev, st.st_ino};
}

// What a FileGuard remembers; active only while at least one guard lives.
struct Registry {
  std::mutex mutex;
  int guards = 0;
  std::set<FileId> inputs;
  std::set<FileId> outputs;
  bool stdin_read = false;  // standard input ("-") was read by this command
};

Registry& registry() {
  static Registry r;
  return r;
}

void remember(const FileId& id, bool input) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  if (r.guards == 0) return;
  (input ? r.inputs : r.outputs).insert(id);
}

// What is at `path` besides a regular file, for a message; "" for a regular file.
std::string kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string system_error_text(int error) {
  return std::strerror(error);
}

// Closes a descriptor when it goes out of scope.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  [[nodiscard]] int get() const { return fd_; }
  // Closes now and reports close's own error (a delayed write error surfaces here).
  int close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

std::string too_large(const std::filesystem::path& path, std::int64_t bytes, bool at_least) {
  return input_name(path) + ": " +
         limits::above_limit((at_least ? "more than " : "") + std::to_string(bytes) + " bytes",
                             static_cast<double>(limits::kMaxFileBytes));
}

// The temporaries being written, for a signal that ends the process meanwhile (SIGINT, SIGTERM,
// SIGHUP): its handler unlinks them, as the ordinary failure paths do, then ends the process as
// the signal would have. SIGXFSZ (a file above `ulimit -f`) is ignored instead, so that the write
// fails with EFBIG and the command says so in one line. Slots of fixed storage, so that the handler
// touches only what it may (atomics and unlink).
class LiveTemporaries {
 public:
  static constexpr std::size_t kSlots = 64;
  static LiveTemporaries& instance() {
    static LiveTemporaries live;
    return live;
  }
  // A slot holding `path` (nothing tracked when every slot is taken or the path is too long:
  // the ordinary failure paths still remove it).
  int add(const std::filesystem::path& path) {
    install();
    const std::string& text = path.native();
    if (text.size() >= kPathBytes) return -1;
    for (std::size_t i = 0; i < kSlots; ++i) {
      bool expected = false;
      if (!slots_[i].claimed.compare_exchange_strong(expected, true)) continue;
      std::memcpy(slots_[i].path.data(), text.c_str(), text.size() + 1);
      slots_[i].live.store(true);
      return static_cast<int>(i);
    }
    return -1;
  }
  void remove(int slot) {
    if (slot < 0) return;
    slots_[static_cast<std::size_t>(slot)].live.store(false);
    slots_[static_cast<std::size_t>(slot)].claimed.store(false);
  }
  // Only atomics and unlink: from a signal handler, or a thread ending the process.
  void unlink_live() noexcept {
    for (Slot& slot : slots_) {
      if (slot.live.load()) ::unlink(slot.path.data());
    }
  }
  // While a commit renames its outputs into place, a signal is held back (on whichever thread
  // it arrives) and acted on once every rename is done or undone: the outputs are all new or all
  // old, and no kept copy of a replaced file is left behind. The window is a few system calls.
  void hold_signals() {
    install();
    holding_.fetch_add(1);
  }
  void release_signals() {
    if (holding_.fetch_sub(1) != 1) return;
    if (const int signal = held_.exchange(0); signal != 0) on_signal(signal);
  }

 private:
  static constexpr std::size_t kPathBytes = 4096;
  struct Slot {
    std::atomic<bool> claimed{false};
    std::atomic<bool> live{false};
    std::array<char, kPathBytes> path{};
  };
  static void on_signal(int signal) {
    if (instance().holding_.load() > 0) {
      instance().held_.store(signal);
      return;
    }
    instance().unlink_live();
    struct sigaction plain {};
    plain.sa_handler = SIG_DFL;
    sigemptyset(&plain.sa_mask);
    ::sigaction(signal, &plain, nullptr);
    ::raise(signal);
  }
  // Once, for each signal whose action is still the default (one ignored, or handled by the
  // program, is left so).
  static void install() {
    static std::once_flag once;
    std::call_once(once, [] {
      for (const int signal : {SIGINT, SIGTERM, SIGHUP, SIGXFSZ}) {
        struct sigaction current {};
        if (::sigaction(signal, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) continue;
        struct sigaction handler {};
        handler.sa_handler = signal == SIGXFSZ ? SIG_IGN : on_signal;
        handler.sa_flags = SA_RESTART;  // a held signal returns into the interrupted call
        sigemptyset(&handler.sa_mask);
        ::sigaction(signal, &handler, nullptr);
      }
    });
  }

  std::array<Slot, kSlots> slots_{};
  std::atomic<int> holding_{0};  // commits renaming now
  std::atomic<int> held_{0};     // the signal that came meanwhile
};

}  // namespace

void remove_live_temporaries() noexcept {
  LiveTemporaries::instance().unlink_live();
}

SignalsHeld::SignalsHeld() {
  LiveTemporaries::instance().hold_signals();
}

SignalsHeld::~SignalsHeld() {
  LiveTemporaries::instance().release_signals();
}

namespace {

// Tracks one temporary for its lifetime (until renamed over its target or unlinked).
class TrackedTemporary {
 public:
  explicit TrackedTemporary(const std::filesystem::path& path)
      : slot_(LiveTemporaries::instance().add(path)) {}
  TrackedTemporary(const TrackedTemporary&) = delete;
  TrackedTemporary& operator=(const TrackedTemporary&) = delete;
  ~TrackedTemporary() { LiveTemporaries::instance().remove(slot_); }

 private:
  int slot_;
};

// A name for a temporary beside `target`: ".<name>.<random>.tmp", hidden, never the target; the
// target's name is cut so that the whole stays within NAME_MAX bytes (a 250-byte name is a name
// the folder takes, and so must its temporary be).
std::filesystem::path temporary_name(const std::filesystem::path& target) {
  static std::atomic<std::uint64_t> counter{0};
  static const std::uint64_t seed = [] {
    std::random_device device;
    return (static_cast<std::uint64_t>(device()) << 32U) ^ device() ^
           static_cast<std::uint64_t>(::getpid());
  }();
  std::uint64_t value =
      seed + 0x9E3779B97F4A7C15ULL * (counter.fetch_add(1) + 1) +
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  static constexpr char kDigits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::string suffix;
  for (int i = 0; i < 10; ++i) {
    suffix += kDigits[value % 36];
    value /= 36;
  }
  const std::filesystem::path dir = target.parent_path();
  std::string base = target.filename().string();
  const std::size_t room = NAME_MAX - std::string_view("...tmp").size() - suffix.size();
  if (base.size() > room) base.resize(room);
  const std::string name = "." + base + "." + suffix + ".tmp";
  return dir.empty() ? std::filesystem::path(name) : dir / name;
}

// Why a temporary could not be created beside `target`, in words.
std::string cannot_create(const std::filesystem::path& target, int error) {
  const std::filesystem::path dir = target.parent_path();
  if (error == ENOENT) {
    return target.string() + ": cannot write: folder '" + (dir.empty() ? "." : dir.string()) +
           "' does not exist";
  }
  if (error == ENOTDIR) {
    return target.string() + ": cannot write: '" + dir.string() + "' is not a folder";
  }
  return target.string() + ": cannot write: " + system_error_text(error);
}

// The checked state of an output's target.
struct Target {
  bool exists = false;
  mode_t mode = 0;
};

// The folder an output's temporary is created in must exist and take new files: checked with
// the target, so that a command checking its outputs early learns of a missing folder early.
void check_target_folder(const std::filesystem::path& target) {
  const std::filesystem::path dir = target.parent_path().empty() ? "." : target.parent_path();
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw Error(cannot_create(target, errno));
  if (!S_ISDIR(st.st_mode)) throw Error(cannot_create(target, ENOTDIR));
  if (::access(dir.c_str(), W_OK | X_OK) != 0) throw Error(cannot_create(target, errno));
}

// Whether `path`, or a link it leads through, lies in /proc ("/dev/stdout" leads to
// "/proc/self/fd/1"): a process's open file, which the rename would replace with a file (the link
// itself, as root) rather than write to.
bool names_a_descriptor(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path at = std::filesystem::absolute(path, ec);
  for (int hop = 0; !ec && hop < 40; ++hop) {
    const std::filesystem::path folder = std::filesystem::weakly_canonical(at.parent_path(), ec);
    if (ec) return false;
    if (const auto first = ++folder.begin(); first != folder.end() && *first == "proc") {
      return true;
    }
    if (!std::filesystem::is_symlink(at, ec) || ec) return false;
    const std::filesystem::path next = std::filesystem::read_symlink(at, ec);
    at = next.is_absolute() ? next : at.parent_path() / next;
  }
  return false;
}

Target check_target(const std::filesystem::path& path) {
  if (path.empty()) throw Error("output file name is empty");
  if (names_a_descriptor(path)) {
    throw Error(path.string() +
                ": cannot write: names a process's open file (in /proc), not a file (give a file "
                "name)");
  }
  // "-" is standard input's name where a command reads a file; as an output it is refused, not
  // written as a file named "-" (./- names one).
  if (path == "-") {
    throw Error("-: cannot write: '-' names standard input, not an output (give a file name)");
  }
  if (path.filename() == "." || path.filename() == "..") {
    throw Error(path.string() + ": cannot write: is a directory");
  }
  if (path.filename().empty()) {  // "name/" names a folder, whatever is there
    const std::string name = path.string().substr(0, path.string().find_last_not_of('/') + 1);
    struct stat st {};
    if (name.empty() || ::stat(name.c_str(), &st) != 0) {
      throw Error(path.string() + ": cannot write: a name ending in '/' names a folder");
    }
    if (const std::string kind = kind_of(st.st_mode); !kind.empty()) {
      throw Error(path.string() + ": cannot write: is " + kind);
    }
    throw Error(path.string() + ": cannot write: a name ending in '/' names a folder, and " + name +
                " is a file");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    // Nothing there, or a link that leads to nothing (dangling, or a loop of links: the name
    // itself is a link): the file takes the name.
    if (error == ENOENT) {
      check_target_folder(path);
      return {};
    }
    if (error == ELOOP) {
      struct stat link {};
      if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
        check_target_folder(path);
        return {};
      }
    }
    if (error == ENOTDIR) throw Error(cannot_create(path, error));
    throw Error(path.string() + ": cannot write: " + system_error_text(error));
  }
  if (const std::string kind = kind_of(st.st_mode); !kind.empty()) {
    throw Error(path.string() + ": cannot write: is " + kind +
                " (pipeplan writes regular files only)");
  }
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  if (r.inputs.contains(id_of(st))) {
    throw Error(path.string() + ": cannot write: it is an input of this command");
  }
  if (r.outputs.contains(id_of(st))) {
    throw Error(path.string() + ": cannot write: this command already wrote it");
  }
  check_target_folder(path);
  return {true, st.st_mode};
}

// Creates and fills a temporary beside `target`; returns its name, tracked in `tracked` from
// its creation (a signal meanwhile removes it). Throws Error (nothing left).
std::filesystem::path write_temporary(
    const std::filesystem::path& target,
    const std::function<void(const OutputFiles::Writer&)>& produce, const Target& state,
    std::vector<std::unique_ptr<TrackedTemporary>>& tracked) {
  for (int attempt = 0;; ++attempt) {
    std::filesystem::path tmp = temporary_name(target);
    const int fd =
        ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666);
    if (fd < 0) {
      const int error = errno;
      if (error == EEXIST && attempt < 100) continue;
      throw Error(cannot_create(target, error));
    }
    tracked.push_back(std::make_unique<TrackedTemporary>(tmp));
    Descriptor file(fd);
    const auto fail = [&](int error) {
      ::unlink(tmp.c_str());
      throw Error(target.string() + ": write failed: " + system_error_text(error));
    };
    const OutputFiles::Writer write = [&](std::string_view content) {
      std::size_t done = 0;
      while (done < content.size()) {
        const ssize_t n = ::write(file.get(), content.data() + done, content.size() - done);
        if (n < 0) {
          if (errno == EINTR) continue;
          fail(errno);
        }
        done += static_cast<std::size_t>(n);
      }
    };
    try {
      produce(write);
    } catch (...) {
      ::unlink(tmp.c_str());  // a failed write unlinked it already; a second unlink is harmless
      throw;
    }
    // A file replaced keeps its permissions; a new one gets 0666 less the umask, as any tool's.
    if (state.exists && ::fchmod(file.get(), state.mode & 07777) != 0) fail(errno);
    // On disk before the rename makes it the target: a crash then leaves the old file or the
    // new one whole, never a renamed empty one (file systems that cannot sync, EINVAL, pass).
    if (::fsync(file.get()) != 0 && errno != EINVAL) fail(errno);
    if (file.close() != 0) fail(errno);
    return tmp;
  }
}

// What a commit does to a target it replaces: whether one was there, and the second name (a
// hard link) under which the replaced file is kept until every output is in place; empty when
// none was there or it could not be kept.
struct Replaced {
  bool existed = false;
  std::filesystem::path kept;
};

Replaced keep_replaced(const std::filesystem::path& target) {
  struct stat st {};
  if (::lstat(target.c_str(), &st) != 0) return {};
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::filesystem::path name = temporary_name(target);
    // Without AT_SYMLINK_FOLLOW a link at the target is kept as the link itself.
    if (::linkat(AT_FDCWD, target.c_str(), AT_FDCWD, name.c_str(), 0) == 0) {
      return {true, std::move(name)};
    }
    if (errno != EEXIST) break;
  }
  return {true, {}};
}

// Undoes the rename over `target`: the replaced file back under its name, or (none was there)
// the new file removed.
void put_back(const std::filesystem::path& target, const Replaced& replaced) {
  if (!replaced.kept.empty()) {
    ::rename(replaced.kept.c_str(), target.c_str());
  } else if (!replaced.existed) {
    ::unlink(target.c_str());
  }
}

}  // namespace

namespace {

// Standard input for "-": a descriptor of its own (closed after reading), once per command (a
// second "-" would read nothing), and only a pipe, socket or redirected file (a terminal would
// wait for typing; a device or directory is no text file).
int open_stdin(struct stat& st) {
  {
    Registry& r = registry();
    const std::lock_guard lock(r.mutex);
    if (r.stdin_read) throw Error("stdin: already read by this command (give '-' for one input)");
    if (r.guards > 0) r.stdin_read = true;
  }
  const int fd = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) throw Error("stdin: cannot read: " + system_error_text(errno));
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    throw Error("stdin: cannot read: " + system_error_text(error));
  }
  if (::isatty(fd) != 0) {
    ::close(fd);
    throw Error("stdin: is a terminal (pipe or redirect a file into '-')");
  }
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISSOCK(st.st_mode)) {
    ::close(fd);
    throw Error("stdin: is " + kind_of(st.st_mode) + ", not a file, pipe or socket");
  }
  return fd;
}

}  // namespace

std::string input_name(const std::filesystem::path& path) {
  return path == "-" ? "stdin" : path.string();
}

std::string read_text_file(const std::filesystem::path& path) {
  struct stat st {};
  const bool from_stdin = path == "-";
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer; a regular file ignores it.
  const int fd = from_stdin ? open_stdin(st)
                            : ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) throw Error(path.string() + ": no such file");
    throw Error(path.string() + ": cannot open file: " + system_error_text(error));
  }
  Descriptor file(fd);
  if (!from_stdin) {
    if (::fstat(file.get(), &st) != 0) {
      throw Error(path.string() + ": cannot read file: " + system_error_text(errno));
    }
    if (S_ISDIR(st.st_mode)) throw Error(path.string() + ": is a directory");
    if (const std::string kind = kind_of(st.st_mode); !kind.empty()) {
      throw Error(path.string() + ": is " + kind + ", not a regular file");
    }
  }
  if (st.st_size > limits::kMaxFileBytes) throw Error(too_large(path, st.st_size, false));
  std::string text;
  text.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  // The size read is bounded by the limit, not by what fstat said: a file that grows while it is
  // read is still refused past the limit.
  while (true) {
    if (done == text.size()) {
      // Full (a regular file at its size): a small read says whether anything follows before
      // the buffer grows, so that a file read whole is held once, not in a buffer twice its size.
      std::array<char, 4096> probe{};
      const ssize_t more = ::read(file.get(), probe.data(), probe.size());
      if (more < 0) {
        if (errno == EINTR) continue;
        throw Error(input_name(path) + ": read failed: " + system_error_text(errno));
      }
      if (more == 0) break;
      if (done + static_cast<std::size_t>(more) > static_cast<std::size_t>(limits::kMaxFileBytes)) {
        throw Error(too_large(path, limits::kMaxFileBytes, true));
      }
      text.resize(
          std::min<std::size_t>(std::max<std::size_t>(2 * text.size(), probe.size()),
                                static_cast<std::size_t>(limits::kMaxFileBytes) + probe.size()));
      std::memcpy(text.data() + done, probe.data(), static_cast<std::size_t>(more));
      done += static_cast<std::size_t>(more);
      continue;
    }
    const ssize_t n = ::read(file.get(), text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(input_name(path) + ": read failed: " + system_error_text(errno));
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
    if (done > static_cast<std::size_t>(limits::kMaxFileBytes)) {
      throw Error(too_large(path, limits::kMaxFileBytes, true));
    }
  }
  text.resize(done);
  if (const auto nul = text.find('\0'); nul != std::string::npos) {
    throw Error(input_name(path) + ": NUL byte at offset " + std::to_string(nul) +
                " (pipeplan reads text files)");
  }
  if (S_ISREG(st.st_mode)) remember(id_of(st), true);  // a pipe is no file an output could be
  return text;
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  return parse_json_text(read_text_file(path), input_name(path));
}

void OutputFiles::add(const std::filesystem::path& path, std::string content) {
  check_new(path);
  Pending p;
  p.path = path;
  p.owned = std::move(content);
  pending_.push_back(std::move(p));
}

void OutputFiles::add_view(const std::filesystem::path& path, std::string_view content) {
  check_new(path);
  Pending p;
  p.path = path;
  p.borrowed = content;
  p.is_borrowed = true;
  pending_.push_back(std::move(p));
}

void OutputFiles::add_stream(const std::filesystem::path& path,
                             std::function<void(const Writer&)> produce) {
  check_new(path);
  Pending p;
  p.path = path;
  p.produce = std::move(produce);
  pending_.push_back(std::move(p));
}

namespace {

// What an output's name resolves to, links followed; where they cannot be (a loop of links),
// the name made absolute. Made absolute first: weakly_canonical keeps a relative name whose
// first part does not exist ("y.json") relative, and "./y.json" would then be another file.
std::filesystem::path resolved_name(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) return path.lexically_normal();
  std::filesystem::path resolved = std::filesystem::weakly_canonical(absolute, ec);
  return ec ? absolute.lexically_normal() : resolved;
}

// The renames on disk: each folder that holds an output, synced once. Best effort: the files
// are in place and whole; a folder that cannot be opened or synced is left to the system.
void sync_folders(const std::vector<std::filesystem::path>& targets) {
  std::vector<std::filesystem::path> folders;
  for (const std::filesystem::path& target : targets) {
    std::filesystem::path folder = target.parent_path();
    if (folder.empty()) folder = ".";
    if (std::find(folders.begin(), folders.end(), folder) != folders.end()) continue;
    folders.push_back(folder);
    const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    const Descriptor dir(fd);
    (void)::fsync(dir.get());
  }
}

}  // namespace

void OutputFiles::check_new(const std::filesystem::path& path) const {
  check_target(path);
  // Two outputs of one command naming one file (under any spelling of the name).
  const std::filesystem::path resolved = resolved_name(path);
  for (const Pending& other : pending_) {
    if (resolved_name(other.path) == resolved) {
      throw Error(path.string() + ": cannot write: named twice as an output (also as " +
                  other.path.string() + ")");
    }
  }
}

void OutputFiles::commit() {
  std::vector<Pending> pending = std::move(pending_);
  pending_.clear();
  std::vector<std::filesystem::path> temporaries;
  std::vector<std::unique_ptr<TrackedTemporary>> tracked;  // until renamed or removed
  const auto remove_temporaries = [&](std::size_t from) {
    for (std::size_t i = from; i < temporaries.size(); ++i)
      ::unlink(temporaries[i].c_str());
  };
  try {
    for (const Pending& p : pending) {
      const Target state = check_target(p.path);
      temporaries.push_back(
          p.produce ? write_temporary(p.path, p.produce, state, tracked)
                    : write_temporary(
                          p.path, [&](const Writer& write) { write(p.text()); }, state, tracked));
    }
  } catch (...) {
    remove_temporaries(0);
    throw;
  }
  // Each file a rename replaces is kept under a second name (a hard link) until every rename has
  // succeeded, so that a rename that fails (an immutable file, a folder that refuses it) puts
  // back the targets renamed before it. A target that cannot be kept so (a file system without
  // hard links, a file of another user) is renamed first, before anything else has changed.
  {
    const SignalsHeld held;
    std::vector<Replaced> replaced(pending.size());
    for (std::size_t i = 0; i < pending.size(); ++i)
      replaced[i] = keep_replaced(pending[i].path);
    std::vector<std::size_t> order(pending.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_partition(order.begin(), order.end(), [&](std::size_t i) {
      return replaced[i].existed && replaced[i].kept.empty();
    });
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::size_t i = order[k];
      // rename(2) replaces the name: a link at the target is replaced, never followed.
      if (::rename(temporaries[i].c_str(), pending[i].path.c_str()) != 0) {
        const int error = errno;
        for (std::size_t j = k; j < order.size(); ++j)
          ::unlink(temporaries[order[j]].c_str());
        for (std::size_t j = k; j-- > 0;)
          put_back(pending[order[j]].path, replaced[order[j]]);
        for (std::size_t j = k; j < order.size(); ++j) {
          if (!replaced[order[j]].kept.empty()) ::unlink(replaced[order[j]].kept.c_str());
        }
        throw Error(pending[i].path.string() +
                    ": cannot replace file: " + system_error_text(error));
      }
    }
    for (std::size_t i = 0; i < pending.size(); ++i) {
      if (!replaced[i].kept.empty()) ::unlink(replaced[i].kept.c_str());
      struct stat st {};
      if (::stat(pending[i].path.c_str(), &st) == 0) remember(id_of(st), false);
    }
  }
  std::vector<std::filesystem::path> targets;
  targets.reserve(pending.size());
  for (const Pending& p : pending)
    targets.push_back(p.path);
  sync_folders(targets);
}

void check_output(const std::filesystem::path& path) {
  check_target(path);
}

void write_file_atomic(const std::filesystem::path& path, std::string_view content) {
  OutputFiles files;
  files.add_view(path, content);
  files.commit();
}

FileGuard::FileGuard() {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  ++r.guards;
}

FileGuard::~FileGuard() {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  if (--r.guards == 0) {
    r.inputs.clear();
    r.outputs.clear();
    r.stdin_read = false;
  }
}

}  // namespace pipeplan
