// Launching test programs under mpirun: loopback and shared memory only, as root (CI runs as
// root), more ranks than cores (CI has 2), and a hard time limit around every launch, so a
// hang fails the test instead of the CI job.
#pragma once

#include <cstdlib>
#include <string>

#include "tests/cli_support.h"

namespace pipeplan::testing {

// How many times `needle` occurs in `text` (the lines every rank prints, counted).
inline int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
    ++n;
  return n;
}

inline bool mpirun_found() {
  return run_shell("command -v mpirun").status == 0;
}

// In the ASan build (tools/dev/sanitize.sh) the ranks keep every check but the leak check: Open
// MPI does not free what libmpi, its plugins and hwloc allocate by MPI_Finalize (LeakSanitizer
// reported only allocations made from those libraries). Other builds ignore the variable.
inline std::string asan_option() {
  const char* asan = std::getenv("ASAN_OPTIONS");
  return " -x " + shell_quote("ASAN_OPTIONS=" + std::string(asan != nullptr ? asan : "") +
                              ":detect_leaks=0");
}

// Open MPI on one node: ob1 over shared memory (vader, no single-copy mechanism: containers often
// forbid process_vm_readv) or over TCP on the loopback interface; the runtime's own channel on
// loopback too. `seconds`: the hard limit (timeout -k sends SIGKILL 5 s after SIGTERM).
inline std::string mpirun(int ranks, const std::string& btl = "vader", int seconds = 120) {
  std::string line = "timeout -k 5 " + std::to_string(seconds) +
                     " mpirun --allow-run-as-root --oversubscribe --mca pml ob1 "
                     "--mca oob_tcp_if_include lo --mca btl self," +
                     btl;
  if (btl == "vader") line += " --mca btl_vader_single_copy_mechanism none";
  if (btl == "tcp") line += " --mca btl_tcp_if_include lo";
  return line + asan_option() + " -np " + std::to_string(ranks) + " ";
}

// The next app context of mpirun's MPMD form (`mpirun ... -np 2 A : -np 2 B`), which does not
// inherit the first one's -x: " : -x ASAN_OPTIONS=... -np <ranks> ".
inline std::string next_context(int ranks) {
  return " :" + asan_option() + " -np " + std::to_string(ranks) + " ";
}

}  // namespace pipeplan::testing
