// Shared by the GPU tests: skip (so ctest reports "skipped") when no GPU is present, and a
// relative-error measure for comparing the bf16 CUDA backend with the fp32 CPU reference.
#pragma once

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/cuda/context.h"

#define PIPEPLAN_REQUIRE_GPU()                                                            \
  do {                                                                                    \
    if (::pipeplan::cuda::cuda_device_count() == 0) {                                     \
      GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount found none (run on a GPU, see " \
                      "docs/cuda-backend.md)";                                            \
    }                                                                                     \
  } while (0)

namespace pipeplan::testing {

// ‖a − b‖ / ‖b‖ (b the reference); infinite on a size mismatch or NaN.
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

}  // namespace pipeplan::testing
