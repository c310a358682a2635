// The one reader and the one writer of files: what they refuse, and that a failure leaves every
// file as it was.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"
#include "tests/cli_support.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

using pipeplan::testing::error_of;

namespace fs = std::filesystem;

std::string contents(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void put(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Every entry of a folder, by name.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class Files : public testing::TempDirTest {};

TEST_F(Files, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string fifo = path("plan.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { read_text_file(fifo); }), fifo + ": is a FIFO, not a regular file");
}

TEST_F(Files, DevicesAreRefusedNotReadWithoutBound) {
  EXPECT_EQ(error_of([] { read_text_file("/dev/zero"); }),
            "/dev/zero: is a character device, not a regular file");
  EXPECT_EQ(error_of([] { read_text_file("/dev/urandom"); }),
            "/dev/urandom: is a character device, not a regular file");
}

TEST_F(Files, ANulByteIsRefusedWithItsOffset) {
  const std::string file = path("p.json");
  put(file, std::string("{\"a\": 1}\0{\"b\": 2}", 17));
  EXPECT_EQ(error_of([&] { read_json_file(file); }),
            file + ": NUL byte at offset 8 (pipeplan reads text files)");
}

TEST_F(Files, AMissingFileIsOneLine) {
  EXPECT_EQ(error_of([&] { read_text_file(path("missing.json")); }),
            path("missing.json") + ": no such file");
}

TEST_F(Files, JsonNestedPastTheLimitIsRefusedBeforeParsing) {
  const int depth = limits::kMaxJsonDepth;
  const std::string ok = std::string(static_cast<std::size_t>(depth), '[') +
                         std::string(static_cast<std::size_t>(depth), ']');
  EXPECT_NO_THROW(parse_json_text(ok, "t.json"));
  // 53,000 levels: printing such a value recursed once per level and overflowed the stack.
  const std::string deep =
      "{\"args\": {\"node\": " + std::string(53000, '[') + std::string(53000, ']') + "}}";
  EXPECT_EQ(error_of([&] { parse_json_text(deep, "t.json"); }),
            "t.json: JSON nested 65 deep is above the limit of 64 levels "
            "(docs/reference/limits.md) at byte 81");
  // Brackets inside strings are text, not nesting.
  EXPECT_NO_THROW(parse_json_text("{\"a\": \"" + std::string(100, '[') + "\\\"{\"}", "t.json"));
}

TEST(JsonExcerpt, CutsLongValues) {
  EXPECT_EQ(json_excerpt(nlohmann::json::parse("[1,2]")), "[1,2]");
  EXPECT_EQ(json_excerpt(nlohmann::json(std::string(100, 'x')), 10), "\"xxxxxxxxx...");
}

TEST_F(Files, AWrittenFileReplacesTheTargetAndLeavesNoTemporary) {
  const fs::path out = path("out.json");
  put(out, "old");
  ::chmod(out.c_str(), 0640);
  write_file_atomic(out, "new\n");
  EXPECT_EQ(contents(out), "new\n");
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"out.json"});
  struct stat st {};
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640U) << "a replaced file keeps its permissions";
}

TEST_F(Files, ANameAsLongAsTheFolderTakesIsWritten) {
  // The temporary beside it must fit in NAME_MAX too.
  for (const std::size_t length : {240, 250, 255}) {
    const std::string name = std::string(length - 5, 'a') + ".json";
    write_file_atomic(path(name), "plan");
    EXPECT_EQ(contents(path(name)), "plan");
    write_file_atomic(path(name), "again");
    EXPECT_EQ(contents(path(name)), "again");
    EXPECT_EQ(entries(dir_), std::vector<std::string>{name});
    fs::remove(path(name));
  }
}

TEST_F(Files, ALinkAtTheTargetIsReplacedNeverWrittenThrough) {
  const fs::path other = path("other.txt");
  put(other, "precious");
  const fs::path out = path("out.json");
  fs::create_symlink(other, out);
  write_file_atomic(out, "plan");
  EXPECT_EQ(contents(other), "precious");
  EXPECT_FALSE(fs::is_symlink(out));
  EXPECT_EQ(contents(out), "plan");
}

TEST_F(Files, ALoopOfLinksAtTheTargetIsReplaced) {
  fs::create_symlink("l2", path("l1"));
  fs::create_symlink("l1", path("l2"));
  write_file_atomic(path("l1"), "plan");
  EXPECT_FALSE(fs::is_symlink(path("l1")));
  EXPECT_EQ(contents(path("l1")), "plan");
  EXPECT_EQ(fs::read_symlink(path("l2")), "l1");
  fs::create_symlink("self", path("self"));
  write_file_atomic(path("self"), "trace");
  EXPECT_EQ(contents(path("self")), "trace");
  // Two spellings of a name that resolves to nothing are still one output.
  fs::create_symlink("loop", path("loop"));
  OutputFiles outputs;
  outputs.add(path("loop"), "a");
  EXPECT_NE(error_of([&] { outputs.add(dir_ / "." / "loop", "b"); }).find("named twice"),
            std::string::npos);
}

