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

// Whether a family takes P devices, V chunks and m micro-batches, as docs/design/schedules.md
// states its rule: interleaved with V > 1 needs m a multiple of P, dualpipe-v m >= 2P, dualpipe
// P even and m even and >= 2P; every other family takes any m (a family that refuses a shape
// has a rule to state, here too).
bool takes(const std::string& family, int p, int v, int m) {
  if (family == "interleaved") return v == 1 || m % p == 0;
  if (family == "dualpipe-v") return m >= 2 * p;
  if (family == "dualpipe") return p % 2 == 0 && m % 2 == 0 && m >= 2 * p;
  return true;
}

TEST(FamilyMemory, EveryFamilyPeaksWhereItsMemoryModelSays) {
  int checked = 0;
  int families = 0;
  for (const ScheduleFamily* family : schedule_families()) {
    const MemoryModel& memory = family->traits().memory;
    if (family->traits().needs_costs) {
      EXPECT_FALSE(memory.peak) << family->name() << ": fits the memory limit instead";
      continue;
    }
    ASSERT_TRUE(memory.peak) << family->name();
    EXPECT_FALSE(memory.formula.empty()) << family->name();
    ++families;
    int family_checked = 0;  // shapes planned and held to the model
    int family_taken = 0;    // shapes the family's rule takes
    const ChunkRule& chunks = family->traits().chunks;
    for (const int p : {1, 2, 3, 4, 6, 8}) {
      for (int v = chunks.min; v <= std::min(chunks.max, 3); ++v) {
        for (const int m : {1, 2, p, p + 1, 2 * p, 3 * p}) {
          const std::string shape = family->name() + " P=" + std::to_string(p) +
                                    " V=" + std::to_string(v) + " m=" + std::to_string(m);
          const bool rule = takes(family->name(), p, v, m);
          if (rule) ++family_taken;
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
            // are refused by name, and only those.
            EXPECT_FALSE(rule) << shape << " refused: " << e.what();
            EXPECT_TRUE(e.field() == "microbatches" ||
                        (family->name() == "dualpipe" && e.field() == "devices"))
                << shape << ": " << e.what();
            continue;
          }
          EXPECT_TRUE(rule) << shape << " planned, though its rule refuses it";
          std::int64_t peak = 0;
          for (const std::int64_t bytes : plan.sim.peak_memory_bytes())
            peak = std::max(peak, bytes);
          EXPECT_NEAR(static_cast<double>(peak) / kGiB, memory.peak(p, v, m), 1e-6)
              << shape << " (" << memory.formula << ")";
          ++family_checked;
        }
      }
    }
    EXPECT_GT(family_checked, 0) << family->name();
    EXPECT_EQ(family_checked, family_taken) << family->name();
    checked += family_checked;
  }
  // The eleven families of schedules/families/ with a memory model at least (a test binary may
  // register more), their shapes as their rules take them: gpipe, 1f1b, zb-h1, zb-h2, zb-v,
  // v-half and v-min 36 each, interleaved 80, looped-bfs 108, dualpipe-v 14, dualpipe 8.
  EXPECT_GE(families, 11);
  EXPECT_GE(checked, 462);
}

}  // namespace
}  // namespace pipeplan
