// Every registered family against its declared memory model (schedules/family.h): with uniform
// stages, F = P1 = P2, comm 0 and memory that a micro-batch holds from its forward until its
// backward has finished (F allocates M_B per device, p1 keeps it, p2 frees it), the simulated
// peak of the fullest device equals MemoryModel::peak(P, V, m) · M_B.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "planner/base/error.h"
#include "schedules/family.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

using testing::kGiB;

TEST(FamilyMemory, EveryFamilyPeaksWhereItsMemoryModelSays) {
  int checked = 0;
  for (const ScheduleFamily* family : schedule_families()) {
    const MemoryModel& memory = family->traits().memory;
    if (family->traits().needs_costs) {
      EXPECT_FALSE(memory.peak) << family->name() << ": fits the memory limit instead";
      continue;
    }
    ASSERT_TRUE(memory.peak) << family->name();
    EXPECT_FALSE(memory.formula.empty()) << family->name();
    const ChunkRule& chunks = family->traits().chunks;
    for (const int p : {1, 2, 3, 4, 6, 8}) {
      for (int v = chunks.min; v <= std::min(chunks.max, 3); ++v) {
        for (const int m : {1, 2, p, p + 1, 2 * p, 3 * p}) {
          testing::UniformPlan u{.devices = p,
                                 .microbatches = m,
                                 .chunks = v,
                                 .schedule = family->name(),
                                 .backward = resolve_backward_mode(*family, std::nullopt),
                                 .mem_f = 1,
                                 .mem_p1 = 0,
                                 .mem_p2 = -1,
                                 .p2_concat = 1};
          Plan plan;
          try {
            plan = testing::uniform_plan(u);
          } catch (const FieldError& e) {
            // Shapes a family does not take (interleaved: m a multiple of P; dualpipe: P even)
            // are refused by name.
            EXPECT_TRUE(e.field() == "microbatches" ||
                        (family->name() == "dualpipe" && e.field() == "devices"))
                << family->name() << ": " << e.what();
            continue;
          }
          std::int64_t peak = 0;
          for (const std::int64_t bytes : plan.sim.peak_memory_bytes())
            peak = std::max(peak, bytes);
          EXPECT_NEAR(static_cast<double>(peak) / kGiB, memory.peak(p, v, m), 1e-6)
              << family->name() << " (" << memory.formula << ") P=" << p << " V=" << v
              << " m=" << m;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 300);
}

}  // namespace
}  // namespace pipeplan