TEST_F(Files, TheOldFixedTemporaryNameIsNotFollowed) {
  // A link planted at "<target>.tmp" (where writers used to put their temporary) stays as it is.
  const fs::path other = path("other.txt");
  put(other, "precious");
  fs::create_symlink(other, path("out.json.tmp"));
  write_file_atomic(path("out.json"), "plan");
  EXPECT_EQ(contents(other), "precious");
  EXPECT_EQ(contents(path("out.json")), "plan");
}

TEST_F(Files, TargetsThatAreNotRegularFilesAreRefused) {
  EXPECT_EQ(error_of([] { write_file_atomic("/dev/null", "x"); }),
            "/dev/null: cannot write: is a character device (pipeplan writes regular files only)");
  EXPECT_EQ(error_of([&] { write_file_atomic(dir_, "x"); }),
            dir_.string() + ": cannot write: is a directory (pipeplan writes regular files only)");
  const std::string fifo = path("out.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { write_file_atomic(fifo, "x"); }),
            fifo + ": cannot write: is a FIFO (pipeplan writes regular files only)");
  EXPECT_EQ(
      error_of([&] { write_file_atomic(path("missing") + "/out.json", "x"); }),
      path("missing") + "/out.json: cannot write: folder '" + path("missing") + "' does not exist");
}

TEST_F(Files, AnOutputCheckedEarlyNeedsItsFolder) {
  // check_output, as a long command runs it before its work: a target in no folder fails there.
  EXPECT_EQ(error_of([&] { check_output(path("missing") + "/trace.json"); }),
            path("missing") + "/trace.json: cannot write: folder '" + path("missing") +
                "' does not exist");
  put(path("plan.json"), "plan");
  EXPECT_EQ(
      error_of([&] { check_output(path("plan.json") + "/trace.json"); }),
      path("plan.json") + "/trace.json: cannot write: '" + path("plan.json") + "' is not a folder");
  EXPECT_EQ(error_of([&] { check_output(path("trace.json")); }), "<no error>");
}

TEST_F(Files, AnOutputNamedDashIsRefused) {
  // "-" reads standard input where a command reads a file; no output is a file named "-".
  EXPECT_EQ(error_of([] { check_output("-"); }),
            "-: cannot write: '-' names standard input, not an output (give a file name)");
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  EXPECT_NE(error_of([] { write_file_atomic("-", "x"); }), "<no error>");
  fs::current_path(cwd);
  EXPECT_TRUE(entries(dir_).empty());
}

TEST_F(Files, ANameEndingInASlashIsAFoldersName) {
  put(path("plan.json"), "plan");
  EXPECT_EQ(error_of([&] { write_file_atomic(path("plan.json") + "/", "x"); }),
            path("plan.json") + "/: cannot write: a name ending in '/' names a folder, and " +
                path("plan.json") + " is a file");
  EXPECT_EQ(error_of([&] { check_output(path("new") + "/"); }),
            path("new") + "/: cannot write: a name ending in '/' names a folder");
  EXPECT_EQ(error_of([&] { check_output(dir_.string() + "/"); }),
            dir_.string() + "/: cannot write: is a directory");
  EXPECT_EQ(contents(path("plan.json")), "plan");
}

TEST_F(Files, SeveralOutputsAreWrittenAllOrNone) {
  const fs::path kept = path("trace.json");
  put(kept, "old trace");
  OutputFiles outputs;
  outputs.add(kept, "new trace");
  outputs.add(path("fresh.json"), "fresh");
  // The folder of a third output disappears between add and commit: nothing may change.
  fs::create_directory(path("sub"));
  outputs.add(path("sub") + "/g.dot", "digraph {}");
  fs::remove(path("sub"));
  EXPECT_NE(error_of([&] { outputs.commit(); }).find("sub/g.dot: cannot write"), std::string::npos);
  EXPECT_EQ(contents(kept), "old trace");
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"trace.json"});
}

