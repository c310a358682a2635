// A progress bar on stderr for the profilers' long work: the part running and the parts done.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>

namespace pipeplan {

class Progress {
 public:
  Progress(bool enabled, int total) : enabled_(enabled), total_(total) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // A line left open (the work ended by an error) is ended, so that the error starts its own.
  ~Progress() {
    if (open_) std::fputc('\n', stderr);
  }
  // The part about to run, beside the count of those done.
  void start(const std::string& label) { draw(label + " ..."); }
  // The part finished.
  void step(const std::string& label) {
    ++done_;
    draw(label);
    if (enabled_ && done_ >= total_) {
      std::fputc('\n', stderr);
      open_ = false;
    }
  }

 private:
  void draw(const std::string& label) {
    if (!enabled_) return;
    const int width = 30, filled = width * std::min(done_, total_) / std::max(total_, 1);
    std::fprintf(stderr, "\r[%s%s] %d/%d %-32s", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done_, total_, label.c_str());
    std::fflush(stderr);
    open_ = true;
  }
  bool enabled_;
  int total_, done_ = 0;
  bool open_ = false;
};

}  // namespace pipeplan
