// The files a recorded run leaves beside its plan and trace (bench/gpu/run.sh writes them):
// RUN.plan.txt, the plan command's output under a "# command: ..." header line, and RUN.run.json,
// the run report between '#' header and footer lines. How reports name runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipeplan {

// The words of a command line as a POSIX shell splits it (single and double quotes, backslash
// escapes). Throws Error naming `source` on an unterminated quote.
std::vector<std::string> split_command_line(std::string_view line, std::string_view source);

// The words of the "# command: " line of a recorded output. Throws Error naming `source` when it
// has none.
std::vector<std::string> recorded_command(std::string_view text, std::string_view source);

// Per device, the allocator's peak and the plan's predicted peak from a run report of a plan of
// `devices` devices: the CUDA backend's "peak_memory" rows (device, measured_bytes,
// predicted_bytes), one per device 0 .. devices - 1, measured at least 0 and predicted above 0,
// or the CPU backend's "peak_memory_bytes" (measured, one per device in device order;
// predicted_bytes then empty: the caller simulates the plan). Throws Error naming `source` and
// the field (a row's device outside the plan or given twice, a device without a row among them).
struct RecordedPeaks {
  std::vector<std::int64_t> measured_bytes;
  std::vector<std::int64_t> predicted_bytes;
};
RecordedPeaks recorded_peaks(std::string_view text, std::string_view source, int devices);

// The largest relative error of measured peaks over predicted ones, signed, in % (NaN when no
// device has a predicted peak).
double worst_memory_error_pct(const std::vector<std::int64_t>& predicted,
                              const std::vector<std::int64_t>& measured);

// Each run's name (the prefix's last component); where two share one, the first word of their
// folder's name too (call1/bpipe-mbs2, call3/bpipe-mbs2), and where that is shared as well, the
// folder above it (2026-11-27-pipelines/bpipe-mbs2, 2026-11-27b-pipelines/bpipe-mbs2), then one
// folder further up at a time until the labels differ; runs whose folders agree up to the root
// are labelled with their prefixes as given.
std::vector<std::string> run_labels(const std::vector<std::string>& prefixes);

}  // namespace pipeplan