TEST_F(Files, ARenameThatFailsPutsBackTheOutputsRenamedBeforeIt) {
  const fs::path kept = path("trace.json");
  put(kept, "old trace");
  fs::create_directory(path("sub"));
  OutputFiles outputs;
  outputs.add(kept, "new trace");
  outputs.add(path("fresh.json"), "fresh");
  // The last output's folder moves away once its temporary is written (a new empty one takes
  // its name): its rename fails after the other two are in place, and both must be undone.
  outputs.add_stream(path("sub") + "/g.dot", [&](const OutputFiles::Writer& write) {
    write("digraph {}");
    fs::rename(path("sub"), path("moved"));
    fs::create_directory(path("sub"));
  });
  EXPECT_NE(error_of([&] { outputs.commit(); }).find("sub/g.dot: cannot replace file"),
            std::string::npos);
  EXPECT_EQ(contents(kept), "old trace");
  EXPECT_EQ(entries(dir_), (std::vector<std::string>{"moved", "sub", "trace.json"}));
  EXPECT_TRUE(fs::is_empty(path("sub")));
}

TEST_F(Files, ATargetThatCannotBeKeptAsideIsReplacedFirst) {
  // The second target turns into a folder while its temporary is written: it can neither be
  // kept under a second name nor replaced, so it is tried first and nothing changes.
  const fs::path first = path("trace.json");
  put(first, "old trace");
  OutputFiles outputs;
  outputs.add(first, "new trace");
  outputs.add_stream(path("g.dot"), [&](const OutputFiles::Writer& write) {
    write("digraph {}");
    fs::create_directory(path("g.dot"));
    put(path("g.dot") + "/inside", "x");
  });
  EXPECT_NE(error_of([&] { outputs.commit(); }).find("g.dot: cannot replace file"),
            std::string::npos);
  EXPECT_EQ(contents(first), "old trace");
  EXPECT_EQ(entries(dir_), (std::vector<std::string>{"g.dot", "trace.json"}));
}

TEST_F(Files, AStreamedOutputIsWrittenPieceByPieceAndAFailureInItChangesNothing) {
  const fs::path out = path("plan.json");
  put(out, "old plan");
  {
    OutputFiles outputs;
    int calls = 0;
    outputs.add_stream(out, [&](const OutputFiles::Writer& write) {
      ++calls;
      write("{\"a\": ");
      write("");
      write("1}\n");
    });
    EXPECT_EQ(calls, 0) << "nothing is produced before commit";
    outputs.commit();
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(contents(out), "{\"a\": 1}\n");
  }
  // The producer fails half way: the target keeps its old content, no temporary is left, and
  // the other output of the command is not written either.
  OutputFiles outputs;
  outputs.add(path("trace.json"), "trace");
  outputs.add_stream(out, [](const OutputFiles::Writer& write) {
    write("half a plan");
    throw Error("plan.json: field 'nodes' broke");
  });
  EXPECT_EQ(error_of([&] { outputs.commit(); }), "plan.json: field 'nodes' broke");
  EXPECT_EQ(contents(out), "{\"a\": 1}\n");
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"plan.json"});
}

// A signal that ends the command while it writes (SIGTERM from a job scheduler, ^C) leaves no
// temporary: in a child process, the producer raises it half way through the file.
TEST_F(Files, ASignalWhileWritingLeavesNoTemporary) {
  const fs::path out = path("plan.json");
  put(out, "old plan");
  for (const int signal : {SIGTERM, SIGINT}) {
    std::fflush(nullptr);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      OutputFiles outputs;
      outputs.add_stream(out, [signal](const OutputFiles::Writer& write) {
        write("half a plan");
        ::raise(signal);
      });
      outputs.commit();
      std::_Exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal) << status;
    EXPECT_EQ(entries(dir_), std::vector<std::string>{"plan.json"}) << signal;
    EXPECT_EQ(contents(out), "old plan");
  }
}

// A signal that comes while outputs are renamed into place is held until the renames are done:
// every output new, no kept copy of a replaced file left. In a child process, signals are held as
// commit holds them, one is raised, and the child is still alive to commit; it ends on the signal
// when the hold ends.
TEST_F(Files, ASignalWhileRenamingIsHeldUntilTheOutputsAreInPlace) {
  const fs::path plan = path("plan.json");
  const fs::path trace = path("trace.json");
  put(plan, "old plan");
  put(trace, "old trace");
  for (const int signal : {SIGTERM, SIGINT, SIGHUP}) {
    std::fflush(nullptr);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      {
        const SignalsHeld outer;
        {
          const SignalsHeld inner;  // nests
          ::raise(signal);
        }
        OutputFiles outputs;
        outputs.add(plan, "new plan");
        outputs.add(trace, "new trace");
        outputs.commit();
      }
      std::_Exit(0);  // not reached: the held signal ends the child
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal) << status;
    EXPECT_EQ(entries(dir_), (std::vector<std::string>{"plan.json", "trace.json"})) << signal;
    EXPECT_EQ(contents(plan), "new plan");
    EXPECT_EQ(contents(trace), "new trace");
    put(plan, "old plan");
    put(trace, "old trace");
  }
}

