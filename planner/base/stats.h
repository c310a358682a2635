// Small statistics shared by the profiler, the benchmarks and the run report.
#pragma once

#include <vector>

namespace pipeplan {

// The median of `samples` (the mean of the middle two for an even count). Throws Error when
// there are none.
double median(std::vector<double> samples);

}  // namespace pipeplan
