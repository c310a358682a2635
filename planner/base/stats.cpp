#include "planner/base/stats.h"

#include <algorithm>

#include "planner/base/error.h"

namespace pipeplan {

double median(std::vector<double> samples) {
  if (samples.empty()) throw Error("median of no samples");
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  return n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

}  // namespace pipeplan