// A process ended without unwinding (a rank whose peer failed: its socket thread calls
// std::_Exit) unlinks the temporaries being written first: remove_live_temporaries, then _Exit,
// half way through the file.
TEST_F(Files, EndingWithoutUnwindingAfterRemovingLiveTemporariesLeavesNone) {
  const fs::path out = path("trace.json");
  put(out, "old trace");
  std::fflush(nullptr);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    OutputFiles outputs;
    outputs.add_stream(out, [](const OutputFiles::Writer& write) {
      write("half a trace");
      remove_live_temporaries();
      std::_Exit(3);
    });
    outputs.commit();
    std::_Exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"trace.json"});
  EXPECT_EQ(contents(out), "old trace");
}

// A file above the size limit (`ulimit -f`): the write fails in one line and leaves nothing,
// rather than SIGXFSZ ending the process with the temporary left.
TEST_F(Files, AFileAboveTheSizeLimitIsAWriteErrorThatLeavesNothing) {
  const fs::path out = path("big.json");
  std::fflush(nullptr);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlimit limit{1024, 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      write_file_atomic(out, std::string(4096, 'x'));
    } catch (const Error& e) {
      std::_Exit(
          std::string(e.what()).find("write failed: File too large") != std::string::npos ? 7 : 8);
    }
    std::_Exit(9);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7) << status;
  EXPECT_TRUE(entries(dir_).empty());
}

TEST_F(Files, OneFileNamedTwiceAsAnOutputIsRefused) {
  OutputFiles outputs;
  outputs.add(path("x.json"), "a");
  EXPECT_NE(error_of([&] {
              outputs.add(dir_ / "." / "x.json", "b");
            }).find("cannot write: named twice as an output"),
            std::string::npos);
}

TEST_F(Files, ANewRelativeNameIsOneFileUnderEverySpelling) {
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  fs::create_directory("d");
  std::vector<std::string> errors;
  for (const fs::path& other : {fs::path("./y.json"), dir_ / "y.json", fs::path("d/../y.json")}) {
    OutputFiles outputs;
    outputs.add("y.json", "a");
    errors.push_back(error_of([&] { outputs.add(other, "b"); }));
  }
  fs::current_path(cwd);
  for (const std::string& error : errors)
    EXPECT_NE(error.find("cannot write: named twice as an output (also as y.json)"),
              std::string::npos)
        << error;
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"d"});
}

TEST_F(Files, AProcessesOpenFileIsNoOutput) {
  const fs::path link = path("out.json");
  fs::create_symlink("/proc/self/fd/1", link);
  for (const fs::path& name : {fs::path("/proc/self/fd/1"), link}) {
    EXPECT_EQ(error_of([&] { check_output(name); }),
              name.string() +
                  ": cannot write: names a process's open file (in /proc), not a file (give a "
                  "file name)");
  }
}

TEST_F(Files, UnderAGuardAnInputIsNeverAnOutput) {
  const fs::path input = path("p.json");
  put(input, "{}");
  const fs::path link = path("link.json");
  fs::create_symlink(input, link);
  {
    const FileGuard guard;
    read_json_file(input);
    EXPECT_EQ(error_of([&] { write_file_atomic(input, "x"); }),
              input.string() + ": cannot write: it is an input of this command");
    EXPECT_EQ(error_of([&] { check_output(link); }),
              link.string() + ": cannot write: it is an input of this command");
    write_file_atomic(path("out.json"), "1");
    EXPECT_EQ(error_of([&] { write_file_atomic(path("out.json"), "2"); }),
              path("out.json") + ": cannot write: this command already wrote it");
  }
  EXPECT_EQ(contents(input), "{}");
  EXPECT_EQ(contents(path("out.json")), "1");
  // Without a guard (a library caller) files are not remembered.
  read_json_file(input);
  EXPECT_NO_THROW(write_file_atomic(input, "{}"));
}

TEST_F(Files, ConcurrentWritersLeaveOneWholeFile) {
  const fs::path out = path("out.json");
  std::vector<std::thread> writers;
  writers.reserve(8);
  for (int w = 0; w < 8; ++w) {
    writers.emplace_back([&out, w] {
      const std::string text(100000, static_cast<char>('a' + w));
      for (int round = 0; round < 20; ++round)
        write_file_atomic(out, text);
    });
  }
  for (auto& t : writers)
    t.join();
  const std::string text = contents(out);
  ASSERT_EQ(text.size(), 100000U);
  EXPECT_EQ(text.find_first_not_of(text[0]), std::string::npos) << "one writer's file, whole";
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"out.json"});
}

}  // namespace
}  // namespace pipeplan
