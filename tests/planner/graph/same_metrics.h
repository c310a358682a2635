// Field-by-field, bit-exact comparison of two steps' metrics (planner/graph/metrics.h), for the
// tests that check the simulator and a measured step compute them the same way.
#pragma once

#include <gtest/gtest.h>

#include "planner/graph/metrics.h"

namespace pipeplan::testing {

inline void expect_same_metrics(const StepMetrics& a, const StepMetrics& b) {
  EXPECT_EQ(a.makespan_us, b.makespan_us);
  EXPECT_EQ(a.max_stage_span_us, b.max_stage_span_us);
  EXPECT_EQ(a.bubble_ratio, b.bubble_ratio);
  EXPECT_EQ(a.span_bubble_ratio, b.span_bubble_ratio);
  EXPECT_EQ(a.tokens_per_s, b.tokens_per_s);
  EXPECT_EQ(a.mfu, b.mfu);
  ASSERT_EQ(a.devices.size(), b.devices.size());
  for (std::size_t d = 0; d < a.devices.size(); ++d) {
    const DeviceMetrics& x = a.devices[d];
    const DeviceMetrics& y = b.devices[d];
    EXPECT_EQ(x.busy_us, y.busy_us) << "device " << d;
    EXPECT_EQ(x.first_start_us, y.first_start_us) << "device " << d;
    EXPECT_EQ(x.last_end_us, y.last_end_us) << "device " << d;
    EXPECT_EQ(x.span_us, y.span_us) << "device " << d;
    EXPECT_EQ(x.bubble_ratio, y.bubble_ratio) << "device " << d;
    EXPECT_EQ(x.peak_memory_bytes, y.peak_memory_bytes) << "device " << d;
    EXPECT_EQ(x.memory_timeline, y.memory_timeline) << "device " << d;
  }
}

}  // namespace pipeplan::testing
