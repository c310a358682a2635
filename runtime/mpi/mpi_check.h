// Shared by the MPI transport, group and session: MPI return codes as Errors (the communicators
// use MPI_ERRORS_RETURN, so a failed call comes back here instead of aborting the job), and the
// back-off of a polling wait (ranks are oversubscribed on small machines: never a busy spin).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "planner/base/error.h"

namespace pipeplan::mpi {

inline std::string error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(std::max(length, 0)));
}

// Throws Error("MPI: <call> failed: <MPI's message>") unless `code` is MPI_SUCCESS.
inline void check(int code, const char* call) {
  if (code != MPI_SUCCESS)
    throw Error(std::string("MPI: ") + call + " failed: " + error_string(code));
}

// A few yields (a message usually follows within microseconds), then sleeps growing to 500 µs.
class Backoff {
 public:
  void pause() {
    if (++polls_ <= 32) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(500));
  }

 private:
  int polls_ = 0;
  std::chrono::microseconds sleep_{20};
};

// Point-to-point tags on the transport's communicator (the group has one of its own).
inline constexpr int kTagPipeline = 1;  // Channel::pipeline: header, then each tensor
inline constexpr int kTagTransfer = 2;  // Channel::transfer (BPipe stashes)
inline constexpr int kTagNotice = 7;    // "this rank failed" (Transport::cancel)
inline constexpr int kTagGroup = 3;     // ProcessGroup messages

}  // namespace pipeplan::mpi
