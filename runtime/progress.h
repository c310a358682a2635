// A progress bar on stderr for the profilers' long work: one step per finished part.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>

namespace pipeplan {

class Progress {
 public:
  Progress(bool enabled, int total) : enabled_(enabled), total_(total) {}
  void step(const std::string& label) {
    ++done_;
    if (!enabled_) return;
    const int width = 30, filled = width * done_ / std::max(total_, 1);
    std::fprintf(stderr, "\r[%s%s] %d/%d %-28s", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done_, total_, label.c_str());
    if (done_ == total_) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  int total_, done_ = 0;
};

}  // namespace pipeplan
